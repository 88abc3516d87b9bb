"""Specification of simulator/roofline.py and the hardware presets: roofline sanity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from specbatch.simulator.cost import build_cost_model
from specbatch.simulator.hardware import HARDWARE, get_hardware
from specbatch.simulator.roofline import RooflineCost, kv_capacity_tokens
from specbatch.traces.shapes import get_shape

from specbatch.errors import SpecbatchError


def ones(n: int, value: int = 1) -> np.ndarray:
    return np.full(n, value, dtype=np.int64)


@pytest.fixture(scope="module")
def h100():
    return build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m")


# ----------------------------------------------------------------------------- hardware


def test_presets_cover_the_four_gpus_with_datasheet_peaks():
    assert set(HARDWARE) == {"h100", "h200", "a100", "l40s"}
    assert get_hardware("H100").mem_bw == pytest.approx(3.35e12)
    assert get_hardware("h200").mem_bw == pytest.approx(4.8e12)
    assert get_hardware("a100").peak_flops == pytest.approx(312e12)
    assert get_hardware("l40s").memory_bytes == pytest.approx(48e9)
    for hw in HARDWARE.values():
        assert 0 < hw.compute_eff <= 1 and 0 < hw.memory_eff <= 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            hw.peak_flops = 1.0  # type: ignore[misc]


def test_unknown_hardware_is_a_one_line_error():
    with pytest.raises(SpecbatchError, match="hardware 'tpu'.*h100"):
        get_hardware("tpu")


# ----------------------------------------------------------------------------- roofline


def test_decode_of_33b_at_batch_1_is_memory_bound_at_weights_over_bandwidth(h100):
    hw = get_hardware("h100")
    weights = 2 * get_shape("vicuna-33b").params  # ~65 GB in bf16
    assert 60e9 < weights < 70e9
    ideal = weights / (hw.mem_bw * hw.memory_eff)
    t = h100.step_time("target", ones(1), ones(1, 128))
    b = h100.breakdown("target", ones(1), ones(1, 128))
    assert b["bound"] == "memory"
    assert ideal < t < ideal + 2e-3  # plus launch latencies
    assert 0.018 < t < 0.030  # ~20 ms / 0.8


def test_decode_time_grows_slowly_until_the_compute_knee(h100):
    t1 = h100.step_time("target", ones(1), ones(1, 0))
    t64 = h100.step_time("target", ones(64), ones(64, 0))
    t1024 = h100.step_time("target", ones(1024), ones(1024, 0))
    assert t64 < 1.2 * t1  # weights dominate: 64 tokens cost little more than one
    assert h100.breakdown("target", ones(1024), ones(1024, 0))["bound"] == "compute"
    assert t1024 > 3 * t1


def test_large_prefill_is_compute_bound(h100):
    b = h100.breakdown("target", [4096], [0])
    assert b["bound"] == "compute"
    hw = get_hardware("h100")
    assert b["step_time_s"] == pytest.approx(b["flops"] / (hw.peak_flops * hw.compute_eff), rel=0.01)


def test_kv_reads_make_long_contexts_slower(h100):
    # Vicuna-33B has no grouped-query attention: 1.6 MB of KV per token.
    short = h100.step_time("target", ones(64), ones(64, 128))
    long = h100.step_time("target", ones(64), ones(64, 2048))
    assert long > 1.5 * short


@given(
    n=st.integers(1, 64),
    q=st.integers(1, 8),
    c=st.integers(0, 4096),
    dq=st.integers(0, 64),
    dc=st.integers(0, 4096),
    role=st.sampled_from(["draft", "target"]),
)
def test_step_time_is_monotone_in_query_and_kv(h100, n, q, c, dq, dc, role):
    base = h100.step_time(role, ones(n, q), ones(n, c))
    assert base > 0
    assert h100.step_time(role, ones(n, q + dq), ones(n, c)) >= base
    assert h100.step_time(role, ones(n, q), ones(n, c + dc)) >= base
    assert h100.step_time(role, ones(n + 1, q), ones(n + 1, c)) >= base


def test_ragged_batches_equal_their_sums(h100):
    q = np.array([1, 4, 4, 2])
    c = np.array([10, 500, 0, 3000])
    t = h100.step_time("target", q, c)
    assert t == pytest.approx(h100.breakdown("target", q, c)["step_time_s"])
    assert h100.step_time("target", q.astype(float), c.astype(float)) == pytest.approx(t)
    assert h100.step_time("target", list(q), list(c)) == pytest.approx(t)


def test_empty_batch_costs_nothing(h100):
    assert h100.step_time("target", ones(0), ones(0)) == 0.0
    assert h100.step_time("draft", ones(3, 0), ones(3, 7)) == 0.0


def test_draft_is_much_cheaper_than_target(h100):
    ratio = h100.step_time("draft", ones(64), ones(64, 512)) / h100.step_time(
        "target", ones(64), ones(64, 512))
    assert 0.001 < ratio < 0.05


def test_tp2_roughly_halves_per_gpu_time_plus_communication():
    one = build_cost_model(hardware="h100", target="llama-3.1-70b", tp=1)
    two = build_cost_model(hardware="h100", target="llama-3.1-70b", tp=2)
    q, c = ones(8), ones(8, 512)
    t1, t2 = one.step_time("target", q, c), two.step_time("target", q, c)
    b2 = two.breakdown("target", q, c)
    assert 0.5 * t1 < t2 < 0.6 * t1
    assert t2 > b2["memory_s"] + b2["comm_s"]  # all-reduce latency and bandwidth are charged
    assert two.step_time("draft", q, c) == one.step_time("draft", q, c)  # draft stays on 1 GPU


def test_tp_must_divide_the_heads():
    with pytest.raises(SpecbatchError, match="52 attention heads"):
        build_cost_model(target="vicuna-33b", tp=8)
    with pytest.raises(SpecbatchError, match="tp 0"):
        build_cost_model(tp=0)


def test_published_decode_latencies_within_factor_1p5():
    # Approximate published batch-1 decode latencies (see the module docstring).
    cases = [("a100", "vicuna-7b", 1, 7.5e-3), ("h100", "llama-3.1-8b", 1, 6.5e-3),
             ("h100", "llama-3.1-70b", 4, 20e-3)]
    for hw, model, tp, published in cases:
        t = build_cost_model(hardware=hw, target=model, tp=tp).step_time("target", [1], [512])
        assert published / 1.5 < t < published * 1.5, (hw, model, t)


def test_faster_memory_means_faster_decode():
    q, c = ones(16), ones(16, 512)
    times = {hw: build_cost_model(hardware=hw).step_time("target", q, c) for hw in HARDWARE}
    assert times["h200"] < times["h100"] < times["a100"] < times["l40s"]


def test_speculative_step_inputs_are_cheap_to_price(h100):
    # DSD (THEORY §5) prices k = 0..6 every 20 steps: query k+1 per request must cost little more.
    c = ones(64, 700)
    t = [h100.step_time("target", ones(64, k + 1), c) for k in range(7)]
    assert all(a <= b for a, b in zip(t, t[1:]))
    assert t[6] < 1.5 * t[0]


def test_overhead_comes_from_the_preset(h100):
    assert h100.overhead == get_hardware("h100").overhead
    custom = RooflineCost(get_hardware("h100"), get_shape("vicuna-7b"), get_shape("vicuna-68m"),
                          overhead=0.0)
    assert custom.overhead == 0.0


def test_kv_capacity():
    # 33B on one 80 GB H100 leaves room for only a few thousand tokens; on an H200 ~10x more.
    assert 2000 < kv_capacity_tokens("h100") < 8000
    assert kv_capacity_tokens("h200") > 8 * kv_capacity_tokens("h100")
    assert kv_capacity_tokens("l40s") == 0


def test_step_time_is_fast(h100):
    import time

    q, c = ones(64, 4), ones(64, 700)
    h100.step_time("target", q, c)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        h100.step_time("target", q, c)
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 100e-6  # a few microseconds unloaded; generous for a shared CI machine
