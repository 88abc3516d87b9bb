"""traces.public.llmservingsim_attention: LLMServingSim's attention.csv rows, on a bundled slice of
the public file (tests/traces/data/llmservingsim_slice/PROVENANCE.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.public.llmservingsim_attention import (
    COLUMNS,
    import_llmservingsim_attention,
    load_attention,
)

SLICE = Path(__file__).resolve().parents[1] / "data" / "llmservingsim_slice"
CSV = Path("H100/meta-llama/Llama-3.1-70B/tp4/attention.csv")


def test_slice_keeps_prefill_and_the_power_of_two_decode_grid():
    rows, files = import_llmservingsim_attention(SLICE)
    assert list(rows.columns) == list(COLUMNS)
    assert set(rows["gpu"]) == {"h100"} and set(rows["model"]) == {"meta-llama/Llama-3.1-70B"}
    pre = rows[rows["phase"] == "prefill"]
    assert pre[["chunk", "kv"]].values.tolist() == [[32, 32], [32, 64]]
    dec = rows[rows["phase"] == "decode"]
    # batch 3 (not a power of two), kv 96 (3 x 32) and kv 3648 are left out
    assert dec[["batch", "kv"]].values.tolist() == [[1, 32], [4, 128]]
    assert dec["median_ms"].tolist() == pytest.approx([0.005216, 0.005312])
    assert (rows["tp"] == 4).all() and (rows["n_kv_head"] == 8).all()
    assert files[0]["path"] == str(CSV) and files[0]["rows_kept"] == 4


def test_bad_attention_file_is_one_line(tmp_path):
    root = tmp_path / "s"
    shutil.copytree(SLICE, root)
    f = root / CSV
    f.write_text(f.read_text().replace("time_stats.attn_decode.median", "decode_p50"))
    with pytest.raises(SpecbatchError, match=r"attention.csv: column "
                                             r"'time_stats.attn_decode.median' missing"):
        import_llmservingsim_attention(root)
    with pytest.raises(SpecbatchError, match="no <gpu>/<org>/<model>/tp<N>/attention.csv"):
        import_llmservingsim_attention(tmp_path / "nothing")


def test_bundled_rows_are_the_h100_tp4_files():
    rows = load_attention()
    assert set(rows["model"]) == {"meta-llama/Llama-3.1-70B", "mistralai/Mixtral-8x7B-v0.1"}
    assert set(rows["tp"]) == {4} and set(rows["phase"]) == {"decode", "prefill"}
    assert len(rows) < 1000
