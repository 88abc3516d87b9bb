"""aic prices MXFP4 experts (gpt-oss) from AIConfigurator's w4a16_mxfp4 rows where they time
the kernel vLLM runs for them on that GPU, at their shape (simulator.cost.measured.aic_cost
``mxfp4_kernel``, ``mxfp4_moe_rows``); the dense projections, router and LM head stay bf16."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.cost.measured.aic_cost import aic_covers, coverage_of
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_moe_rows import (
    GEMM_DTYPE,
    MXFP4_KERNELS,
    MXFP4_MOE,
    mxfp4_kernel,
    mxfp4_moe_rows,
)
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.cost.resolve import CostAsk, resolve_cost
from specbatch.traces.models.shapes import get_shape

GPT_OSS = ("openai/gpt-oss-20b", "openai/gpt-oss-120b")
H100_KERNEL = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
ROW_16 = 0.00019783466996159405  # float32 as bundled
TIMED = [[2880, 2880, 32, 4], [2880, 2880, 128, 4]]


def test_the_checkpoint_reads_as_mxfp4_experts_over_bf16_projections():
    shape = get_shape("openai/gpt-oss-120b")
    assert (shape.quantization, shape.hidden, shape.expert_intermediate, shape.experts,
            shape.top_k, shape.head_dim, shape.heads, shape.kv_heads) == (
        "mxfp4", 2880, 2880, 128, 4, 64, 64, 8)
    assert GEMM_DTYPE["mxfp4"] == "bfloat16"


@pytest.mark.parametrize("capability, backend", [
    (90, "triton"), (100, "trtllm"), (103, "trtllm"), (120, "marlin"), (89, "marlin"),
    (80, "marlin")])
def test_vllms_mxfp4_experts_kernel_per_compute_capability(capability, backend):
    # select_mxfp4_moe_backend: TRT-LLM on family 100, OAI Triton on [9.0, 11.0) otherwise,
    # Marlin elsewhere (module docstring of MXFP4_KERNELS)
    assert mxfp4_kernel(capability) == MXFP4_KERNELS[backend]


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200", "gb200", "rtxpro6000"])
@pytest.mark.parametrize("model", GPT_OSS)
def test_gpt_oss_is_admitted_where_the_rows_time_vllms_kernel(gpu, model):
    for tp in (1, 2):
        assert aic_covers(gpu, get_shape(model), None, tp) is None


@pytest.mark.parametrize("model", GPT_OSS)
def test_gpt_oss_is_admitted_on_l40s_from_its_forward_filled_rows(model):
    # L40S (8.9): 0.24.0's Marlin rows time its experts and 0.24.0's FA2 rows, one kernel with
    # 0.22.0's FlashAttention there (aic_curves.SAME_KERNEL), its head width 64
    assert aic_covers("l40s", get_shape(model), None, 1) is None


@pytest.mark.parametrize("gpu, system, words", [
    ("a100", "a100_sxm", "no "),
])
def test_gpt_oss_is_refused_in_one_line_where_no_row_times_it(gpu, system, words):
    reason = aic_covers(gpu, get_shape("openai/gpt-oss-20b"), None, 1)
    assert words in reason and system in reason and "\n" not in reason


def test_l40s_forward_filled_marlin_rows_time_gpt_oss_experts():
    # L40S (8.9) runs Marlin (mxfp4_kernel); its w4a16_mxfp4 rows are 0.24.0's Marlin rows,
    # taken by 0.22.0's reuse.yaml, at both gpt-oss shapes
    cov = coverage_of(load_curves("l40s"))
    for model in GPT_OSS:
        assert mxfp4_moe_rows(cov, get_shape(model), 89) == (MXFP4_MOE, None)


def test_rows_of_another_kernel_than_vllms_are_refused():
    curves = {"moe_kernels": {"w4a16_mxfp4": H100_KERNEL},
              "moe_shapes": {"w4a16_mxfp4": TIMED}}
    shape = get_shape("openai/gpt-oss-20b")
    assert mxfp4_moe_rows(curves, shape, 90) == ("w4a16_mxfp4", None)
    dtype, reason = mxfp4_moe_rows(curves, shape, 100)  # Hopper's rows on a Blackwell GPU
    assert dtype == "" and H100_KERNEL in reason and MXFP4_KERNELS["trtllm"] in reason


def test_mxfp4_experts_of_an_untimed_shape_are_refused():
    # the knob on Qwen3-30B-A3B: the rows time gpt-oss's two expert shapes only
    reason = aic_covers("h100", get_shape("Qwen/Qwen3-30B-A3B"), None, 1, quantization="mxfp4")
    assert "(2048, 768, 128, 8)" in reason and "(2880, 2880, 32, 4)" in reason


def test_the_experts_are_priced_from_the_aic_row_by_hand():
    model = build_cost_model("aic", "h100", "openai/gpt-oss-20b", "vicuna-68m", tp=1)
    target = model.roles["target"]
    assert (target.moe_dtype, target.gemm_dtype) == ("w4a16_mxfp4", "bfloat16")
    parts = model.breakdown("target", np.ones(16, dtype=int), np.full(16, 1024))
    # AIC H100 vLLM 0.24.0 moe_perf.parquet, vllm_gptossmxfp4moe_triton_
    # oaitritonmxfp4expertsmonolithic, balanced, hidden 2880, inter 2880, 32 experts, top 4,
    # tp 1, ep 1, 16 tokens: 0.197835 ms; x 24 MoE layers (a row the curve's cleaning,
    # aic_curve.monotone, leaves: the 32-token row, 0.199872 ms, sits above the 48-token one and
    # is carried down to it)
    assert parts["experts"] == pytest.approx(24 * ROW_16, rel=1e-12)
    source = model.sources()["target"]["experts"]["source"]
    assert "w4a16_mxfp4" in source and "measured moe" in source


def test_the_tp_split_experts_are_b200s_trtllm_row_at_tp_2():
    model = build_cost_model("aic", "b200", "openai/gpt-oss-120b", "vicuna-68m", tp=2)
    parts = model.breakdown("target", np.ones(32, dtype=int), np.full(32, 1024))
    # AIC B200 vLLM 0.24.0, vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_
    # trtllmmxfp4expertsmonolithic, 128 experts, tp 2, ep 1, 32 tokens: 0.2032 ms; x 36
    assert parts["experts"] == pytest.approx(36 * 0.0002032000047620386, rel=1e-12)


def test_a_gpt_oss_draft_is_priced_from_its_own_mxfp4_rows():
    model = build_cost_model("aic", "h100", "openai/gpt-oss-120b", "openai/gpt-oss-20b", tp=1)
    assert model.roles["draft"].moe_dtype == "w4a16_mxfp4"


def test_auto_prices_gpt_oss_with_aic_where_covered_and_passes_it_over_elsewhere():
    for model, tp in (("openai/gpt-oss-20b", 1), ("openai/gpt-oss-120b", 2)):
        assert resolve_cost("auto", CostAsk("h100", model, "vicuna-68m", tp=tp)).name == "aic"
    assert resolve_cost("auto", CostAsk("l40s", "openai/gpt-oss-20b", "vicuna-68m",
                                        tp=1)).name == "aic"
    choice = resolve_cost("auto", CostAsk("a100", "openai/gpt-oss-20b", "vicuna-68m", tp=1))
    assert choice.name != "aic"
    assert any(p.startswith("aic: ") for p in choice.passed)


def test_l40s_prices_gpt_oss_from_the_marlin_row_and_the_filled_fa2_rows():
    model = build_cost_model("aic", "l40s", "openai/gpt-oss-20b", "vicuna-68m", tp=1)
    parts = model.breakdown("target", np.ones(128, dtype=int), np.full(128, 1024))
    # AIC L40S vLLM 0.24.0 moe_perf.parquet (taken by 0.22.0's reuse.yaml),
    # vllm_gptossmxfp4moe_marlin_marlinexperts, balanced, hidden 2880, inter 2880, 32
    # experts, top 4, tp 1, ep 1, 128 tokens: 0.697429 ms; x 24 MoE layers
    assert parts["experts"] == pytest.approx(24 * 0.0006974293501116335, rel=1e-12)
    decode = load_curves("l40s")["attention_decode"]
    rows = decode[(decode["kv_dtype"] == "bfloat16") & (decode["head_dim"] == 64)
                  & (decode["heads"] == 64) & (decode["kv_heads"] == 8)]
    assert len(rows) and set(rows["kernel"].astype(str)) == {"vllm_flash_attn_fa2"}
    assert set(rows["from_version"].astype(str)) == {"0.24.0"}
    assert "bfloat16 KV" in model.sources()["target"]["attention"]["source"]
