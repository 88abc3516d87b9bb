"""prefix_gains: E[τ | X^s] for every verified prefix s, what an allocator that saw the draft
maximises."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from specbatch.theory.allocate.budget import prefix_gains as expected_accepted
from specbatch.theory.verify.path_stats import block_thresholds, block_weights, position_stats


def paper_paths():
    """THEORY.md §4 example: Mb = (1/3, 2/3), Ms = (2/3, 1/3), γ = 2, drafts aa, ab, ba, bb."""
    tokens = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    draft_rows = np.tile([2 / 3, 1 / 3], (4, 2, 1))
    target_rows = np.tile([1 / 3, 2 / 3], (4, 3, 1))
    return position_stats(tokens, draft_rows, target_rows)


def brute_force_block(q, pt, z, s):
    """Enumerate the 2^s accept/reject patterns of independent events η_j ≤ h_j; τ = last
    success."""
    h = block_thresholds(block_weights(q, pt), z, np.full(q.shape[0], s))
    out = np.zeros(q.shape[0])
    for pattern in itertools.product([0, 1], repeat=s):
        prob = np.ones(q.shape[0])
        for j, hit in enumerate(pattern):
            prob *= h[:, j] if hit else 1.0 - h[:, j]
        tau = max((j + 1 for j, hit in enumerate(pattern) if hit), default=0)
        out += prob * tau
    return out


def test_paper_per_draft_table_under_block_verification():
    stats = paper_paths()
    got = expected_accepted(stats["q"], stats["pt"], stats["z"], "block")[:, 2]
    np.testing.assert_allclose(got, [1 / 2, 2, 3 / 2, 2], atol=1e-12)
    weights = np.array([4, 2, 2, 1]) / 9
    assert abs(weights @ got - 11 / 9) < 1e-12


def test_per_path_expectation_is_not_the_sum_of_p():
    """Σ p_i equals E[τ] only on average over drafts; on the path ``aa`` it is 3/4, not 1/2."""
    stats = paper_paths()
    assert abs(stats["p"][0].sum() - 3 / 4) < 1e-12
    weights = np.array([4, 2, 2, 1]) / 9
    assert abs(weights @ stats["p"].sum(axis=1) - 11 / 9) < 1e-12


def test_token_rule_is_cumulative_sum_of_products():
    stats = paper_paths()
    got = expected_accepted(stats["q"], stats["pt"], stats["z"], "token")
    np.testing.assert_allclose(got[:, 2], [3 / 4, 1, 3 / 2, 2], atol=1e-12)
    weights = np.array([4, 2, 2, 1]) / 9
    assert abs(weights @ got[:, 2] - 10 / 9) < 1e-12


@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 5), v=st.integers(2, 5))
def test_block_recursion_matches_enumeration_over_uniform_events(seed, k, v):
    rng = np.random.default_rng(seed)
    b = 8
    draft_rows = rng.dirichlet(np.ones(v) * 0.7, (b, k))
    target_rows = rng.dirichlet(np.ones(v) * 0.7, (b, k + 1))
    tokens = (draft_rows.cumsum(axis=2) < rng.random((b, k, 1))).sum(axis=2).clip(0, v - 1)
    stats = position_stats(tokens, draft_rows, target_rows)
    stats["q"] = np.maximum(stats["q"], 1e-12)
    got = expected_accepted(stats["q"], stats["pt"], stats["z"], "block")
    assert np.all(got[:, 0] == 0)
    for s in range(1, k + 1):
        want = brute_force_block(stats["q"][:, :s], stats["pt"][:, :s], stats["z"][:, :s], s)
        np.testing.assert_allclose(got[:, s], want, atol=1e-10)
