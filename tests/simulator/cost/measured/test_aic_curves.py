"""The compact AIConfigurator curves: what `cost import-aiconfigurator` writes besides the laws
(selection, narrowing, provenance) and that the bundled copy stays small and traceable."""

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.simulator.cost.measured.aic_curves import (
    BUNDLED,
    compact_frame,
    load_curves,
)
from specbatch.simulator.cost.measured.aic_import import (
    COMMON_SYSTEMS,
    bundle_systems,
    import_laws,
    write_laws,
)

SLICE = Path(__file__).parents[3] / "traces" / "data" / "aic_slice"


def test_import_writes_compact_curves_with_their_provenance(tmp_path):
    result = import_laws(SLICE, commit="abc")
    out = write_laws(result, tmp_path / "laws")
    prov = json.loads((out / "PROVENANCE.json").read_text())
    records = {r["family"]: r for r in prov["curves"]}
    assert set(records) == {"gemm", "attention_decode", "attention_prefill", "allreduce", "moe"}
    for r in records.values():
        path = out / r["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == r["sha256"]
        assert re.fullmatch(r"[0-9a-f]{64}", r["source_sha256"])
        assert r["source_path"].startswith("gpu/")
    raw = pd.read_parquet(out / records["gemm"]["path"])
    assert raw["latency_s"].dtype == np.float32 and raw["m"].dtype == np.int32
    curves = load_curves("gpu", str(out))
    gemm = curves["gemm"]
    # the slice's 24 bf16 rows (n, k in 1024 / 4096, latency in ms) come back in seconds
    assert len(gemm) == 24 and gemm["latency_s"].dtype == np.float64
    first = gemm[(gemm.m == 1) & (gemm.n == 1024) & (gemm.k == 1024)]["latency_s"].iloc[0]
    assert abs(first - 0.0060548183040000005e-3) < 1e-12
    assert list(curves["allreduce"]["elements"]) == [1024, 4096]


def test_a_system_added_to_a_bundle_is_the_full_imports(tmp_path):
    # two systems' tables (the slice under two names): one imported, the other added by
    # bundle_systems, against both imported at once; the first's files are left as they were
    root = tmp_path / "data"
    for name in ("gpu", "gpu2"):
        shutil.copytree(SLICE / "gpu", root / name)
    full = write_laws(import_laws(root, commit="abc"), tmp_path / "full")
    part = write_laws(import_laws(root, only=("gpu",), commit="abc"), tmp_path / "part")
    before = {p.name: p.read_bytes() for p in (part / "curves" / "gpu").iterdir()}
    bundle_systems(root, ("gpu2",), part)
    assert json.loads((part / "laws.json").read_text()) == json.loads(
        (full / "laws.json").read_text())
    assert {p.name: p.read_bytes() for p in (part / "curves" / "gpu").iterdir()} == before
    got, want = (json.loads((f / "PROVENANCE.json").read_text()) for f in (part, full))
    assert got == want  # the same records in the same order (the full import's is by system)
    for r in got["curves"]:
        assert hashlib.sha256((part / r["path"]).read_bytes()).hexdigest() == r["sha256"]
    # a second add replaces the system's records, it does not append them again
    bundle_systems(root, ("gpu2",), part)
    assert json.loads((part / "PROVENANCE.json").read_text()) == want


def test_compaction_keeps_only_the_default_groups():
    frame = pd.DataFrame({
        "dtype": ["bfloat16", "bfloat16", "fp8_block", "bfloat16"],
        "kernel": ["t", "t", "deepgemm", "t"], "m": [1, 2, 1, 1], "n": [1024, 1024, 1024, 128],
        "k": [512, 512, 512, 512], "latency_s": [1e-5, 2e-5, 1e-5, 1e-5]})
    kept = compact_frame("gemm", frame)
    assert list(kept["m"]) == [1, 2]  # fp8_block and n < 256 dropped
    att = pd.DataFrame({"kv_dtype": ["bfloat16"] * 3, "kernel": ["fa3", "fa3", "fa4"],
                        "batch": [1, 2, 1], "context": [7, 7, 7], "heads": [8] * 3,
                        "kv_heads": [8] * 3, "head_dim": [128] * 3, "window": [0, 0, 0],
                        "latency_s": [1e-5] * 3})
    assert list(compact_frame("attention_decode", att)["kernel"]) == ["fa3", "fa3"]


def test_the_bundled_curves_are_small_and_traced():
    prov = json.loads((BUNDLED / "PROVENANCE.json").read_text())
    total = 0
    for r in prov["curves"]:
        path = BUNDLED / r["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == r["sha256"]
        assert r["source_path"].startswith(r["system"] + "/")
        total += path.stat().st_size
    assert total < 3.6e6  # 3.48 MB: GB200 added 0.54 MB
    assert {r["system"] for r in prov["curves"]} == set(COMMON_SYSTEMS)


def moe_rows(dtype: str, kernel: str, n: int, ep: int = 1) -> pd.DataFrame:
    return pd.DataFrame({"dtype": [dtype] * n, "kernel": [kernel] * n,
                         "tokens": list(range(1, n + 1)), "hidden": [2048] * n,
                         "inter": [768] * n, "experts": [128] * n, "topk": [8] * n,
                         "tp": [1] * n, "ep": [ep] * n, "distribution": ["balanced"] * n,
                         "latency_s": [1e-5] * n})


def test_block_fp8_moe_keeps_the_kernel_vllm_runs_under_tp_not_the_one_with_most_rows():
    # H100's fp8_block rows: FlashInfer CUTLASS (vLLM's pick with expert parallelism) has the
    # most rows; Triton (its pick under tp, _get_priority_backends) is the one kept
    frame = pd.concat([moe_rows("fp8_block", "vllm_fp8moe_flashinfer_cutlass_flashinferexperts",
                                3, ep=2),
                       moe_rows("fp8_block", "vllm_fp8moe_triton_tritonexperts", 2),
                       moe_rows("bfloat16", "a", 2), moe_rows("bfloat16", "b", 1)])
    kept = compact_frame("moe", frame)
    assert sorted(set(zip(kept["dtype"].astype(str), kept["kernel"].astype(str)))) == [
        ("bfloat16", "a"), ("fp8_block", "vllm_fp8moe_triton_tritonexperts")]
    assert len(kept) == 4


def test_a_gpu_without_the_named_block_kernel_keeps_no_block_rows():
    # fp8_block rows of a kernel neither MOE_KERNELS nor MOE_CLASSES names: none kept
    frame = pd.concat([moe_rows("fp8_block", "vllm_fp8moe_flashinfer_trtllm_x", 4),
                       moe_rows("fp8", "vllm_modeloptfp8moe_y", 2)])
    assert set(compact_frame("moe", frame)["dtype"].astype(str)) == {"fp8"}


def test_the_bundled_block_rows_are_triton_on_hopper_trtllm_on_blackwell_l40s_forward_filled():
    for system in COMMON_SYSTEMS:
        moe = load_curves(system).get("moe")
        block = moe[moe["dtype"] == "fp8_block"] if moe is not None else []
        if system in ("h100_sxm", "h200_sxm"):
            assert set(block["kernel"]) == {"vllm_fp8moe_triton_tritonexperts"}
            assert set(block["ep"]) == {1} and len(block) == 1998
        elif system == "l40s":
            # 0.22.0 times no fp8_block: every row is 0.24.0's, declared by its reuse.yaml
            assert set(block["kernel"]) == {"vllm_fp8moe_triton_tritonexperts"}
            assert set(block["from_version"]) == {"0.24.0"} and len(block) == 5074
        elif system in ("b200_sxm", "gb200"):
            # TRT-LLM's two block classes, each under its own dtype (picked by routing method)
            modular = moe[moe["dtype"] == "fp8_block_modular"]
            assert set(block["kernel"]) == {
                "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic"}
            assert set(modular["kernel"]) == {
                "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular"}
            assert (len(block), len(modular)) == (3807, 1269)
        else:
            assert len(block) == 0


def test_l40s_keeps_its_native_kernel_per_dtype_and_marks_every_filled_row():
    curves = load_curves("l40s")
    moe, dec = curves["moe"], curves["attention_decode"]
    # bf16 / fp8 MoE: 0.22.0's own vllm_fused_moe only (0.24.0's Triton-experts rows at
    # shapes it lacks are another kernel label: left out)
    for dtype in ("bfloat16", "fp8"):
        sub = moe[moe["dtype"] == dtype]
        assert set(sub["kernel"]) == {"vllm_fused_moe"} and set(sub["from_version"]) == {""}
    mx = moe[moe["dtype"] == "w4a16_mxfp4"]
    assert set(mx["kernel"]) == {"vllm_gptossmxfp4moe_marlin_marlinexperts"}
    assert set(mx["from_version"]) == {"0.24.0"}
    # bf16 KV decode: 0.22.0's FlashAttention rows and 0.24.0's FA2 rows, one kernel on 8.9
    # (SAME_KERNEL), under the FA2 label; fp8 KV decode, which 0.22.0 does not time: 0.24.0's
    # FlashInfer rows
    bf16 = dec[dec["kv_dtype"] == "bfloat16"]
    assert set(bf16["kernel"]) == {"vllm_flash_attn_fa2"}
    assert set(bf16["from_version"]) == {"", "0.24.0"}
    assert set(dec.loc[dec["kv_dtype"] == "fp8", "from_version"]) == {"0.24.0"}
    for system in COMMON_SYSTEMS:
        if system != "l40s":
            assert all("from_version" not in f.columns for f in load_curves(system).values())


def test_one_kernels_two_labels_share_a_curve_only_where_the_gpu_runs_that_kernel_alone():
    # a filled decode table: the native rows' pre-0.24 label, the donor's FA2 label
    frame = pd.DataFrame({
        "kv_dtype": ["bfloat16"] * 3, "kernel": ["vllm_flash_attn", "vllm_flash_attn_fa2",
                                                 "vllm_flash_attn_fa2"],
        "from_version": ["", "0.24.0", "0.24.0"], "batch": [1, 2, 4], "context": [8] * 3,
        "heads": [8] * 3, "kv_heads": [8] * 3, "head_dim": [128, 128, 64], "window": [0] * 3,
        "latency_s": [1e-5, 2e-5, 3e-5]})
    on_ada = compact_frame("attention_decode", frame, 89)  # 8.9: FA2 is the only FA
    assert set(on_ada["kernel"]) == {"vllm_flash_attn_fa2"} and len(on_ada) == 3
    on_hopper = compact_frame("attention_decode", frame, 90)  # 9.0: the old label may be FA3
    assert list(on_hopper["kernel"]) == ["vllm_flash_attn"] and len(on_hopper) == 1


def test_mxfp4_moe_keeps_the_gpt_oss_kernel_not_compressed_tensors_marlin():
    # H100's w4a16_mxfp4 rows: compressed-tensors' Marlin (another model's shape, the most
    # rows) and gpt-oss's OAI Triton kernel; only the second is gpt-oss's
    frame = pd.concat([
        moe_rows("w4a16_mxfp4", "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts", 3),
        moe_rows("w4a16_mxfp4", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
                 2)])
    kept = compact_frame("moe", frame)
    assert set(kept["kernel"].astype(str)) == {
        "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"}
    assert len(kept) == 2


#: AIConfigurator's gpt-oss MXFP4 kernel per bundled GPU (vLLM 0.24.0 tables; L40S's bundled
#: 0.22.0 table times none)
GPT_OSS_KERNELS = {
    "h100_sxm": "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
    "h200_sxm": "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
    "b200_sxm": "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
    "gb200": "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
    "rtx_pro_6000_server": "vllm_gptossmxfp4moe_marlin_marlinexperts",
    # 0.24.0's rows, forward-filled into 0.22.0 by its reuse.yaml
    "l40s": "vllm_gptossmxfp4moe_marlin_marlinexperts"}


def test_the_bundled_mxfp4_rows_are_gpt_oss_shapes_of_one_kernel_per_gpu():
    for system in COMMON_SYSTEMS:
        moe = load_curves(system).get("moe")
        rows = moe[moe["dtype"] == "w4a16_mxfp4"] if moe is not None else []
        if system not in GPT_OSS_KERNELS:
            assert len(rows) == 0
            continue
        assert set(rows["kernel"]) == {GPT_OSS_KERNELS[system]}
        shapes = set(zip(rows["hidden"], rows["inter"], rows["experts"], rows["topk"]))
        assert shapes == {(2880, 2880, 32, 4), (2880, 2880, 128, 4)}
        # balanced routing only: 297 + 351 rows of the 32- and 128-expert shapes
        assert len(rows) == 648
