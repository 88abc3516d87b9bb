"""Specification of simulator/cost/analytic/roofline.py and the hardware presets: roofline
sanity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.memory import kv_capacity_tokens
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.gpus.hardware import (
    DEFAULT_EXECUTION,
    EAGER_LAYER_LATENCY,
    EAGER_PASS_LATENCY,
    HARDWARE,
    get_execution,
    get_hardware,
)
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.traces.models.shapes import get_shape
from tests.simulator.helpers import ones

# ----------------------------------------------------------------------------- hardware


def test_presets_cover_the_six_gpus_with_datasheet_peaks():
    assert set(HARDWARE) == {"h100", "h200", "a100", "l40s", "rtx4090", "rtxpro6000",
                             "b200", "gb200"}
    assert get_hardware("H100").mem_bw == pytest.approx(3.35e12)
    assert get_hardware("h200").mem_bw == pytest.approx(4.8e12)
    assert get_hardware("a100").peak_flops == pytest.approx(312e12)
    assert get_hardware("l40s").memory_bytes == pytest.approx(48e9)
    for hw in HARDWARE.values():
        assert 0 < hw.compute_eff <= 1 and 0 < hw.memory_eff <= 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            hw.peak_flops = 1.0  # type: ignore[misc]


def test_workstation_presets_carry_their_datasheet_numbers():
    # RTX 4090: 1008 GB/s GDDR6X, 24 GB, bf16 with FP32 accumulate 165.2 T dense (330.4 sparse)
    rtx = get_hardware("RTX4090")
    assert (rtx.mem_bw, rtx.memory_bytes, rtx.peak_flops) == pytest.approx(
        (1.008e12, 24e9, 330.4e12 / 2), rel=1e-3)
    # RTX PRO 6000 Blackwell Server Edition: 1597 GB/s GDDR7, 96 GB, 503.8 T dense bf16
    pro = get_hardware("rtx-pro-6000")
    assert (pro.mem_bw, pro.memory_bytes, pro.peak_flops) == pytest.approx(
        (1.597e12, 96e9, 1007.6e12 / 2), rel=1e-3)
    assert pro.link_bw == pytest.approx(64e9) and rtx.link_bw == pytest.approx(32e9)  # PCIe 5/4


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
    assert b["step_time_s"] == pytest.approx(
        b["flops"] / (hw.peak_flops * hw.compute_eff), rel=0.01
    )


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


# ----------------------------------------------------------------------------- execution presets

PROFILES = {"llama-3.1-8b": 32, "llama-3.2-1b": 16, "smollm2-135m": 30}  # model -> layers


def _profile(model):
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[4] / "traces" / "data" / "profiles"
    return pd.read_parquet(root / f"h100-{model}.parquet")


def test_eager_layer_floor_is_the_fit_to_the_h100_profiles():
    # hardware.py's table: batch 1, q = 1, KV <= 512 latencies on the layer count.
    x, y = [], []
    for model, layers in PROFILES.items():
        df = _profile(model)
        cell = df[(df.batch_size == 1) & (df.query_tokens == 1) & (df.kv_tokens <= 512)]
        x += [layers] * len(cell)
        y += list(cell.latency_s)
    x, y = np.asarray(x, float), np.asarray(y)
    assert x.size == 6
    intercept, slope = np.linalg.lstsq(np.stack([np.ones_like(x), x], 1), y, rcond=None)[0]
    assert intercept < 0  # the free intercept is unphysical, hence the pass floor at its bound 0
    through_origin = float(x @ y / (x @ x))
    eager = get_execution("eager")
    assert eager.overlap
    for role in ("draft", "target"):
        p, layer = eager.latencies(role, get_hardware("h100"))
        assert p == EAGER_PASS_LATENCY == 0.0
        assert layer == EAGER_LAYER_LATENCY == pytest.approx(through_origin, abs=0.005e-3)
    assert EAGER_LAYER_LATENCY == pytest.approx(1.07e-3)


def test_eager_floor_is_near_the_measured_two_layer_draft():
    # benchmarks/gpu/README.md section 3: distilled-2L SmolLM2 draft, 2.66 ms at B = 1.
    cost = RooflineCost(get_hardware("h100"), get_shape("smollm2-135m"), get_shape("vicuna-68m"),
                        execution="eager")
    t = cost.step_time("draft", ones(1), ones(1, 256))
    assert t == pytest.approx(2 * EAGER_LAYER_LATENCY)
    assert 0.7 < t / 2.66e-3 < 1.3


def test_cuda_graph_layer_floor_matches_its_cited_per_kernel_cost():
    # CUDA.jl Graphs docs: 80 kernels, 70 us as a graph -> ~0.875 us per node; ~9 kernels/layer.
    per_node = 70e-6 / 80
    cg = get_execution("cuda_graph")
    assert not cg.overlap and DEFAULT_EXECUTION == "cuda_graph"
    for hw in HARDWARE.values():
        p, layer = cg.latencies("draft", hw)
        assert (p, layer) == (hw.pass_latency, hw.layer_latency)
    h100 = get_hardware("h100")
    assert h100.layer_latency == pytest.approx(9 * per_node, rel=0.05)
    assert h100.pass_latency == pytest.approx(60e-6)
    assert "CUDA.jl" in cg.source and "assum" in cg.source


def test_default_execution_is_bit_identical_to_cuda_graph(h100):
    explicit = build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m",
                                execution="cuda_graph")
    for role, q, c in (("draft", ones(8), ones(8, 300)), ("target", ones(64, 4), ones(64, 700)),
                       ("target", np.array([512]), np.array([0]))):
        assert h100.step_time(role, q, c) == explicit.step_time(role, q, c)
    # what was 0.11 ms is now priced by both presets: launch-bound under eager
    eager = build_cost_model(execution="eager")
    d_cg, d_eager = h100.step_time("draft", ones(1), ones(1, 512)), eager.step_time(
        "draft", ones(1), ones(1, 512))
    assert 0.1e-3 < d_cg < 0.12e-3 and 2.0e-3 < d_eager < 2.3e-3
    assert eager.breakdown("draft", ones(1), ones(1, 512))["bound"] == "host"


def test_eager_preset_brings_the_roofline_to_the_h100_profiles():
    # benchmarks/gpu/README.md: cuda_graph floors are 6-53x below these eager profiles.
    for model in PROFILES:
        df = _profile(model).iloc[::3]
        shape = get_shape(model)
        errs = {}
        for ex in ("cuda_graph", "eager"):
            cost = RooflineCost(get_hardware("h100"), shape, shape, execution=ex)
            pred = np.array([cost.step_time("target", ones(int(b), int(q)), ones(int(b), int(c)))
                             for b, q, c in df[["batch_size", "query_tokens", "kv_tokens"]].values])
            y = df.latency_s.to_numpy()
            errs[ex] = float(np.mean(np.abs(pred - y) / y))
        assert errs["cuda_graph"] > 0.8 and errs["eager"] < 0.4, (model, errs)


def test_unknown_execution_is_a_one_line_error():
    with pytest.raises(SpecbatchError, match="execution 'jit'.*cuda_graph, eager"):
        build_cost_model(execution="jit")
    assert get_execution("CUDA-graph").name == "cuda_graph"

