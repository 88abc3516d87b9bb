"""Sliding-window attention priced per layer (simulator.cost.analytic.window, roofline,
calibrated)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.analytic.window import (
    batch_window_sums,
    window_sums,
    window_sums_reference,
    windowed_sums,
)
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.interface import batch_sums
from specbatch.simulator.cost.measured.calibrated import CalibratedCost
from specbatch.simulator.cost.measured.lss_attention import attention_features
from specbatch.simulator.cost.report import roofline_split
from specbatch.simulator.run import simulate
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import SHAPES

# 4 layers, 3 sliding with W = 4; h = 64, 4 heads of 16, 2 KV heads: 128 KV bytes per token-layer
TINY = ModelShape("tiny", 4, 64, 4, 2, 128, 100, sliding_window=4, sliding_layers=3)
QUERY, KV = np.array([1, 3]), np.array([5, 1])


def test_window_sums_by_hand():
    # request 0: the query at p = 5 sees keys 2..5 (4 = W); its window reaches cached 2..4 (3)
    # request 1: queries at p = 1, 2, 3 see 2, 3, 4 keys; they reach cached key 0 (1)
    assert window_sums(QUERY, KV, 4) == (4.0, 13.0)
    assert window_sums_reference(QUERY, KV, 4) == (4.0, 13.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 40)), min_size=1, max_size=6),
       st.integers(1, 50))
def test_window_sums_equal_the_counting_reference(rows, window):
    q, c = (np.array(x) for x in zip(*rows))
    assert window_sums(q, c, window) == window_sums_reference(q, c, window)
    *sums, both = batch_window_sums(q, c, window)  # one Gram product: the batch sums too
    assert tuple(sums) == batch_sums(q, c) and both == window_sums(q, c, window)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 40)), min_size=1, max_size=6))
def test_a_window_no_context_reaches_is_full_attention(rows):
    q, c = (np.array(x) for x in zip(*rows))
    window = int((q + c).max()) + 1
    full_pairs = float(np.dot(q, c) + (q * q + q).sum() // 2)
    assert window_sums(q, c, window) == (float(c.sum()), full_pairs)


def test_roofline_attention_flops_and_bytes_of_a_two_request_pass_by_hand():
    cost = RooflineCost(get_hardware("h100"), TINY, TINY)
    parts = cost.breakdown("target", QUERY, KV)
    c = cost.consts["target"]
    # pairs: 1 full layer at 1·(5+1) + 3·(1+2) = 15, 3 sliding at 13; 4 h FLOPs per pair
    assert parts["flops"] - c.flops_per_token * 4 == pytest.approx(4 * 64 * (15 + 3 * 13))
    # keys: full layer Σc + 2Σq = 6 + 8, sliding layers K^W + 2Σq = 4 + 8, 128 B each
    assert parts["kv_bytes"] == pytest.approx(128 * (14 + 3 * 12))
    assert cost.step_time("target", QUERY, KV) == parts["step_time_s"]
    assert cost.time_from_sums("target", 2, 4.0, 6.0, 8.0, 10.0, window=(4.0, 13.0)) == \
        cost.step_time("target", QUERY, KV)
    split = roofline_split(cost, "target", QUERY, KV)
    assert sum(split.values()) == pytest.approx(parts["step_time_s"])
    with pytest.raises(SpecbatchError, match="window sums"):
        cost.time_from_sums("target", 2, 4.0, 6.0, 8.0, 10.0)


def unwindowed(shape: ModelShape) -> ModelShape:
    return dataclasses.replace(shape, sliding_window=0, sliding_layers=0)


@pytest.mark.parametrize("model", ["roofline", "calibrated", "calibrated-lss"])
def test_windowed_equals_full_when_the_window_covers_every_context(model):
    hw = get_hardware("rtxpro6000" if model == "calibrated-lss" else "h100")
    wide = dataclasses.replace(SHAPES["gemma-3-270m"], sliding_window=10**6)
    make = RooflineCost if model == "roofline" else CalibratedCost
    windowed, full = make(hw, wide, wide), make(hw, unwindowed(wide), unwindowed(wide))
    q, c = np.array([1, 4, 1, 64]), np.array([300, 9000, 20000, 0])
    for role in ("target", "draft"):
        assert windowed.step_time(role, q, c) == pytest.approx(full.step_time(role, q, c),
                                                               rel=1e-12)
    assert windowed.windowed and not full.windowed


@pytest.mark.parametrize("model", [RooflineCost, CalibratedCost])
def test_a_window_makes_long_context_decode_cheaper_and_short_contexts_unchanged(model):
    hw, shape = get_hardware("h100"), SHAPES["mistral-7b-v0.1"]
    windowed, full = model(hw, shape, shape), model(hw, unwindowed(shape), unwindowed(shape))
    ones = np.ones(32, dtype=np.int64)
    short, long = np.full(32, 2000), np.full(32, 32000)
    assert windowed.step_time("target", ones, short) == full.step_time("target", ones, short)
    assert windowed.step_time("target", ones, long) < 0.6 * full.step_time("target", ones, long)


def test_engine_prices_a_window_no_context_reaches_as_full_attention(synth_trace_natural):
    # every layer slides (L_s = L) under a window past every context: the engine's array path
    # must give the same run, byte for byte, as the sums path of the unwindowed shape
    wide = dataclasses.replace(SHAPES["mistral-7b-v0.1"], sliding_window=10**6)
    hw = get_hardware("h100")
    for scheduler in ("vllm-v1", "vllm-v0"):
        config = load_config(None, trace="synth", policy="fixed", requests=24,
                             scheduler=scheduler, seed=3)
        a = simulate(config, synth_trace_natural, cost_model=RooflineCost(hw, wide, wide))
        b = simulate(config, synth_trace_natural,
                     cost_model=RooflineCost(hw, unwindowed(wide), unwindowed(wide)))
        assert a.summary == b.summary
        assert a.steps.equals(b.steps)
    narrow = dataclasses.replace(wide, sliding_window=16)  # the window path is the one taken
    c = simulate(config, synth_trace_natural, cost_model=RooflineCost(hw, narrow, narrow))
    assert c.summary["target_time"] < a.summary["target_time"]


def test_calibrated_attention_is_the_windowed_work_at_the_fitted_rates_by_hand():
    cost = CalibratedCost(get_hardware("h100"), TINY, TINY)
    r = cost.roles["target"]
    law = r.fit.gemm["mlp_up_proj"]
    flops, nbytes = 4 * 64 * (15 + 3 * 13), 128 * (14 + 3 * 12)
    assert r.attention(4.0, 6.0, 8.0, 10.0, (4.0, 13.0)) == pytest.approx(
        max(flops / law.flops, nbytes / law.bandwidth))
    assert cost.breakdown("target", QUERY, KV)["attention"] == pytest.approx(
        max(flops / law.flops, nbytes / law.bandwidth))


def test_a_per_layer_law_sees_a_sliding_layer_at_its_windowed_lengths():
    # the LLMServingSim law's features of one layer: KV GB 2 b h_kv d (Σc + Σq), TFLOP 4 h_q d pairs
    sq, skv, sqkv, sqq = windowed_sums(4.0, 6.0, 8.0, 10.0, (4.0, 13.0))
    x = attention_features(TINY, 1, 2, sq, skv, sqkv, sqq)
    assert x[2] == pytest.approx(2 * 2 * 2 * 16 * (4 + 4) * 1e-9)
    assert x[3] == pytest.approx(4 * 4 * 16 * 13 * 1e-12)


def attention_reference(shape: ModelShape, query, kv) -> tuple[float, float]:
    """(FLOPs, KV bytes) of a pass's attention layer by layer and query by query: 4 heads ·
    head_dim FLOPs per (query, key) pair, every key a layer reads once plus each new key
    written, 2 bytes per number, K and V of every KV head."""
    flops = nbytes = 0.0
    per_key = 2 * shape.kv_heads * shape.head_dim * 2
    for layer in range(shape.layers):
        window = shape.sliding_window if layer < shape.sliding_layers else 10**9
        for q_i, c_i in zip(query.tolist(), kv.tolist()):
            read = set()
            for p in range(c_i, c_i + q_i):
                keys = [k for k in range(p + 1) if k > p - window]
                flops += 4 * shape.heads * shape.head_dim * len(keys)
                read.update(keys)
            nbytes += per_key * ((len(read) if q_i else min(c_i, window - 1)) + q_i)
    return flops, nbytes


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 30)), min_size=1, max_size=4),
       st.integers(1, 20), st.integers(0, 4))
def test_roofline_attention_equals_the_layer_by_layer_reference(rows, window, sliding):
    shape = dataclasses.replace(TINY, sliding_window=window, sliding_layers=sliding)
    q, c = (np.array(x) for x in zip(*rows))
    cost = RooflineCost(get_hardware("h100"), shape, shape)
    parts, consts = cost.breakdown("target", q, c), cost.consts["target"]
    flops, nbytes = attention_reference(shape, q, c)
    assert parts["flops"] - consts.flops_per_token * q.sum() == pytest.approx(flops, rel=1e-9)
    assert parts["kv_bytes"] == pytest.approx(nbytes, rel=1e-12)
