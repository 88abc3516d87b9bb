"""AIConfigurator's declared reuse (``reuse.yaml``): a table keeps every native row, takes the
donor version's rows at the shapes it lacks, a folder without its own file takes the donor's
whole table, and every taken row names its donor (traces.public.aic_reuse)."""

from __future__ import annotations

import pandas as pd
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_curves import compact_frame
from specbatch.traces.public.aiconfigurator import import_aiconfigurator, table_path


def write(root, folder, version, name, frame):
    d = root / "gpu" / folder / "vllm" / version
    d.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(d / f"{name}.parquet")


def gemm(shapes, kernel, latency_ms, dtype="bfloat16"):
    f = pd.DataFrame(shapes, columns=["m", "n", "k"])
    return f.assign(kernel_source=kernel, gemm_dtype=dtype, latency=latency_ms)


def reuse(root, folder, version, *entries):
    text = "schema_version: 1\nreuse:\n" + "".join(
        f"- table: {t}\n  from_version: {v}\n  reason: 'fill {t}'\n  approved_by: someone\n"
        for t, v in entries)
    d = root / "gpu" / folder / "vllm" / version
    d.mkdir(parents=True, exist_ok=True)
    (d / "reuse.yaml").write_text(text)


def comm(version, root):
    f = pd.DataFrame({"kernel_source": "ar", "allreduce_dtype": "bfloat16", "num_gpus": [2],
                      "message_size": [1024], "backend": "vllm_graph", "latency": [0.01]})
    write(root, "comm", version, "custom_allreduce_perf", f)


@pytest.fixture
def tables(tmp_path):
    # 0.22.0 times two bf16 shapes itself; 0.24.0 times one of them again (another latency
    # and kernel label), a third bf16 shape, and fp8; 0.22.0 declares gemm_perf from 0.24.0
    write(tmp_path, "gemm", "0.22.0", "gemm_perf",
          gemm([(1, 256, 256), (8, 256, 256)], "native", [0.010, 0.020]))
    write(tmp_path, "gemm", "0.24.0", "gemm_perf", pd.concat([
        gemm([(1, 256, 256), (64, 256, 256)], "donor", [0.5, 0.030]),
        gemm([(1, 256, 256)], "cutlass", [0.007], dtype="fp8")]))
    reuse(tmp_path, "gemm", "0.22.0", ("gemm_perf", "0.24.0"))
    comm("0.22.0", tmp_path)
    return tmp_path


def test_native_rows_are_kept_and_only_missing_shapes_filled(tables):
    t = import_aiconfigurator(tables, "gpu", "0.22.0")
    g = t.frames["gemm"].sort_values(["dtype", "m"]).reset_index(drop=True)
    assert list(zip(g["dtype"], g["m"], g["kernel"], g["from_version"])) == [
        ("bfloat16", 1, "native", ""), ("bfloat16", 8, "native", ""),
        ("bfloat16", 64, "donor", "0.24.0"), ("fp8", 1, "cutlass", "0.24.0")]
    # the native latency of (1, 256, 256) stands; the donor's 0.5 ms is not taken
    assert g["latency_s"].tolist() == pytest.approx([1e-5, 2e-5, 3e-5, 7e-6])


def test_each_donor_file_is_recorded_with_the_rows_taken_and_the_reason(tables):
    files = import_aiconfigurator(tables, "gpu", "0.22.0").provenance["files"]
    gemm_files = [f for f in files if f["family"] == "gemm"]
    assert [f["path"] for f in gemm_files] == ["gpu/gemm/vllm/0.22.0/gemm_perf.parquet",
                                               "gpu/gemm/vllm/0.24.0/gemm_perf.parquet"]
    assert [f["rows"] for f in gemm_files] == [2, 2]
    assert "reuse" not in gemm_files[0]
    assert gemm_files[1]["reuse"] == {"from_version": "0.24.0", "reason": "fill gemm_perf",
                                      "approved_by": "someone",
                                      "declared_in": "gpu/gemm/vllm/0.22.0/reuse.yaml"}
    assert len(gemm_files[1]["sha256"]) == 64


def test_a_folder_without_its_own_file_takes_the_donors_whole_table(tables):
    write(tables, "moe", "0.24.0", "moe_perf", pd.DataFrame({
        "kernel_source": "triton", "moe_dtype": "bfloat16", "num_tokens": [1, 8],
        "hidden_size": 2048, "inter_size": 768, "topk": 8, "num_experts": 128,
        "moe_tp_size": 1, "moe_ep_size": 1, "distribution": "balanced",
        "latency": [0.1, 0.2]}))
    reuse(tables, "moe", "0.22.0", ("moe_perf", "0.24.0"))
    t = import_aiconfigurator(tables, "gpu", "0.22.0")
    assert t.frames["moe"]["tokens"].tolist() == [1, 8]
    assert set(t.frames["moe"]["from_version"]) == {"0.24.0"}
    [rec] = [f for f in t.provenance["files"] if f["family"] == "moe"]
    assert rec["path"] == "gpu/moe/vllm/0.24.0/moe_perf.parquet" and rec["rows"] == 2


def test_a_donor_row_of_another_kernel_does_not_join_the_native_kernels_curve(tables):
    t = import_aiconfigurator(tables, "gpu", "0.22.0")
    c = compact_frame("gemm", t.frames["gemm"])
    # bf16: the native kernel's rows only (the donor's (64, 256, 256) of another label is
    # left out); fp8, a dtype the native table lacks: the donor's rows, marked
    assert list(zip(c["dtype"].astype(str), c["kernel"].astype(str), c["m"],
                    c["from_version"].astype(str))) == [
        ("bfloat16", "native", 1, ""), ("bfloat16", "native", 8, ""),
        ("fp8", "cutlass", 1, "0.24.0")]


def test_a_curve_with_no_taken_row_has_no_from_version_column(tables):
    t = import_aiconfigurator(tables, "gpu", "0.22.0")
    native = t.frames["gemm"][t.frames["gemm"]["from_version"] == ""]
    assert "from_version" not in compact_frame("gemm", native).columns


def test_the_declared_donor_alone_is_read_not_the_donors_own_declaration(tables):
    # 0.24.0 declares gemm_perf from 0.30.0; 0.22.0 reads 0.24.0's file only
    write(tables, "gemm", "0.30.0", "gemm_perf", gemm([(512, 256, 256)], "far", [0.1]))
    reuse(tables, "gemm", "0.24.0", ("gemm_perf", "0.30.0"))
    g = import_aiconfigurator(tables, "gpu", "0.22.0").frames["gemm"]
    assert 512 not in g["m"].tolist()


def test_an_all_reduce_table_of_its_own_is_never_filled(tables):
    comm("0.24.0", tables)
    reuse(tables, "comm", "0.22.0", ("custom_allreduce_perf", "0.24.0"))
    ar = import_aiconfigurator(tables, "gpu", "0.22.0").frames["allreduce"]
    assert len(ar) == 1 and set(ar["from_version"]) == {""}
    # a version folder without one takes the donor's (AIConfigurator's legacy-path case)
    assert table_path(tables, "gpu", "comm", "custom_allreduce_perf", "0.30.0") is None
    reuse(tables, "comm", "0.30.0", ("custom_allreduce_perf", "0.24.0"))
    assert table_path(tables, "gpu", "comm", "custom_allreduce_perf", "0.30.0") == (
        tables / "gpu" / "comm" / "vllm" / "0.24.0" / "custom_allreduce_perf.parquet")


def test_a_declaration_without_its_reason_is_refused_naming_the_file(tables):
    (tables / "gpu" / "gemm" / "vllm" / "0.22.0" / "reuse.yaml").write_text(
        "reuse:\n- table: gemm_perf\n  from_version: 0.24.0\n")
    with pytest.raises(SpecbatchError, match=r"0\.22\.0/reuse\.yaml: reuse\[0\] needs"):
        import_aiconfigurator(tables, "gpu", "0.22.0")
