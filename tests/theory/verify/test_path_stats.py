"""theory/verify/path_stats.py: per-position statistics and τ from statistics (THEORY.md §3
identities)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specbatch.theory.exact.enumeration import (
    block_thresholds_exact,
    block_weights_exact,
    draft_signals_exact,
    path_stats_exact,
)
from specbatch.theory.verify.path_stats import (
    accept_from_stats,
    block_thresholds,
    block_weights,
    draft_signals,
    position_stats,
    token_weights,
)
from specbatch.theory.verify.reference import tau_law
from tests.theory import lossless
from tests.theory.verify.test_reference import random_paths


def probability_pairs(max_b=6, max_k=8):
    """(q, pt) # [B, K]: q in (0, 1], pt in [0, 1] with exact zeros and ratios above 1."""
    shape = st.tuples(st.integers(1, max_b), st.integers(1, max_k))
    q = st.floats(1e-6, 1.0)
    pt = st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0))
    return shape.flatmap(
        lambda s: st.tuples(arrays(np.float64, s, elements=q), arrays(np.float64, s, elements=pt))
    )


@given(probability_pairs())
def test_block_weights_cumsum_cummax_equals_the_recursion(pair):
    # p_i = exp(S_i − max_{j≤i} S_j) with S_i = Σ log r (THEORY.md §3) vs p_i = min(p_{i-1} r_i, 1).
    # The exact tier runs the recursion in Fractions on the same (exactly converted) floats.
    q, pt = pair
    expected = np.array([[float(x) for x in block_weights_exact(
        [Fraction(v) for v in q_row], [Fraction(v) for v in pt_row])]
        for q_row, pt_row in zip(q, pt)])
    assert np.allclose(block_weights(q, pt), expected, rtol=1e-9, atol=1e-12)


@given(probability_pairs())
def test_token_weights_are_the_running_product(pair):
    q, pt = pair
    assert np.allclose(token_weights(q, pt), np.cumprod(np.minimum(pt / q, 1.0), axis=1))
    tv = token_weights(q, pt)
    assert (np.diff(tv, axis=1) <= 0).all()  # TV's weights never rise; BV's may
    assert (block_weights(q, pt) >= tv - 1e-12).all()  # p_i ≥ Π min(1, r_j)


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 9), st.booleans())
def test_one_hot_draft_residual_mass(seed, k, v, one_hot_target):
    # For a one-hot draft, Z_{i+1} = p_i (1 − Mb(X_{i+1} | X^i)) (THEORY.md §3).
    rng = np.random.default_rng(seed)
    tokens, dr, tr = random_paths(rng, 25, k, v, one_hot_draft=True, one_hot_target=one_hot_target)
    s = position_stats(tokens, dr, tr)
    p_prev = np.concatenate([np.ones((25, 1)), s["p"][:, :-1]], axis=1)  # p_0..p_{K-1}
    assert np.allclose(s["z"], p_prev * (1.0 - s["pt"]))
    assert np.allclose(s["q"], 1.0)


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 9))
def test_position_stats_thresholds_equal_the_full_row_definition(seed, k, v):
    rng = np.random.default_rng(seed)
    tokens, dr, tr = random_paths(rng, 25, k, v, concentration=0.3)
    # Reference: the exact tier path by path (recursion for p, vocabulary sum for Z, in floats).
    s = position_stats(tokens, dr, tr)
    h_stats = block_thresholds(s["p"], s["z"], np.full(25, k))
    for b in range(25):
        ex = path_stats_exact(tokens[b], dr[b], tr[b])
        assert np.allclose(s["p"][b], ex["p"])
        assert np.allclose(s["z"][b], ex["z"])
        assert np.allclose(h_stats[b], block_thresholds_exact(ex["p"], ex["z"]), atol=1e-12)


@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(2, 5))
def test_position_stats_equal_the_exact_tier_in_fractions(seed, k, v):
    # Rows of small-denominator fractions: the exact tier is exact, numpy within float error.
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, size=(3, 2 * k + 1, v)) + (rng.random((3, 2 * k + 1, v)) < 0.8)
    counts[:, :, 0] += counts.sum(axis=2) == 0  # every row has mass
    rows = [[[Fraction(int(c), int(r.sum())) for c in r] for r in path] for path in counts]
    dr = np.array([[[float(x) for x in r] for r in path[:k]] for path in rows])
    tr = np.array([[[float(x) for x in r] for r in path[k:]] for path in rows])
    tokens = np.array([[int(np.flatnonzero(r)[rng.integers((r > 0).sum())]) for r in path[:k]]
                       for path in counts])
    s = position_stats(tokens, dr, tr)
    signals = draft_signals(tokens, dr)
    for b, path in enumerate(rows):
        ex = path_stats_exact(tokens[b].tolist(), path[:k], path[k:])
        assert all(isinstance(x, Fraction) for name in ("p", "z") for x in ex[name])
        for name in ("q", "pt", "p", "z"):
            assert np.allclose(s[name][b], [float(x) for x in ex[name]], rtol=1e-12, atol=1e-15)
        ex_sig = draft_signals_exact(tokens[b].tolist(), path[:k])
        for name in ("draft_conf", "entropy", "top1"):
            got = [float(x) for x in ex_sig[name]]
            assert np.allclose(signals[name][b], got, rtol=1e-12, atol=1e-15)


def pattern_law(q, pt, z, gamma, rule):
    """Exact law of accept_from_stats's τ by summing over the 2^K uniform-interval patterns.

    τ depends on the uniforms only through the events {η_i ≤ t_i} (TV: t_i = min(1, r_i), BV:
    t_i = h_i), independent with probability t_i each. Each pattern is fed to accept_from_stats
    with η_i = 0 (event holds) or η_i = the largest float below 1 (fails unless t_i = 1, when the
    failing pattern has weight 0). returns # [B, K+1]
    """
    b, k = q.shape
    if rule == "token":
        t = np.minimum(pt / q, 1.0)
    else:
        t = block_thresholds(block_weights(q, pt), z, gamma)
    t = np.clip(t, 0.0, 1.0)  # -inf beyond γ: never holds
    law = np.zeros((b, k + 1))
    below_one = np.nextafter(1.0, 0.0)
    for bits in itertools.product([True, False], repeat=k):
        bits = np.array(bits)
        weight = np.where(bits, t, 1.0 - t).prod(axis=1)
        uniforms = np.broadcast_to(np.where(bits, 0.0, below_one), (b, k))
        tau = accept_from_stats(q, pt, z, gamma, uniforms, rule)
        law[np.arange(b), tau] += weight
    return law


@pytest.mark.parametrize("rule", ["token", "block"])
def test_accept_from_stats_law_gives_p_at_least_i_given_the_prefix(rule):
    # Markov pair, V = 3: enumerate every draft x^K with weight Ms(x^K). Under BV,
    # P(τ ≥ i, X^i = x^i) = Ms(x^i) p_i(x^i) for every draft length γ ≥ i (THEORY.md §3);
    # under TV the same holds with Π_{j≤i} min(1, r_j).
    rng = np.random.default_rng(21)
    v, k = 3, 4
    init, trans = rng.dirichlet(np.ones(v), 2), rng.dirichlet(np.full(v, 0.6), (2, v))
    drafts = np.array(list(itertools.product(range(v), repeat=k)))
    n = len(drafts)
    prev = np.concatenate([np.full((n, 1), -1), drafts], axis=1)

    def rows(m, length):
        return np.stack(
            [init[m] if t < 0 else trans[m, t] for t in prev[:, :length].ravel()]
        ).reshape(n, length, v)

    dr, tr = rows(0, k), rows(1, k + 1)
    s = position_stats(drafts, dr, tr)
    weights = s["p"] if rule == "block" else token_weights(s["q"], s["pt"])
    prefix_prob = np.cumprod(s["q"], axis=1)  # Ms(x^i)
    path_prob = prefix_prob[:, -1]
    for gamma in range(1, k + 1):
        law = pattern_law(s["q"], s["pt"], s["z"], np.full(n, gamma), rule)
        assert np.allclose(law.sum(axis=1), 1.0)
        assert np.allclose(law[:, gamma + 1 :], 0.0)
        at_least = law[:, ::-1].cumsum(axis=1)[:, ::-1]  # P(τ ≥ i | X^K), i = 0..K
        for i in range(1, gamma + 1):
            for prefix in itertools.product(range(v), repeat=i):
                rows_ = (drafts[:, :i] == prefix).all(axis=1)
                lhs = (path_prob[rows_] * at_least[rows_, i]).sum()
                first = np.flatnonzero(rows_)[0]
                rhs = prefix_prob[first, i - 1] * weights[first, i - 1]
                assert lhs == pytest.approx(rhs, abs=1e-12)
        # The pattern law also equals the full-row exact law given the path.
        full = tau_law(drafts[:, :gamma], dr[:, :gamma], tr[:, : gamma + 1], rule)
        assert np.allclose(law[:, : gamma + 1], full, atol=1e-12)


@pytest.mark.parametrize("rule", ["token", "block"])
def test_accept_from_stats_monte_carlo_matches_the_pattern_law(rule):
    rng = np.random.default_rng(22)
    tokens, dr, tr = random_paths(rng, 1, 5, 6)
    s = position_stats(tokens, dr, tr)
    n = 50_000
    rep = {key: np.repeat(s[key], n, axis=0) for key in ("q", "pt", "z")}
    gamma = np.full(n, 5)
    tau = accept_from_stats(rep["q"], rep["pt"], rep["z"], gamma, rng.random((n, 5)), rule)
    law = pattern_law(s["q"], s["pt"], s["z"], np.array([5]), rule)[0]
    assert lossless.chi_square_pvalue(np.bincount(tau, minlength=6), n * law) > lossless.ALPHA


def test_gamma_zero_accepts_nothing():
    q = np.full((3, 4), 0.5)
    for rule in ("token", "block"):
        tau = accept_from_stats(q, q, q, np.zeros(3, dtype=int), np.zeros((3, 4)), rule)
        assert tau.tolist() == [0, 0, 0]
