"""traces.public.vidur_profiles: Vidur's profile layout read into the compact table, on a bundled
slice of the public CSVs (tests/traces/data/vidur_slice/PROVENANCE.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.public.vidur_profiles import (
    BUNDLED,
    OPS,
    VIDUR_SOURCE,
    import_vidur,
    keep_tokens,
    load_profile_columns,
    load_public_profiles,
    write_public_profiles,
)

SLICE = Path(__file__).resolve().parents[1] / "data" / "vidur_slice"
MLP = Path("compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv")


def test_slice_rows_are_the_kept_token_counts_with_duplicates_merged():
    p = import_vidur(SLICE, VIDUR_SOURCE)
    c = p.compute
    # 136 tokens is dropped (keep_tokens), the two 4096-token tp 1 rows merge into one
    assert sorted(zip(c["tp"], c["num_tokens"])) == [
        (1, 1), (1, 2), (1, 8), (1, 160), (1, 4096), (2, 1), (2, 2), (2, 8), (2, 160)]
    row = c[(c["tp"] == 1) & (c["num_tokens"] == 4096)].iloc[0]
    assert row["mlp_up_proj_ms"] == pytest.approx((0.987 + 0.999) / 2)  # median of 2
    one = c[(c["tp"] == 2) & (c["num_tokens"] == 1)].iloc[0]
    assert one["mlp_up_proj_ms"] == pytest.approx(0.036)
    assert (row["gpu"], row["model"]) == ("h100", "meta-llama/Llama-2-7b-hf")
    assert (row["n_embd"], row["n_head"], row["n_kv_head"], row["n_expanded_embd"]) == (
        4096, 32, 32, 11008)
    assert bool(row["gated"])
    for op in OPS:
        assert f"{op}_ms" in c.columns and f"{op}_std_ms" in c.columns


def test_slice_network_keeps_single_node_rows():
    n = import_vidur(SLICE).network
    # world 16 spans 2 nodes (devices_per_node 8): left out, as Vidur's predictor does
    assert n["world"].tolist() == [2, 2, 2]
    assert n["size_bytes"].tolist() == [2048, 10240, 18432]
    assert n["median_ms"].tolist() == pytest.approx([0.010, 0.046, 0.046])


def test_keep_tokens_grid():
    n = np.array([1, 2, 8, 120, 136, 160, 544, 576, 1088, 1280, 1344, 8192, 12288])
    assert keep_tokens(n).tolist() == [True, True, True, True, False, True, False, True,
                                       False, True, False, True, True]


def test_write_then_load_round_trip_with_provenance(tmp_path):
    p = import_vidur(SLICE, VIDUR_SOURCE)
    out = write_public_profiles(p, tmp_path / "prof")
    back = load_public_profiles(out)
    assert back.compute["mlp_up_proj_ms"].to_numpy() == pytest.approx(
        p.compute["mlp_up_proj_ms"].to_numpy(), rel=1e-6)  # stored as float32
    prov = back.provenance
    assert prov["source"]["commit"] == VIDUR_SOURCE["commit"]
    assert prov["source"]["licence"] == "MIT"
    paths = {f["path"] for f in prov["files"]}
    assert str(MLP) in paths and "network/a100_dgx/all_reduce.csv" in paths
    assert all(len(f["sha256"]) == 64 for f in prov["files"])


def test_write_refuses_a_folder_holding_something_else(tmp_path):
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "notes.txt").write_text("mine")
    with pytest.raises(SpecbatchError, match="prof"):
        write_public_profiles(import_vidur(SLICE), tmp_path / "prof")
    assert (tmp_path / "prof" / "notes.txt").read_text() == "mine"


def copy_slice(tmp_path: Path) -> Path:
    root = tmp_path / "slice"
    shutil.copytree(SLICE, root)
    return root


def test_missing_column_names_file_and_column(tmp_path):
    root = copy_slice(tmp_path)
    f = root / MLP
    text = f.read_text().replace("time_stats.mlp_act.median", "time_stats.mlp_act.p50")
    f.write_text(text)
    with pytest.raises(SpecbatchError) as err:
        import_vidur(root)
    msg = str(err.value)
    assert "\n" not in msg and "mlp.csv" in msg and "'time_stats.mlp_act.median'" in msg


def test_bad_value_names_column_and_row(tmp_path):
    root = copy_slice(tmp_path)
    f = root / MLP
    lines = f.read_text().splitlines()
    header = lines[0].split(",")
    col = header.index("time_stats.attn_pre_proj.median")
    cells = lines[3].split(",")
    cells[col] = "fast"
    lines[3] = ",".join(cells)
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecbatchError, match=r"'time_stats.attn_pre_proj.median' row 4: "
                                             r"expected a finite positive number, got 'fast'"):
        import_vidur(root)


def test_unknown_collective_and_empty_folder(tmp_path):
    root = copy_slice(tmp_path)
    f = root / "network/a100_dgx/all_reduce.csv"
    f.write_text(f.read_text().replace("all_reduce,", "all_gather,"))
    with pytest.raises(SpecbatchError, match="column 'collective'"):
        import_vidur(root)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecbatchError, match="no compute/<gpu>"):
        import_vidur(tmp_path / "empty")


def test_load_names_a_missing_file(tmp_path):
    with pytest.raises(SpecbatchError, match="compute.parquet: missing"):
        load_public_profiles(tmp_path)


def test_bundled_table_is_small_and_covers_the_public_cells():
    size = sum(p.stat().st_size for p in BUNDLED.iterdir())
    assert size < 400_000
    p = load_public_profiles()
    assert set(p.compute["gpu"]) == {"h100", "a100", "a40"}
    assert set(p.compute["tp"]) == {1, 2, 4, 8}
    assert p.provenance["source"]["repository"] == "https://github.com/microsoft/vidur"
    assert {"h100_dgx", "a100_dgx"} <= set(p.network["cluster"])


@pytest.mark.parametrize("folder", ["bundled", "slice"])
def test_columns_without_pandas_equal_the_dataframes(tmp_path, folder):
    """load_profile_columns (pyarrow only) is the DataFrame reader's twin: same columns in the
    same order, same dtypes, same values, on the bundled table and on a fresh import."""
    where = BUNDLED if folder == "bundled" else write_public_profiles(
        import_vidur(SLICE, VIDUR_SOURCE), tmp_path / "prof")
    frames, columns = load_public_profiles(where), load_profile_columns(where)
    for name, frame in (("compute", frames.compute), ("network", frames.network)):
        assert list(columns[name]) == list(frame.columns)
        for col in frame.columns:
            want, got = frame[col].to_numpy(), columns[name][col]
            assert got.dtype == want.dtype, col
            assert np.array_equal(got, want), col


def test_columns_reader_refuses_what_the_dataframe_reader_refuses(tmp_path):
    with pytest.raises(SpecbatchError, match="compute.parquet: missing"):
        load_profile_columns(tmp_path)
    out = write_public_profiles(import_vidur(SLICE, VIDUR_SOURCE), tmp_path / "prof")
    (out / "network.parquet").write_bytes(b"not parquet")
    with pytest.raises(SpecbatchError, match="network.parquet"):
        load_profile_columns(out)


def test_reading_the_columns_imports_no_pandas_and_once_kept_no_pyarrow(tmp_path):
    """The first process reads the tables with pyarrow alone; the next reads the columns
    kept in the cache folder (specbatch.array_cache), the same values, without pyarrow."""
    code = ("import sys\n"
            "from specbatch.traces.public.vidur_profiles import load_profile_columns\n"
            "c = load_profile_columns()\n"
            "print(sum(len(v) for t in c.values() for v in t.values()),"
            " 'pandas' in sys.modules, 'pyarrow' in sys.modules)")
    env = dict(os.environ, SPECBATCH_CACHE=str(tmp_path))
    out = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env).stdout.split() for _ in range(2)]
    assert out[0][1:] == ["False", "True"] and out[1][1:] == ["False", "False"]
    assert out[0][0] == out[1][0]


def test_kept_columns_equal_freshly_read_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path / "cache"))
    fresh, kept = load_profile_columns(), load_profile_columns()
    for name in fresh:
        for col, values in fresh[name].items():
            assert kept[name][col].dtype == values.dtype and np.array_equal(kept[name][col], values)
