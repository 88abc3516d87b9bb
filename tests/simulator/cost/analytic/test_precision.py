"""vLLM's --quantization and --kv-cache-dtype priced (simulator.cost.analytic.precision): weights
held, weights streamed, the FP8 compute peak and the KV bytes, against hand-computed numbers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.memory import check_weights_fit, memory_kv_tokens
from specbatch.simulator.cost.analytic.precision import (
    MXFP4_BYTES,
    WeightFormat,
    held_weight_bytes,
    int_weight_bytes,
    kv_element_bytes,
    resolve_quantization,
    weight_format,
    weight_split,
)
from specbatch.simulator.cost.analytic.roofline import RooflineCost, pass_constants
from specbatch.simulator.cost.gpus.hardware import HARDWARE, get_hardware
from specbatch.simulator.cost.measured.calibrated import CalibratedCost
from specbatch.simulator.cost.measured.calibrated_role import (
    format_scales,
    quantized_layer_seconds,
)
from specbatch.simulator.cost.measured.sources import layer_shape
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import SHAPES

H100, A100 = get_hardware("h100"), get_hardware("a100")
# layer params 2·64·64 + 2·64·32 + 3·64·128 + 2·64 = 36992; embeddings 2·100·64 + 64 = 12864
TINY = ModelShape("tiny", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100)
# every layer MoE: attention + norms 12416, router 4·64, 4 experts of 3·64·32 = 6144
TINY_MOE = dataclasses.replace(TINY, name="tiny-moe", experts=4, top_k=2,
                               expert_intermediate=32, moe_layers=2)


def test_weight_split_by_hand():
    # 16-bit: embeddings 12864 + norms 2·2·64; projections 2·(36992 − 128)
    assert weight_split(TINY) == (13120, 73728, 0)
    # + routers 2·4·64; projections are attention only (2·(2·64·64 + 2·64·32)); experts 2·4·6144
    assert weight_split(TINY_MOE) == (13632, 24576, 49152)
    for shape in list(SHAPES.values()) + [TINY, TINY_MOE]:
        assert sum(weight_split(shape)) == shape.params


@pytest.mark.parametrize(("shape", "method", "extra", "expected"), [
    (TINY, "none", {}, 2 * 86848),
    (TINY, "fp8", {}, 2 * 13120 + 73728),
    # awq 4-bit g128: 0.5 + (2 + 0.5) / 128 = 0.51953125 bytes per weight
    (TINY, "awq", {"quant_bits": 4, "quant_group_size": 128}, 2 * 13120 + 38304),
    # gptq 8-bit per row: 1 byte per weight, the per-row scales not counted
    (TINY, "gptq", {"quant_bits": 8, "quant_group_size": -1}, 2 * 13120 + 73728),
    (TINY_MOE, "fp8", {}, 2 * 13632 + 24576 + 49152),
    # mxfp4: projections bf16, experts at 4.25 bits = 0.53125 bytes
    (TINY_MOE, "mxfp4", {}, 2 * (13632 + 24576) + 26112),
])
def test_weights_held_per_method_by_hand(shape, method, extra, expected):
    quantised = dataclasses.replace(shape, quantization=method, **extra)
    assert held_weight_bytes(quantised, H100) == expected


def test_bytes_per_weight_of_each_format():
    assert int_weight_bytes(4, 128) == 0.5 + 2.5 / 128 == 0.51953125
    assert int_weight_bytes(3, -1) == 3 / 8
    assert MXFP4_BYTES == 4.25 / 8
    assert kv_element_bytes("auto", H100) == 2
    assert {kv_element_bytes(d, H100) for d in ("fp8", "FP8_E4M3", "fp8_e5m2")} == {1}


def test_fp8_is_w8a8_only_with_fp8_tensor_cores():
    fp8 = dataclasses.replace(TINY, quantization="fp8")
    assert weight_format(fp8, H100) == WeightFormat("fp8", 1.0, 1.0, True)
    assert weight_format(fp8, A100) == WeightFormat("fp8", 1.0, 1.0, False)  # Marlin
    for hw in HARDWARE.values():  # a preset has an FP8 peak exactly when capability >= 8.9
        assert (hw.fp8_peak_flops > 0) == (hw.compute_capability >= 89) == hw.fp8_tensor_cores


def test_the_knob_follows_the_checkpoint_and_refuses_a_contradiction():
    awq = resolve_quantization("awq", SHAPES["llama-3.1-8b"])
    assert (awq.quantization, awq.quant_bits, awq.quant_group_size) == ("awq", 4, 128)
    own = dataclasses.replace(TINY, quantization="gptq", quant_bits=8, quant_group_size=64)
    assert resolve_quantization("none", own) is own  # vLLM's None: the checkpoint's method
    assert resolve_quantization("GPTQ", own) is own
    with pytest.raises(SpecbatchError, match="quantization 'fp8': expected 'gptq' or none"):
        resolve_quantization("fp8", own)
    with pytest.raises(SpecbatchError, match="mixture-of-experts"):
        resolve_quantization("mxfp4", TINY)
    with pytest.raises(SpecbatchError, match="expected one of none, fp8, awq, gptq, mxfp4"):
        resolve_quantization("int8", TINY)


def test_fp8_kv_halves_the_bytes_per_token_and_doubles_the_capacity():
    t, d = SHAPES["llama-3.1-8b"], SHAPES["llama-3.2-1b"]
    free = 80e9 * 0.9 - 2 * (t.params + d.params)
    per_token = 2 * 32 * 8 * 128 + 2 * 16 * 8 * 64  # K and V of both models, 1 byte each
    assert memory_kv_tokens(H100, t, d, 1, 0.9) == int(free // (2 * per_token))
    fp8 = memory_kv_tokens(H100, t, d, 1, 0.9, kv_cache_dtype="fp8")
    assert fp8 == int(free // per_token)
    assert fp8 // 16 >= 2 * (memory_kv_tokens(H100, t, d, 1, 0.9) // 16)  # in blocks of 16


def test_fp8_weights_leave_the_kv_room_their_bytes_free():
    t, d = SHAPES["llama-3.1-70b"], SHAPES["llama-3.2-1b"]
    _, linear, _ = weight_split(t)
    bf16 = memory_kv_tokens(H100, t, d, 4, 0.9)
    fp8 = memory_kv_tokens(H100, resolve_quantization("fp8", t), d, 4, 0.9)
    per_token = 2 * (2 * 80 * 8 * 128 + 2 * 16 * 8 * 64)
    free = 4 * 80e9 * 0.9 - 2 * (t.params + d.params)
    assert (bf16, fp8) == (int(free // per_token), int((free + linear) // per_token))
    # 70B at bf16 (141 GB) does not fit one H100; as fp8 (~71 GB) it does
    with pytest.raises(SpecbatchError, match="field gpu_memory_utilization"):
        check_weights_fit("h100", "llama-3.1-70b", "llama-3.2-1b", 1, 0.95)
    check_weights_fit("h100", "llama-3.1-70b", "llama-3.2-1b", 1, 0.95, quantization="fp8")


def decode_seconds(hw, kv_bytes_per_element: int) -> float:
    """llama-3.1-8b fp8, one request, 1000 cached tokens: memory-bound, by hand."""
    L, h, V, inter, d_kv = 32, 4096, 128256, 14336, 8 * 128
    layer = 2 * h * h + 2 * h * d_kv + 3 * h * inter + 2 * h
    weights = 2 * (L * 2 * h + h * V + h) + 1 * L * (layer - 2 * h)  # norms + head bf16
    kv = 2 * L * d_kv * kv_bytes_per_element * (1000 + 2)
    act = 2 * L * (9 * h + 2 * d_kv + 6 * inter)
    return (weights + kv + act) / (hw.mem_bw * 0.8) + 60e-6 + L * 8e-6


@pytest.mark.parametrize("hw", ["h100", "a100"])
@pytest.mark.parametrize("kv_dtype", ["auto", "fp8"])
def test_a_fp8_decode_step_by_hand(hw, kv_dtype):
    m = RooflineCost(get_hardware(hw), SHAPES["llama-3.1-8b"], SHAPES["llama-3.2-1b"],
                     quantization="fp8", kv_cache_dtype=kv_dtype)
    expected = decode_seconds(get_hardware(hw), 2 if kv_dtype == "auto" else 1)
    assert m.step_time("target", np.array([1]), np.array([1000])) == pytest.approx(expected,
                                                                                rel=1e-12)


def test_a_fp8_prefill_runs_its_projections_at_the_fp8_peak_on_h100_only():
    t, d, q = SHAPES["llama-3.1-8b"], SHAPES["llama-3.2-1b"], 8192
    _, linear, _ = weight_split(t)
    f8 = 2 * linear * q
    # bf16: the layer norms and the LM head (2 h V per token), and attention 4 L h q (q+1)/2
    f16 = 2 * (32 * 2 * 4096 + 4096 * 128256) * q + 4 * 32 * 4096 * q * (q + 1) / 2
    fixed = 60e-6 + 32 * 8e-6
    query, kv = np.array([q]), np.array([0])
    h100 = RooflineCost(H100, t, d, quantization="fp8").step_time("target", query, kv)
    assert h100 == pytest.approx(f16 / (989.4e12 * 0.7) + f8 / (1978.9e12 * 0.7) + fixed,
                                 rel=1e-12)
    # A100: FP8 through Marlin, weight-only: a compute-bound prefill costs what bf16 costs
    a100 = RooflineCost(A100, t, d, quantization="fp8").step_time("target", query, kv)
    assert a100 == RooflineCost(A100, t, d).step_time("target", query, kv)
    assert a100 == pytest.approx((f16 + f8) / (312e12 * 0.7) + fixed, rel=1e-12)


def test_mxfp4_streams_only_the_touched_experts_at_4_25_bits():
    moe = SHAPES["qwen3-30b-a3b"]
    plain = pass_constants(moe, H100)
    mx = pass_constants(dataclasses.replace(moe, quantization="mxfp4"), H100)
    assert mx.expert_bytes == plain.expert_bytes * MXFP4_BYTES / 2
    assert mx.weight_bytes == plain.weight_bytes  # attention, router, head stay bf16
    assert (mx.fp8_flops_per_token, mx.flops_per_token) == (0.0, plain.flops_per_token)


def test_defaults_price_exactly_as_before():
    for shape in SHAPES.values():
        base = pass_constants(shape, H100)
        assert pass_constants(shape, H100, kv_element_bytes=2) == base
        assert (base.fp8_flops_per_token, base.inv_compute_fp8) == (0.0, 0.0)
    t, d = SHAPES["vicuna-33b"], SHAPES["vicuna-68m"]
    a = RooflineCost(H100, t, d)
    b = RooflineCost(H100, t, d, quantization="none", kv_cache_dtype="auto")
    assert a.consts == b.consts and a.kv_capacity_tokens() == b.kv_capacity_tokens()


def test_profiled_and_calibrated_refuse_what_they_cannot_price():
    with pytest.raises(SpecbatchError, match="cost 'profiled': quantization 'fp8'"):
        build_cost_model("profiled", profile="x.parquet", quantization="fp8")
    with pytest.raises(SpecbatchError, match="rtx4090: its per-layer profiles are bf16"):
        build_cost_model("calibrated", "rtx4090", "llama-3.1-8b", "llama-3.2-1b",
                         quantization="awq")


def test_calibrated_quantised_laws_scale_the_stream_and_compute_terms():
    t, d = SHAPES["llama-3.1-8b"], SHAPES["llama-3.2-1b"]
    role = CalibratedCost(H100, t, d, use_cells=False).roles["target"]
    ls, qa = layer_shape(t), np.array([1.0])
    per = np.array([1.0])  # any per-layer time: an identity format leaves it as it is
    same = quantized_layer_seconds(role.fit, ls, 1, qa, per, WeightFormat("x", 2.0, 2.0, False),
                                   H100)
    assert same[0] == pytest.approx(1.0, rel=1e-12)
    bf16 = CalibratedCost(H100, t, d, use_cells=False)
    for method in ("fp8", "awq"):
        quant = CalibratedCost(H100, t, d, use_cells=False, quantization=method)
        for q in (1.0, 64.0, 4096.0):  # never slower than the bf16 law, faster at decode
            assert quant.roles["target"].law_layers(q) <= bf16.roles["target"].law_layers(q)
        assert quant.roles["target"].law_layers(1.0) < 0.7 * bf16.roles["target"].law_layers(1.0)
    # W8A8: a compute-bound pass gains from the FP8 peak on H100, not on A100 (weight-only)
    big = 8192.0
    h = (CalibratedCost(H100, t, d, use_cells=False, quantization="fp8").roles["target"]
         .law_layers(big) / bf16.roles["target"].law_layers(big))
    a_bf16 = CalibratedCost(A100, t, d, use_cells=False).roles["target"].law_layers(big)
    a = CalibratedCost(A100, t, d, use_cells=False, quantization="fp8").roles["target"]
    assert h < 0.8 and math.isclose(a.law_layers(big) / a_bf16, 1.0, rel_tol=0.05)


def test_calibrated_fp8_kv_halves_the_attention_bytes():
    t, d = SHAPES["llama-3.1-8b"], SHAPES["llama-3.2-1b"]
    auto = CalibratedCost(H100, t, d).roles["target"]
    fp8 = CalibratedCost(H100, t, d, kv_cache_dtype="fp8").roles["target"]
    # one request reading 32k cached tokens: memory-bound on the KV bytes
    args = (1.0, 32768.0, 32768.0, 1.0)
    assert fp8.attention(*args) == pytest.approx(auto.attention(*args) / 2, rel=1e-9)


def test_calibrated_moe_scales_experts_and_projections_by_kind():
    moe, d = SHAPES["qwen3-30b-a3b"], SHAPES["qwen2.5-0.5b"]
    bf16 = CalibratedCost(H100, moe, d).roles["target"]
    mx = CalibratedCost(H100, moe, d, quantization="mxfp4").roles["target"]
    fp8 = CalibratedCost(H100, moe, d, quantization="fp8").roles["target"]
    for q in (1.0, 16.0, 256.0):
        assert max(fp8.law_layers(q), mx.law_layers(q)) <= bf16.law_layers(q)
    # decode of one token reads 8 experts per layer: their bytes at 4.25 bits dominate
    assert mx.law_layers(1.0) < 0.9 * bf16.law_layers(1.0)
    scales = format_scales(mx.fmt, H100)
    assert scales == {"projection": (1.0, 1.0), "expert": (MXFP4_BYTES / 2, 1.0)}
    assert format_scales(fp8.fmt, H100)["expert"] == (0.5, 1978.9 / 989.4)


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 8), heads=st.sampled_from([2, 4, 8]), kv=st.sampled_from([1, 2]),
       width=st.integers(1, 64), experts=st.sampled_from([0, 4, 8]),
       method=st.sampled_from(["fp8", "awq", "mxfp4"]))
def test_every_format_reprices_exactly_its_weights(layers, heads, kv, width, experts, method):
    """Property: the formats move only the bytes of P_lin / P_exp, and a pass's streamed
    weights change by the same per-weight difference as the memory held."""
    shape = ModelShape("s", layers, 16 * heads, heads, kv, 8 * width, 50, experts=experts,
                       top_k=min(2, experts), expert_intermediate=4 * width,
                       moe_layers=layers if experts else 0)
    if method == "mxfp4" and not experts:
        return
    q = resolve_quantization(method, shape)
    fmt = weight_format(q, H100)
    sixteen, linear, expert = weight_split(shape)
    assert held_weight_bytes(q, H100) == pytest.approx(
        held_weight_bytes(shape, H100) - (2 - fmt.linear_bytes) * linear
        - (2 - fmt.expert_bytes) * expert, rel=1e-12)
    plain, quant = pass_constants(shape, H100), pass_constants(q, H100)
    assert quant.weight_bytes == pytest.approx(
        plain.weight_bytes - (2 - fmt.linear_bytes) * linear, rel=1e-12)
    assert quant.expert_bytes == pytest.approx(plain.expert_bytes * fmt.expert_bytes / 2,
                                               rel=1e-12)
    total = quant.flops_per_token + quant.fp8_flops_per_token
    assert total == pytest.approx(plain.flops_per_token, rel=1e-12)  # FLOPs only move peaks
