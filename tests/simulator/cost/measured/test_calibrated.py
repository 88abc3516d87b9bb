"""simulator.cost.measured.calibrated / laws / cost_report: the calibrated cost model, its laws,
its sources and the per-part split of every model's pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.calibrated import CalibratedCost
from specbatch.simulator.cost.measured.laws import (
    GemmCorrection,
    GemmLaw,
    LayerShape,
    SmallOpLaw,
    envelope,
    fit_allreduce,
    small_op_bytes,
    tile_rows,
)
from specbatch.simulator.cost.measured.sources import (
    CUSTOM_AR_MAX_BYTES,
    curve_seconds,
    uses_custom_allreduce,
)
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.cost.report import (
    PARTS,
    SHOWN_PARTS,
    cost_sources,
    pass_breakdown,
    roofline_split,
)
from specbatch.traces.models.shapes import get_shape
from specbatch.traces.public.vidur_profiles import OPS, load_public_profiles


def test_gemm_law_by_hand():
    law = GemmLaw(bandwidth=2e12, flops=5e14, floor=2e-6, knee=2.0, k_pad=0.0, n_ramp=0.0,
                  tile_m=64, sms=4)
    # Q = 1, K = N = 1024: m = 2 (1024² + 2048) / 2e12 = 1.050624e-6 s; tile 16 rows, 8 column
    # tiles over 4 SMs = 2 waves: c = 2 · 1024 · 2 · 4 · 16 · 128 / 5e14 = 6.7108864e-8 s
    m, c = 2 * (1024 ** 2 + 2048) / 2e12, 2 * 1024 * 2 * 4 * 16 * 128 / 5e14
    assert law.seconds(np.array([1.0]), 1024, 1024)[0] == pytest.approx(2e-6 + math.hypot(m, c))
    # Q = 100: tile 64 (the cap), 2 row tiles x 8 = 16 tiles = 4 waves
    m = 2 * (1024 ** 2 + 100 * 2048) / 2e12
    c = 2 * 1024 * 4 * 4 * 64 * 128 / 5e14
    assert law.seconds(np.array([100.0]), 1024, 1024)[0] == pytest.approx(2e-6 + math.hypot(m, c))


def test_shape_neighbour_correction_by_hand():
    # cell A at (log K, log N) = (0, 0), log ratios 0.1, 0.3 at Q = 1, 3; cell B at (0, 0.3),
    # -0.1 at both. At K = N = 1, Q = 2: weights 1 and exp(-0.09 / (2 · 0.09)), each cell's
    # log ratio interpolated halfway
    corr = GemmCorrection(np.array([1.0, 3.0]), np.array([0.0, 0.0]), np.array([0.0, 0.3]),
                          np.array([[0.1, 0.3], [-0.1, -0.1]]), width=0.3)
    w = math.exp(-0.5)
    expect = math.exp((0.2 + w * -0.1) / (1 + w))
    assert corr.factor(np.array([2.0]), 1.0, 1.0)[0] == pytest.approx(expect)
    # beyond the grid: held at the edge; a far shape takes its nearest cell's ratio
    assert corr.factor(np.array([9.0]), 1.0, 1.0)[0] == pytest.approx(
        math.exp((0.3 + w * -0.1) / (1 + w)))
    assert corr.factor(np.array([1.0]), 1.0, math.exp(5.0))[0] == pytest.approx(
        math.exp(-0.1), rel=1e-6)


def test_tile_rows_and_small_op_bytes():
    assert tile_rows(np.array([1, 16, 17, 64, 65, 4096]), 64).tolist() == [16, 16, 32, 64, 64, 64]
    s = LayerShape(hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=128256)
    q = np.array([3.0])
    assert small_op_bytes("mlp_act", s, 2, q)[0] == 2 * 3 * 14336 / 2 * 3
    assert small_op_bytes("attn_rope", s, 4, q)[0] == 2 * 2 * (4096 + 1024) / 4 * 3
    assert small_op_bytes("add", s, 8, q)[0] == 2 * 3 * 4096 * 3
    law = SmallOpLaw(intercept=1e-6, per_width=1e-11, slope=1e-12)
    assert law.seconds(np.array([600.0]), np.array([3.0]))[0] == pytest.approx(
        1e-6 + 1e-11 * 200 + 1e-12 * 600)


def test_allreduce_law_recovers_alpha_beta():
    sizes = np.geomspace(1e4, 1e8, 20)
    law = fit_allreduce(sizes, 20e-6 + sizes / 2e11)
    assert law.latency == pytest.approx(20e-6, rel=1e-6)
    assert law.bandwidth == pytest.approx(2e11, rel=1e-6)
    curve = (np.array([1e6, 4e6]), np.array([1e-5, 4e-5]))
    assert curve_seconds(curve, 2e6) == pytest.approx(2e-5)  # log-log: t ∝ s here
    assert curve_seconds(curve, 1e3) == 1e-5


def test_vllm_custom_allreduce_rule():
    assert uses_custom_allreduce(4, CUSTOM_AR_MAX_BYTES)
    assert not uses_custom_allreduce(4, CUSTOM_AR_MAX_BYTES + 1)
    assert not uses_custom_allreduce(3, 1024)


def model(target="vicuna-7b", draft="vicuna-68m", tp=1, **kw) -> CalibratedCost:
    return build_cost_model("calibrated", "h100", target, draft, tp, **kw)


def test_a_covered_cell_is_the_measured_table():
    m = model()
    c = load_public_profiles().compute
    rows = c[(c["gpu"] == "h100") & (c["model"] == "meta-llama/Llama-2-7b-hf") & (c["tp"] == 1)]
    for q in (1, 8, 64):
        row = rows[rows["num_tokens"] == q].iloc[0]
        block = sum(float(row[f"{op}_ms"]) for op in OPS if op != "emb")
        expect = 1e-3 * (float(row["emb_ms"]) + 32 * block)
        got = m.breakdown("target", np.full(q, 1), np.zeros(q, dtype=int))["layers"]
        running = max(1e-3 * (float(r["emb_ms"]) + 32 * sum(float(r[f"{op}_ms"]) for op in OPS
                                                              if op != "emb"))
                      for _, r in rows[rows["num_tokens"] <= q].iterrows())
        assert got == pytest.approx(max(expect, running), rel=1e-6)
    src = m.sources()
    assert src["target"]["layers"]["source"] == "public profile cell"
    assert "Llama-2-7b-hf tp 1" in src["target"]["summary"]
    assert src["draft"]["summary"].startswith("calibrated roofline")


def test_parts_sum_to_the_pass_and_sums_path_is_bit_identical():
    m = model("llama-3.1-70b", tp=4)
    rng = np.random.default_rng(0)
    for role in ("target", "draft"):
        for _ in range(5):
            n = int(rng.integers(1, 40))
            q, kv = rng.integers(1, 6, n), rng.integers(0, 3000, n)
            parts = m.breakdown(role, q, kv)
            assert set(parts) == set(PARTS)
            assert sum(parts.values()) == pytest.approx(m.step_time(role, q, kv), rel=1e-12)
            sums = (n, float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))
            assert m.time_from_sums(role, *sums) == m.step_time(role, q, kv)
    assert m.step_time("target", np.array([], dtype=int), np.array([], dtype=int)) == 0.0


def test_more_tokens_never_cost_less():
    m = model()
    times = [m.step_time("target", np.array([q]), np.array([0])) for q in range(1, 600, 7)]
    assert np.all(np.diff(times) >= 0)


def test_priced_law_is_the_envelope_of_the_benchmarked_one():
    """The scalar hot path (RolePricer.monotone) equals laws.envelope, the
    vectorised form benchmarks/cost_vs_public.py validates."""
    m = model("vicuna-33b")  # no cell: the corrected laws
    pricer = m.roles["target"]
    grid = pricer.fit.corrections["attn_pre_proj"].grid
    q = np.array([1.0, 3.0, 100.0, 449.0, 456.0, 5000.0, 40000.0])

    def law(x):
        return np.array([pricer.law_layers(float(v)) for v in np.atleast_1d(x)])
    expect = envelope(law, q, grid)
    got = [pricer.layers(float(v)) for v in q]
    assert got == pytest.approx(expect, rel=1e-12)
    assert np.all(np.diff(expect) >= 0)


def test_tp_all_reduce_and_sources():
    m = model("llama-3.1-70b", tp=4)
    decode = m.breakdown("target", np.ones(8, dtype=int), np.full(8, 100))
    hw = get_hardware("h100")
    nbytes = 2 * 8192 * 8  # well under 8 MiB: vLLM's custom all-reduce, the roofline formula
    one = hw.allreduce_latency + 2 * 3 / 4 * nbytes / hw.link_bw
    assert decode["allreduce"] == pytest.approx(2 * 80 * one)
    src = m.sources()["target"]
    assert "world 4" in src["allreduce"]["source"]
    assert src["layers"]["validated"]["mape"] < 0.1


def test_quantised_draft_uses_the_law_and_is_cheaper():
    full, q4 = model(draft="vicuna-7b"), model(draft="vicuna-7b", draft_weight_bits=4)
    one, kv = np.ones(4, dtype=int), np.full(4, 256)
    assert q4.step_time("draft", one, kv) < 0.5 * full.step_time("draft", one, kv)
    assert "4 bits" in q4.sources()["draft"]["summary"]


def test_eager_host_floor_fills_launch():
    m = model(execution="eager")
    parts = m.breakdown("draft", np.ones(1, dtype=int), np.zeros(1, dtype=int))
    assert sum(parts.values()) == pytest.approx(2 * 1.07e-3)  # 2 layers x the eager floor


def test_proxy_gpu_and_unknown_role():
    m = build_cost_model("calibrated", "h200", "vicuna-33b", "vicuna-68m", 1)
    assert "h100 law scaled to h200" in m.sources()["target"]["summary"]
    h100 = build_cost_model("calibrated", "h100", "vicuna-33b", "vicuna-68m", 1)
    one = np.ones(1, dtype=int)
    assert m.step_time("target", one, one) < h100.step_time("target", one, one)
    with pytest.raises(SpecbatchError, match="cost role 'verifier'"):
        m.step_time("verifier", one, one)


@pytest.mark.parametrize("kw", [{}, {"tp": 4, "target": "vicuna-33b"},
                                {"execution": "eager"}, {"draft_weight_bits": 4}])
def test_roofline_split_sums_to_the_unchanged_roofline(kw):
    kw = {"target": "vicuna-7b", **kw}
    m = build_cost_model("roofline", "h100", kw.pop("target"), "vicuna-68m", kw.pop("tp", 1),
                         **kw)
    for role in ("target", "draft"):
        for q, kv in ((np.ones(1, int), np.zeros(1, int)), (np.full(256, 4), np.full(256, 900)),
                      (np.array([2048]), np.array([0]))):
            parts = roofline_split(m, role, q, kv)
            assert sum(parts.values()) == pytest.approx(m.step_time(role, q, kv), rel=1e-12)
            assert min(parts.values()) >= 0.0


def test_free_draft_parts_and_sources():
    m = build_cost_model("calibrated", "h100", "vicuna-7b", "ngram", 1)
    one = np.ones(3, dtype=int)
    assert pass_breakdown(m, "draft", one, one) == dict.fromkeys(SHOWN_PARTS, 0.0)
    assert sum(pass_breakdown(m, "target", one, one).values()) == pytest.approx(
        m.step_time("target", one, one))
    assert cost_sources(m)["draft"]["summary"].startswith("none")
    assert get_shape("vicuna-7b").layers == 32


@pytest.mark.slow
def test_stored_laws_are_the_fit_of_the_bundled_table():
    """simulator/cost/measured/data/calibrated_laws.json is what benchmarks/cost_vs_public.py
    --write fits (a refit reproduces it)."""
    from specbatch.simulator.cost.measured.laws import fit_gpu, fit_to_dict
    from specbatch.simulator.cost.measured.sources import gpu_peaks, stored_laws

    stored = stored_laws()
    compute = load_public_profiles().compute
    for gpu in ("h100", "a100", "a40"):
        fresh, kept = fit_to_dict(fit_gpu(compute, gpu, gpu_peaks(gpu))), fit_to_dict(stored[gpu])
        assert fresh["models"] == kept["models"]
        for kind in ("gemm", "small"):
            for op, law in fresh[kind].items():
                for key, value in law.items():
                    assert value == pytest.approx(kept[kind][op][key], rel=1e-6, abs=1e-15)
        for op, corr in fresh["corrections"].items():
            for key in ("grid", "log_k", "log_n"):
                assert corr[key] == pytest.approx(kept["corrections"][op][key])
            assert np.array(corr["log_ratio"]) == pytest.approx(
                np.array(kept["corrections"][op]["log_ratio"]), abs=2e-5)


def test_the_kept_allreduce_fit_is_the_fit_and_follows_the_points():
    from specbatch.simulator.cost.measured.laws import fit_allreduce_uncached

    sizes = np.array([1e6, 4e6, 16e6, 64e6])
    times = 20e-6 + sizes / 2e11
    first = fit_allreduce(sizes, times)
    assert first == fit_allreduce_uncached(sizes, times)
    assert fit_allreduce(sizes.copy(), times.copy()) is first  # kept: keyed on the values
    slower = fit_allreduce(sizes, 20e-6 + sizes / 1e11)  # other points: fitted again
    assert slower == fit_allreduce_uncached(sizes, 20e-6 + sizes / 1e11)
    assert slower.bandwidth == pytest.approx(1e11, rel=1e-6)
