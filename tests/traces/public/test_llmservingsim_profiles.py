"""The importer of LLMServingSim's per-layer profiles (traces.public.llmservingsim_profiles)."""

from __future__ import annotations

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.public.llmservingsim_profiles import (
    bundled_profiles,
    profile_gpus,
    read_profile,
)


def test_the_bundled_profiles_cover_every_run_s_gpu_model_and_tp():
    sets = bundled_profiles()
    assert set(sets) == {("rtx4090", "llama-3.1-8b", 1), ("rtxpro6000", "llama-3.1-8b", 1),
                         ("rtxpro6000", "qwen3-32b", 1), ("rtxpro6000", "qwen3-32b", 2),
                         ("rtxpro6000", "qwen3-30b-a3b", 1)}
    assert profile_gpus() == ("rtx4090", "rtxpro6000")
    for key, ps in sets.items():
        assert {"dense", "attention", "per_sequence"} <= set(ps.files), key
        assert ps.config.is_file()
    assert "moe" in sets[("rtxpro6000", "qwen3-30b-a3b", 1)].files


def test_a_repeated_header_line_is_dropped_and_rows_sort_by_key(tmp_path):
    path = tmp_path / "dense.csv"
    path.write_text("layer,tokens,time_us\nqkv_proj,2,5.0\nlayer,tokens,time_us\n"
                    "qkv_proj,1,4.5\n")
    rows = read_profile(path, "dense")
    assert rows["tokens"].tolist() == [1.0, 2.0]
    assert rows["time_us"].tolist() == [4.5, 5.0]
    bundled = bundled_profiles()[("rtxpro6000", "qwen3-30b-a3b", 1)].files["dense"]
    assert "layer" not in set(read_profile(bundled, "dense")["layer"])  # the file repeats it


def test_attention_tables_are_read_from_gzip():
    rows = read_profile(bundled_profiles()[("rtxpro6000", "qwen3-32b", 2)].files["attention"],
                        "attention")
    assert len(rows) == 19364
    assert list(rows.columns) == ["prefill_chunk", "kv_prefill", "n_decode", "kv_decode",
                                  "time_us"]


def test_a_bad_file_is_one_line_naming_file_column_and_row(tmp_path):
    path = tmp_path / "moe.csv"
    path.write_text("tokens,time_us\n1,2\n")
    with pytest.raises(SpecbatchError, match=r"moe.csv: column 'activated_experts' missing"):
        read_profile(path, "moe")
    path.write_text("tokens,activated_experts,time_us\n1,8,2\n2,8,x\n")
    with pytest.raises(SpecbatchError, match=r"moe.csv: column 'time_us' row 3: expected a "
                                             r"finite positive number, got 'x'"):
        read_profile(path, "moe")
    with pytest.raises(SpecbatchError, match="profile kind 'mlp': expected one of"):
        read_profile(path, "mlp")
