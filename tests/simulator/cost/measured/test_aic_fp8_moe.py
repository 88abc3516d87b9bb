"""aic prices an fp8 mixture of experts only at a scale scheme whose bundled rows time the
kernel vLLM runs for it on that GPU (simulator.cost.measured.aic_cost ``FP8_MOE_TIMED``,
``fp8_moe_rows``, ``fp8_moe_gap``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from specbatch.simulator.cost.measured.aic_cost import aic_covers
from specbatch.simulator.cost.measured.aic_moe_rows import (
    fp8_moe_gap,
    fp8_moe_rows,
    ptpc_kernel,
)
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.cost.resolve import CostAsk, resolve_cost
from specbatch.traces.models.shapes import get_shape

CONFIGS = Path(__file__).resolve().parents[4] / "traces" / "data" / "configs"
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
H100_FP8_MOE = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"
H100_BLOCK_MOE = "vllm_fp8moe_triton_tritonexperts"
B200_FP8_MOE = "vllm_modeloptfp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic"
QWEN_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
            "weight_block_size": [128, 128]}  # Qwen/Qwen3-30B-A3B-FP8's quantization_config


def scout_fp8(scheme: str):
    return dataclasses.replace(get_shape(SCOUT), quantization="fp8", quant_scheme=scheme)


def test_the_h100_rows_time_static_per_tensor_fp8_and_price_only_that():
    assert aic_covers("h100", scout_fp8("static"), None, 2) is None
    assert fp8_moe_gap(H100_FP8_MOE, "static") is None


@pytest.mark.parametrize("scheme, words", [
    ("channel", "per-channel weights (ptpc)"),
    ("", "dynamic activation scales"),
    ("mixed", "groups of different schemes"),
])
def test_another_fp8_moe_scheme_is_refused_in_one_line_naming_it(scheme, words):
    reason = aic_covers("h100", scout_fp8(scheme), None, 2)
    assert words in reason and H100_FP8_MOE in reason and "\n" not in reason
    assert words in aic_covers("h200", scout_fp8(scheme), None, 2)


def test_the_quantization_knob_is_vllms_online_fp8_with_dynamic_activations():
    # vLLM's online Fp8 MoE asks for kFp8DynamicTensorSym activations, which
    # FlashInferExperts does not take: Triton runs it, not the timed kernel
    reason = aic_covers("h100", get_shape(SCOUT), None, 2, quantization="fp8")
    assert "dynamic activation scales" in reason


def test_dense_fp8_and_bf16_moe_are_untouched():
    dense = dataclasses.replace(get_shape("llama-3.1-8b"), quantization="fp8",
                                quant_scheme="channel")
    assert aic_covers("h100", dense, None, 1) is None
    assert aic_covers("h100", get_shape(SCOUT), None, 2) is None


def test_a_kernel_the_catalogue_does_not_name_is_not_told_apart():
    assert fp8_moe_gap("vllm_fused_moe", "channel") is None


def ptpc_config(tmp_path, bundled: str) -> str:
    """A bundled model's config.json with RedHatAI's compressed-tensors FP8-dynamic (ptpc)
    quantization_config, written under ``tmp_path``."""
    data = json.loads((CONFIGS / bundled / "config.json").read_text())
    data["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                  "dynamic": True}}},
        "ignore": ["re:.*lm_head", "re:.*router$"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_auto_passes_a_ptpc_moe_over_aic_to_the_next_source(tmp_path):
    # Scout's bundled config.json with a compressed-tensors FP8-dynamic block, as RedHatAI's
    # Llama-4-Scout-17B-16E-Instruct-FP8-dynamic ships it
    path = ptpc_config(tmp_path, "llama-4-scout-17b-16e-instruct")
    assert get_shape(path).quant_scheme == "channel"
    choice = resolve_cost("auto", CostAsk("h100", path, "vicuna-68m", tp=2))
    assert choice.name == "calibrated"
    assert any(p.startswith("aic: ") and "per-channel weights (ptpc)" in p
               for p in choice.passed)


@pytest.mark.parametrize("capability, kernel", [
    (90, "CutlassExpertsFp8"), (100, "CutlassExpertsFp8"),  # cutlass_group_gemm_supported
    (89, "TritonExperts"), (120, "TritonExperts"), (80, "MarlinExperts"),  # no fp8 MMA
])
def test_vllm_runs_cutlass_for_ptpc_experts_from_9_0_to_10_x_and_triton_elsewhere(
        capability, kernel):
    assert kernel in ptpc_kernel(capability)


@pytest.mark.parametrize("gpu, kernel", [
    ("h100", "CutlassExpertsFp8"), ("h200", "CutlassExpertsFp8"), ("b200", "CutlassExpertsFp8"),
    ("rtxpro6000", "TritonExperts"),  # Triton, but its fp8 rows time FlashInfer CUTLASS
])
def test_ptpc_is_refused_where_no_row_times_the_kernel_vllm_runs(gpu, kernel):
    # Hopper's Triton fp8_block rows are not vLLM's ptpc kernel (CUTLASS): not a transfer
    for model, tp in ((SCOUT, 2), ("qwen3-30b-a3b", 1)):
        shape = dataclasses.replace(get_shape(model), quantization="fp8",
                                    quant_scheme="channel")
        reason = aic_covers(gpu, shape, None, tp)
        assert "per-channel weights (ptpc)" in reason and kernel in reason
        assert "no bundled row of this GPU times" in reason and "\n" not in reason


def test_ptpc_is_admitted_on_l40s_from_its_triton_per_tensor_rows_by_kernel_identity(tmp_path):
    path = ptpc_config(tmp_path, "llama-4-scout-17b-16e-instruct")
    assert aic_covers("l40s", get_shape(path), None, 2) is None
    model = build_cost_model("aic", "l40s", path, "vicuna-68m", tp=2)
    assert model.roles["target"].moe_dtype == "fp8"
    parts = model.breakdown("target", np.ones(32, dtype=int), np.full(32, 1024))
    # AIC L40S vLLM 0.22.0 moe_perf.parquet, fp8 (Triton fused_experts, per-tensor static),
    # vllm_fused_moe, balanced, hidden 5120, inter 8192, 16 experts, top 1, tp 2, ep 1:
    # 16 / 32 / 48 tokens 1.51108 / 1.51910 / 1.51876 ms; the curve's 3-point running median
    # (aic_curve.monotone; already non-decreasing there) at 32 tokens: 1.51876 ms; x 48 layers
    assert parts["experts"] == pytest.approx(48 * 1.5187625885009766e-3, rel=1e-6)
    note = model.sources()["target"]["experts"]["transfer"]
    assert "kernel identity" in note and "not measured" in note
    static = build_cost_model("aic", "l40s", block_config(tmp_path, "qwen3-30b-a3b"),
                              "vicuna-68m", tp=1)
    assert "transfer" not in static.sources()["target"]["experts"]


def test_the_l40s_transfer_entry_does_not_change_what_its_fp8_rows_price():
    # a measured entry names what rows time; the transfer entry only adds ptpc on cc 8.9
    qwen = get_shape("qwen3-30b-a3b")
    curves = {"moe_kernels": {"fp8": "vllm_fused_moe"}}
    for scheme in ("", "static", "block", "channel"):
        assert fp8_moe_rows(curves, qwen, scheme, 89) == ("fp8", None)


def block_config(tmp_path, bundled: str) -> str:
    """A bundled model's config.json with Qwen3-30B-A3B-FP8's 128x128 block quantization_config,
    written under ``tmp_path``."""
    data = json.loads((CONFIGS / bundled / "config.json").read_text())
    data["quantization_config"] = QWEN_FP8
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


def qwen_block(tmp_path) -> str:
    """Qwen3-30B-A3B's bundled config.json with Qwen3-30B-A3B-FP8's quantization_config."""
    return block_config(tmp_path, "qwen3-30b-a3b")


def test_vllms_block_kernel_per_gpu_decides_where_a_block_moe_is_priced():
    # H100 / H200 (compute capability 9.0) hold fp8_block rows of Triton, the experts class
    # vLLM runs for block fp8 under tp there; a B200 table of ModelOpt's per-tensor kernel only
    # prices no block MoE
    qwen = get_shape("qwen3-30b-a3b")
    curves = {"moe_kernels": {"fp8": H100_FP8_MOE, "fp8_block": H100_BLOCK_MOE}}
    assert fp8_moe_rows(curves, qwen, "block", 90) == ("fp8_block", None)
    assert fp8_moe_rows(curves, qwen, "static", 90) == ("fp8", None)
    dtype, reason = fp8_moe_rows(curves, qwen, "block", 100)  # the same rows on another GPU
    assert dtype == "" and "block-quantised weights" in reason
    dtype, reason = fp8_moe_rows({"moe_kernels": {"fp8": B200_FP8_MOE}}, qwen, "block", 100)
    assert dtype == "" and B200_FP8_MOE in reason and "fp8moe_triton_tritonexperts" in reason
    # a GPU whose fp8 rows' kernel no entry names is not told apart, as before
    assert fp8_moe_rows({"moe_kernels": {"fp8": "vllm_fused_moe"}}, qwen, "block", 89) == (
        "fp8", None)


def test_a_block_checkpoint_is_admitted_on_hopper_and_blackwell_and_refused_elsewhere(tmp_path):
    target = get_shape(qwen_block(tmp_path))
    assert (target.quantization, target.quant_scheme) == ("fp8", "block")
    assert target.moe_routing == "renormalize"
    for gpu in ("h100", "h200", "b200", "gb200"):
        for tp in (1, 2):
            assert aic_covers(gpu, target, None, tp) is None
    reason = aic_covers("rtxpro6000", target, None, 1)
    assert "block-quantised weights" in reason and "rtx_pro_6000_server" in reason
    assert "fp8moe_triton_tritonexperts" in reason and "\n" not in reason


def test_a_block_moe_is_priced_from_the_triton_block_rows_by_hand(tmp_path):
    model = build_cost_model("aic", "h100", qwen_block(tmp_path), "vicuna-68m", tp=1)
    assert model.roles["target"].moe_dtype == "fp8_block"
    parts = model.breakdown("target", np.ones(32, dtype=int), np.full(32, 1024))
    # AIC H100 vLLM 0.24.0 moe_perf.parquet, vllm_fp8moe_triton_tritonexperts, balanced,
    # hidden 2048, inter 768, 128 experts, top 8, tp 1, ep 1, 32 tokens: 0.24452267 ms; x 48
    # MoE layers
    assert parts["experts"] == pytest.approx(48 * 0.24452267098240554e-3, rel=1e-12)
    source = model.sources()["target"]["experts"]["source"]
    assert "fp8_block" in source and "'tp': 1, 'ep': 1" in source


def test_auto_prices_a_block_moe_with_aic_on_h100_and_b200(tmp_path):
    path = qwen_block(tmp_path)
    for gpu, tp in (("h100", 2), ("b200", 1)):
        assert resolve_cost("auto", CostAsk(gpu, path, "vicuna-68m", tp=tp)).name == "aic"


def scout_block(tmp_path) -> str:
    """Llama-4-Scout's bundled config.json with a 128x128 block fp8 quantization_config."""
    return block_config(tmp_path, "llama-4-scout-17b-16e-instruct")


@pytest.mark.parametrize("make, dtype, layers, seconds", [
    # AIC B200 vLLM 0.24.0 moe_perf.parquet, balanced, tp 1, ep 1, 32 tokens:
    # vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic, hidden 2048, inter 768,
    # 128 experts, top 8: 0.11833067 ms, x 48 MoE layers (Qwen3's renormalised softmax)
    (qwen_block, "fp8_block", 48, 0.11833066741625468e-3),
    # ..._trtllmfp8expertsmodular, hidden 5120, inter 8192, 16 experts, top 1: 0.32336533 ms,
    # x 48 MoE layers (Llama-4's custom router: the monolithic class does not fuse it)
    (scout_block, "fp8_block_modular", 48, 0.32336533069610596e-3),
])
def test_a_b200_block_moe_is_priced_from_its_routings_trtllm_class_by_hand(
        tmp_path, make, dtype, layers, seconds):
    model = build_cost_model("aic", "b200", make(tmp_path), "vicuna-68m", tp=1)
    assert model.roles["target"].moe_dtype == dtype
    parts = model.breakdown("target", np.ones(32, dtype=int), np.full(32, 1024))
    assert parts["experts"] == pytest.approx(layers * seconds, rel=1e-6)
    assert dtype in model.sources()["target"]["experts"]["source"]


@pytest.mark.parametrize("routing, admitted", [
    ("renormalize", True), ("deepseek_v3", True), ("minimax2", True),  # monolithic, timed
    ("default", False), ("llama4", False), ("unspecified", False),  # modular: not at this shape
])
def test_b200_admits_a_block_moe_only_where_its_routings_class_is_timed_at_its_shape(
        routing, admitted):
    shape = dataclasses.replace(get_shape("qwen3-30b-a3b"), quantization="fp8",
                                quant_scheme="block", moe_routing=routing)
    reason = aic_covers("b200", shape, None, 1)
    if admitted:
        assert reason is None
    else:
        assert "trtllmfp8expertsmodular" in reason and "(2048, 768, 128, 8)" in reason
        assert f"routing {routing}" in reason and "\n" not in reason


def test_b200_refuses_a_block_moe_whose_routing_was_not_read_in_one_line():
    shape = dataclasses.replace(get_shape("qwen3-30b-a3b"), quantization="fp8",
                                quant_scheme="block", moe_routing="")
    reason = aic_covers("b200", shape, None, 1)
    assert "routing not read" in reason and "\n" not in reason
    assert aic_covers("h100", shape, None, 1) is None  # Triton on Hopper, whatever the routing
