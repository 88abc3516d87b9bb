"""traces/synth.py: synthetic traces are valid, seeded, and satisfy the THEORY.md §3 identities
that a capture from real distributions satisfies."""

from __future__ import annotations

import time

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.theory.verify.path_stats import block_thresholds, token_weights
from specbatch.traces.format.files import read_trace, write_trace
from specbatch.traces.synth import SynthConfig, synth_trace

TEMPERATURES = [0.0, 0.6, 1.0, 1.5]


@pytest.fixture(scope="module", params=TEMPERATURES, ids=lambda t: f"T={t}")
def trace(request):
    return synth_trace(SynthConfig(requests=120, depth=6, output_mean=60, vocab=24,
                                   temperature=request.param, seed=11))


def p_prev(trace) -> np.ndarray:
    """p_0..p_{K-1} (p_0 = 1).  # [rows, K]"""
    return np.concatenate([np.ones((trace.n_rows, 1)), trace.p[:, :-1]], axis=1)


def test_synth_is_valid_and_round_trips(tmp_path):
    trace = synth_trace(SynthConfig(requests=8, depth=5, output_mean=20, seed=1))
    write_trace(trace, tmp_path / "s")
    loaded = read_trace(tmp_path / "s")
    for name, arr in trace.columns().items():
        assert np.array_equal(arr, getattr(loaded, name)), name
    assert trace.K == 5 and trace.n_requests == 8
    assert loaded.meta["synth"]["seed"] == 1 and loaded.meta["temperature"] == 1.0


def test_synth_is_deterministic_for_a_seed():
    config = SynthConfig(requests=5, output_mean=10, seed=7)
    a, b = synth_trace(config), synth_trace(config)
    c = synth_trace(SynthConfig(requests=5, output_mean=10, seed=8))
    for name, arr in a.columns().items():
        assert np.array_equal(arr, getattr(b, name)), name
    assert a.requests()["output_len"].tolist() == b.requests()["output_len"].tolist()
    assert not (a.q.shape == c.q.shape and np.array_equal(a.q, c.q))


def test_p_is_the_clipped_running_product(trace):
    """p_i = min(p_{i-1} r_i, 1), p_0 = 1 (THEORY.md §3), checked by the plain recursion."""
    r = trace.pt / trace.q
    p = np.ones(trace.n_rows)
    for i in range(trace.K):
        p = np.minimum(p * r[:, i], 1.0)
        assert np.allclose(trace.p[:, i], p, rtol=1e-9, atol=1e-12)


def test_z_lies_within_its_bounds(trace):
    """Σ_x max(p Mb − Ms, 0) is at least the drafted token's term and p − 1, and at most
    p · (1 − pt) plus the drafted token's term (every other term is ≤ p · Mb(x))."""
    prev, pt, q, z = p_prev(trace), trace.pt, trace.q, trace.z
    own = np.maximum(prev * pt - q, 0.0)
    eps = 1e-12
    assert np.all(z >= own - eps)
    assert np.all(z >= prev - 1 - eps)
    assert np.all(z <= prev * (1 - pt) + own + eps)
    assert np.all(z <= prev + eps)


def test_drafted_tokens_are_sampled_from_the_recorded_draft(trace):
    """E[p_i | X^{i-1}] = Σ_x min(p_{i-1} Mb(x), Ms(x)) = p_{i-1} − Z_i when X_i ~ Ms, so the
    column means of p_i − p_{i-1} + Z_i vanish: ties the sampled tokens, r and Z together."""
    if trace.temperature == 0:
        pytest.skip("greedy: tokens are not sampled")
    martingale = trace.p - p_prev(trace) + trace.z  # [rows, K], each entry in [-1, 2]
    se = martingale.std(axis=0) / np.sqrt(trace.n_rows)
    assert np.all(np.abs(martingale.mean(axis=0)) < 5 * se + 1e-9)


def test_first_position_tv_identity(trace):
    """E[min(1, r_1)] = Σ min(Ms, Mb) = 1 − Z_1 (THEORY.md §2/§3 at i = 1)."""
    if trace.temperature == 0:
        pytest.skip("greedy: tokens are not sampled")
    diff = np.minimum(trace.pt[:, 0] / trace.q[:, 0], 1.0) - (1 - trace.z[:, 0])
    assert abs(diff.mean()) < 5 * diff.std() / np.sqrt(trace.n_rows) + 1e-9


def test_natural_draft_signals_are_the_temperature_one_draft_row(trace):
    assert np.all(trace.draft_conf <= trace.top1)
    assert np.all(trace.entropy >= 0) and np.all(trace.entropy <= np.log(24) + 1e-9)
    if trace.temperature == 1.0:
        assert np.array_equal(trace.draft_conf, trace.q)  # the sampling row is the T=1 row


def test_temperature_zero_semantics():
    trace = synth_trace(SynthConfig(requests=40, depth=5, output_mean=30, temperature=0.0))
    assert np.all(trace.q == 1.0)
    assert set(np.unique(trace.pt).tolist()) <= {0.0, 1.0}
    # one-hot draft: Z_{i+1} = p_i (1 − Mb(X_{i+1} | X^i)) and BV coincides with TV
    assert np.allclose(trace.z, p_prev(trace) * (1 - trace.pt), atol=1e-15)
    assert np.array_equal(trace.p, trace.accept_tv)
    assert np.all(trace.draft_conf < 1.0)  # graded temperature-1 confidence, not the one-hot q


def test_perfect_surrogate_cumprod_equals_tv_acceptance():
    trace = synth_trace(SynthConfig(requests=6, output_mean=20, surrogate="perfect"))
    assert np.array_equal(np.cumprod(trace.draft_conf, axis=1), token_weights(trace.q, trace.pt))
    assert np.all(trace.draft_conf <= trace.top1)


def _corr(trace) -> float:
    accept = np.minimum(trace.pt / trace.q, 1.0).ravel()
    return float(np.corrcoef(trace.draft_conf.ravel(), accept)[0, 1])


def test_good_surrogate_predicts_acceptance_and_poor_does_not():
    base = dict(requests=60, output_mean=40, seed=2)
    good = _corr(synth_trace(SynthConfig(**base, surrogate="good")))
    poor = _corr(synth_trace(SynthConfig(**base, surrogate="poor")))
    exact = _corr(synth_trace(SynthConfig(**base, surrogate="good", surrogate_noise=0.0)))
    assert exact == pytest.approx(1.0)
    assert good > 0.9 and poor < 0.6 and good > poor


def test_constant_alpha_mode_gives_exact_acceptance():
    alpha = 0.6
    trace = synth_trace(SynthConfig(requests=30, output_mean=40, constant_alpha=alpha))
    assert np.all(np.minimum(trace.pt / trace.q, 1.0) == alpha)
    powers = alpha ** np.arange(1, trace.K + 1)
    assert np.allclose(trace.p, powers[None, :], rtol=1e-12)
    assert np.allclose(trace.accept_tv, powers[None, :], rtol=1e-12)
    # one-hot draft: Z_{i+1} = p_i (1 − α), so BV's thresholds give P(τ ≥ i) = α^i on every row
    assert np.allclose(trace.z, p_prev(trace) * (1 - alpha), rtol=1e-12)
    h = block_thresholds(trace.p, trace.z, np.full(trace.n_rows, trace.K))
    survive = 1 - np.cumprod((1 - h)[:, ::-1], axis=1)[:, ::-1]  # P(τ ≥ i | path) under BV
    assert np.allclose(survive, powers[None, :], rtol=1e-9)


def test_hard_requests_accept_less_than_easy_ones():
    trace = synth_trace(SynthConfig(requests=80, output_mean=40, hard_fraction=0.5, seed=4))
    per_request = (
        np.add.reduceat(trace.accept_tv.sum(axis=1), trace.offsets[:-1]) / trace.output_len
    )
    hard = trace.category == "synthetic-hard"
    assert 0 < hard.sum() < trace.n_requests
    assert per_request[hard].mean() < per_request[~hard].mean() - 0.3


def test_similarity_one_means_draft_equals_target():
    trace = synth_trace(SynthConfig(requests=5, output_mean=20, similarity=1.0, hard_fraction=0.0,
                                    similarity_spread=0.0))
    assert np.allclose(trace.pt, trace.q, rtol=1e-12)
    assert np.allclose(trace.p, 1.0) and np.allclose(trace.z, 0.0, atol=1e-12)


def test_lengths_and_arrivals_follow_the_knobs():
    trace = synth_trace(SynthConfig(requests=400, output_mean=50, output_sigma=0.3, output_max=70,
                                    prompt_mean=100, prompt_sigma=0.0, arrival_rate=4.0, depth=2))
    assert trace.output_len.min() >= 1 and trace.output_len.max() <= 70
    assert abs(trace.output_len.mean() - 50) < 4
    assert np.all(trace.prompt_len == 100)
    assert trace.arrival[0] == 0 and np.all(np.diff(trace.arrival) >= 0)
    assert np.diff(trace.arrival).mean() == pytest.approx(0.25, rel=0.2)
    assert np.all(np.isnan(synth_trace(SynthConfig(requests=3, output_mean=5)).arrival))


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"surrogate": "oracle"}, "surrogate"),
        ({"vocab": 1}, "vocab"),
        ({"vocab": 1000}, "vocab"),
        ({"requests": 0}, "requests"),
        ({"depth": 0}, "depth"),
        ({"temperature": -0.5}, "temperature"),
        ({"similarity": 1.5}, "similarity"),
        ({"constant_alpha": 0.5, "temperature": 0.0}, "constant_alpha"),
        ({"constant_alpha": 0.0}, "constant_alpha"),
        ({"surrogate_noise": 2.0}, "surrogate_noise"),
    ],
)
def test_bad_knob_is_one_line_error(changes, field):
    with pytest.raises(SpecbatchError, match=field) as exc:
        synth_trace(SynthConfig(**changes))
    assert "\n" not in str(exc.value)


def test_generation_is_vectorised():
    start = time.perf_counter()
    trace = synth_trace(SynthConfig(requests=500, output_mean=100, output_sigma=0.0, depth=8))
    assert trace.n_rows == 50_000
    assert time.perf_counter() - start < 20  # ~1 s on an idle core


@pytest.mark.slow
def test_ten_thousand_requests_in_seconds():
    start = time.process_time()
    trace = synth_trace(SynthConfig(requests=10_000, output_mean=200, output_sigma=0.0, depth=8))
    assert trace.n_rows == 2_000_000
    assert time.process_time() - start < 60
