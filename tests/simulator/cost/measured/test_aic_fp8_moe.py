"""aic prices an fp8 mixture of experts only at the scale scheme its fp8 MoE rows timed
(simulator.cost.measured.aic_cost ``FP8_MOE_TIMED``, ``fp8_moe_gap``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specbatch.simulator.cost.measured.aic_cost import aic_covers, fp8_moe_gap
from specbatch.simulator.cost.resolve import CostAsk, resolve_cost
from specbatch.traces.models.shapes import get_shape

CONFIGS = Path(__file__).resolve().parents[4] / "traces" / "data" / "configs"
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
H100_FP8_MOE = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"


def scout_fp8(scheme: str):
    return dataclasses.replace(get_shape(SCOUT), quantization="fp8", quant_scheme=scheme)


def test_the_h100_rows_time_static_per_tensor_fp8_and_price_only_that():
    assert aic_covers("h100", scout_fp8("static"), None, 2) is None
    assert fp8_moe_gap(H100_FP8_MOE, "static") is None


@pytest.mark.parametrize("scheme, words", [
    ("channel", "per-channel weights (ptpc)"),
    ("block", "block-quantised weights"),
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


def test_auto_passes_a_ptpc_moe_over_aic_to_the_next_source(tmp_path):
    # Scout's bundled config.json with a compressed-tensors FP8-dynamic block, as RedHatAI's
    # Llama-4-Scout-17B-16E-Instruct-FP8-dynamic ships it
    data = json.loads((CONFIGS / "llama-4-scout-17b-16e-instruct" / "config.json").read_text())
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
    assert get_shape(str(path)).quant_scheme == "channel"
    choice = resolve_cost("auto", CostAsk("h100", str(path), "vicuna-68m", tp=2))
    assert choice.name == "calibrated"
    assert any(p.startswith("aic: ") and "per-channel weights (ptpc)" in p
               for p in choice.passed)
