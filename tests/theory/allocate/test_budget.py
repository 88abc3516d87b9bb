"""theory/allocate/budget.py: TETRIS greedy and the exact allocation optimum (THEORY.md §5)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specbatch.errors import SpecbatchError
from specbatch.theory.allocate.budget import (
    allocation_value,
    gains_value,
    greedy_heap,
    greedy_topc,
    optimal_dp,
    optimal_dp_gains,
    optimal_milp,
    optimal_tree_gains,
    prefix_gains,
)
from specbatch.theory.verify.path_stats import block_weights, position_stats, token_weights
from specbatch.theory.verify.reference import tau_law
from tests.theory.verify.test_reference import random_paths


def brute_force(values: np.ndarray, budget: int) -> tuple[float, tuple[int, ...]]:
    """Best allocation by enumeration; ties: smaller total, then lexicographically smaller s."""
    n, k = values.shape
    best = None
    for s in itertools.product(range(k + 1), repeat=n):
        if sum(s) > budget:
            continue
        key = (-allocation_value(values, np.array(s)), sum(s), s)
        if best is None or key < best:
            best = key
    return -best[0], best[2]


def values_arrays(max_n: int = 6, max_k: int = 5, integer: bool = False):
    shapes = st.tuples(st.integers(1, max_n), st.integers(1, max_k))
    if integer:  # small integers: float sums are exact, so ties are exact ties
        elements = st.integers(0, 3).map(float)
    else:
        elements = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
    return shapes.flatmap(lambda shape: arrays(np.float64, shape, elements=elements))


def non_increasing(values: np.ndarray) -> np.ndarray:
    return -np.sort(-values, axis=1)


@given(values_arrays(max_n=8, max_k=6), st.integers(0, 60))
def test_greedy_twins_and_dp_agree_on_non_increasing_rows(values, budget):
    values = non_increasing(values)
    s_topc = greedy_topc(values, budget)
    s_heap = greedy_heap(values, budget)
    assert np.array_equal(s_topc, s_heap)
    assert s_topc.sum() == min(budget, values.size)  # greedy fills the capacity
    v_dp = allocation_value(values, optimal_dp(values, budget))
    assert allocation_value(values, s_topc) == pytest.approx(v_dp, rel=1e-12, abs=1e-12)


@given(values_arrays(max_n=8, max_k=6, integer=True), st.integers(0, 60))
def test_greedy_ties_prefer_smaller_position_then_smaller_row(values, budget):
    values = non_increasing(values)
    # Reference: sort all entries by (value desc, j asc, row asc), take the first C.
    n, k = values.shape
    order = sorted(
        ((-values[i, j], j, i) for i in range(n) for j in range(k)),
    )[: min(budget, n * k)]
    expected = np.zeros(n, dtype=np.int64)
    for _, _, i in order:
        expected[i] += 1
    assert np.array_equal(greedy_topc(values, budget), expected)
    assert np.array_equal(greedy_heap(values, budget), expected)


@given(values_arrays(max_n=4, max_k=3), st.integers(0, 14))
def test_dp_equals_brute_force_and_milp_on_tiny_instances(values, budget):
    v_brute, _ = brute_force(values, budget)
    s_dp = optimal_dp(values, budget)
    assert s_dp.sum() <= budget and ((s_dp >= 0) & (s_dp <= values.shape[1])).all()
    assert allocation_value(values, s_dp) == pytest.approx(v_brute, rel=1e-12, abs=1e-12)
    s_milp = optimal_milp(values, budget)
    assert s_milp.sum() <= budget
    assert allocation_value(values, s_milp) == pytest.approx(v_brute, rel=1e-7, abs=1e-7)


@given(values_arrays(max_n=4, max_k=3, integer=True), st.integers(0, 14))
def test_dp_tie_break_smaller_total_then_lexicographic(values, budget):
    _, s_brute = brute_force(values, budget)
    assert tuple(optimal_dp(values, budget)) == s_brute


@given(values_arrays(max_n=10, max_k=8), st.integers(0, 100))
def test_dp_is_never_worse_than_greedy(values, budget):
    v_dp = allocation_value(values, optimal_dp(values, budget))
    for greedy in (greedy_topc, greedy_heap):
        assert v_dp >= allocation_value(values, greedy(values, budget)) - 1e-12


def test_greedy_is_strictly_worse_on_rising_bv_weights():
    # BV weights p_{i,j} can rise along j (a ratio r > 1 lifts p). Row 0 is a path whose first
    # token is unlikely under the target but whose later tokens recover (p = 0.1, then 1, 1);
    # row 1 decays steadily. Budget 3: the heap only sees frontiers and never pays the 0.1
    # toll that unlocks row 0's 1.0s; top-C takes the three largest entries and its row
    # counts (2, 1) verify a prefix that includes the toll but not the second 1.0.
    values = np.array([[0.1, 1.0, 1.0], [0.6, 0.5, 0.4]])
    s_greedy = greedy_topc(values, 3)
    s_opt = optimal_dp(values, 3)
    assert s_greedy.tolist() == [2, 1]  # top-3 picks 1.0, 1.0 (row 0) and 0.6 (row 1)
    assert allocation_value(values, s_greedy) == pytest.approx(1.1 + 0.6)
    assert greedy_heap(values, 3).tolist() == [0, 3]
    assert allocation_value(values, greedy_heap(values, 3)) == pytest.approx(1.5)
    assert s_opt.tolist() == [3, 0]
    assert allocation_value(values, s_opt) == pytest.approx(2.1)
    assert allocation_value(values, optimal_milp(values, 3)) == pytest.approx(2.1)


def test_budget_zero_selects_nothing():
    values = np.random.default_rng(0).random((5, 4))
    for fn in (greedy_topc, greedy_heap, optimal_dp, optimal_milp):
        assert fn(values, 0).tolist() == [0] * 5


def test_budget_at_least_everything_selects_everything_positive():
    values = np.random.default_rng(1).random((5, 4)) + 0.01
    for budget in (20, 21, 1000):
        for fn in (greedy_topc, greedy_heap, optimal_dp, optimal_milp):
            assert fn(values, budget).tolist() == [4] * 5


def test_dp_leaves_trailing_zeros_unselected():
    # Among optima the DP prefers the smaller total: trailing zero-value tokens are skipped.
    values = np.array([[0.5, 0.0, 0.0], [0.0, 0.7, 0.0]])
    assert optimal_dp(values, 6).tolist() == [1, 2]


def test_single_request():
    values = np.array([[0.2, 0.9, 0.1, 0.8]])
    for budget in range(6):
        s = optimal_dp(values, budget)
        assert s.tolist() == [[0, 1, 2, 3, 4, 4][budget]]
        assert greedy_topc(values, budget).tolist() == [min(budget, 4)]


def test_large_instance_dp_beats_or_matches_greedy_and_matches_milp():
    rng = np.random.default_rng(2)
    # BV-like weights: clipped running products with occasional ratios above 1.
    ratios = rng.lognormal(mean=-0.2, sigma=0.8, size=(40, 8))
    values = block_weights(np.ones_like(ratios), ratios)  # p_i = min(p_{i-1} r_i, 1)
    budget = 120
    v_dp = allocation_value(values, optimal_dp(values, budget))
    v_milp = allocation_value(values, optimal_milp(values, budget))
    assert v_dp == pytest.approx(v_milp, rel=1e-7)
    assert v_dp >= allocation_value(values, greedy_topc(values, budget))


@pytest.mark.parametrize(
    "values, budget",
    [
        (np.array([1.0, 2.0]), 1),  # not 2-d
        (np.array([[0.1, -0.2]]), 1),  # negative
        (np.array([[0.1, np.nan]]), 1),  # NaN
        (np.array([[0.1, 0.2]]), -1),  # negative budget
        (np.array([[0.1, 0.2]]), 1.5),  # fractional budget
    ],
)
def test_bad_input_is_a_one_line_user_error(values, budget):
    for fn in (greedy_topc, greedy_heap, optimal_dp):
        with pytest.raises(SpecbatchError):
            fn(values, budget)


def test_empty_batches():
    for values in (np.zeros((0, 4)), np.zeros((3, 0))):
        for fn in (greedy_topc, greedy_heap, optimal_dp, optimal_milp):
            assert fn(values, 5).tolist() == [0] * values.shape[0]


# ---------------------------------------------------------------- exact per-path gains


def gains_brute_force(gains: np.ndarray, budget: int) -> tuple[float, tuple[int, ...]]:
    n, k1 = gains.shape
    best = None
    for s in itertools.product(range(k1), repeat=n):
        if sum(s) > budget:
            continue
        key = (-gains_value(gains, np.array(s)), sum(s), s)
        if best is None or key < best:
            best = key
    return -best[0], best[2]


@given(
    st.tuples(st.integers(1, 4), st.integers(1, 3)).flatmap(
        lambda shape: arrays(
            np.float64, (shape[0], shape[1] + 1), elements=st.integers(-3, 3).map(float)
        )
    ),
    st.integers(0, 14),
)
def test_dp_on_arbitrary_gain_tables_equals_brute_force(gains, budget):
    # Gains need not be prefix sums, monotone or non-negative (BV's exact per-path gains can
    # fall); integers make float ties exact, so the tie-break is checked too.
    _, s_brute = gains_brute_force(gains, budget)
    assert tuple(optimal_dp_gains(gains, budget)) == s_brute


@given(values_arrays(max_n=5, max_k=4), st.integers(0, 25))
def test_optimal_dp_is_optimal_dp_gains_on_prefix_sums(values, budget):
    gains = np.concatenate([np.zeros((len(values), 1)), np.cumsum(values, axis=1)], axis=1)
    assert np.array_equal(optimal_dp(values, budget), optimal_dp_gains(gains, budget))


@pytest.mark.parametrize("rule", ["token", "block"])
def test_prefix_gains_are_the_exact_conditional_mean_of_tau(rule):
    # G[i, s] = E[τ | X^s] from the full-row exact law of τ for draft length s.
    rng = np.random.default_rng(31)
    tokens, dr, tr = random_paths(rng, 200, 5, 6)
    st_ = position_stats(tokens, dr, tr)
    gains = prefix_gains(st_["q"], st_["pt"], st_["z"], rule)
    assert np.allclose(gains[:, 0], 0.0)
    for size in range(1, 6):
        law = tau_law(tokens[:, :size], dr[:, :size], tr[:, : size + 1], rule)
        assert np.allclose(gains[:, size], (law * np.arange(size + 1)).sum(axis=1))
    if rule == "token":  # additive: prefix sums of P(τ ≥ j | X^j)
        assert np.allclose(np.diff(gains, axis=1), token_weights(st_["q"], st_["pt"]))


def test_bv_prefix_gains_differ_from_summed_weights_and_can_fall():
    # The paper's example (THEORY.md §4), draft "aa": Σ p_i = 3/4 but E[τ | aa] = 1/2; and a
    # drafted token the target rules out (pt = 0) makes verifying it lower E[τ | X^s].
    ms, mb = np.array([2 / 3, 1 / 3]), np.array([1 / 3, 2 / 3])
    tokens = np.array([[0, 0]])
    st_ = position_stats(tokens, np.broadcast_to(ms, (1, 2, 2)), np.broadcast_to(mb, (1, 3, 2)))
    gains = prefix_gains(st_["q"], st_["pt"], st_["z"], "block")
    assert gains[0].tolist() == pytest.approx([0.0, 0.5, 0.5])
    assert block_weights(st_["q"], st_["pt"]).sum() == pytest.approx(0.75)
    draft = np.array([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]])
    target = np.array([[[0.3, 0.5, 0.2], [0.6, 0.4, 0.0], [1 / 3, 1 / 3, 1 / 3]]])
    st_ = position_stats(np.array([[0, 2]]), draft, target)  # second token: pt = 0
    gains = prefix_gains(st_["q"], st_["pt"], st_["z"], "block")
    # p_1 = 0.6, Z_2 = 0.16, h_1 = 0.16 / 0.56: E[τ | X^1] = 0.6 > E[τ | X^2] = h_1.
    assert gains[0].tolist() == pytest.approx([0.0, 0.6, 0.16 / 0.56])
    assert optimal_dp_gains(gains, 2).tolist() == [1]


# ---------------------------------------------------------------- tree of max-plus convolutions


def gain_tables(max_n: int, max_k: int, integer: bool = False, min_n: int = 1):
    """[N, K+1] gain tables: any sign, not monotone; integers make float ties exact ties."""
    if integer:
        elements = st.integers(-3, 3).map(float)
    else:
        elements = st.floats(-2.0, 2.0, allow_nan=False, allow_subnormal=False)
    shapes = st.tuples(st.integers(min_n, max_n), st.integers(0, max_k))
    return shapes.flatmap(lambda sh: arrays(np.float64, (sh[0], sh[1] + 1), elements=elements))


def tree_left_shares(s: tuple[int, ...]) -> tuple[int, ...]:
    """Left-subtree totals of every internal node of the pairing tree, top level first.

    Level by level, nodes (index ranges) are paired in order; an odd last node is paired with
    an empty identity node (its left share is then forced, so it is left out).
    """
    nodes = [(i, i + 1) for i in range(len(s))]
    levels = []
    while len(nodes) > 1:
        shares = [sum(s[a:b]) for (a, b), _ in zip(nodes[0::2], nodes[1::2])]
        levels.append(tuple(shares))
        paired = [(nodes[i][0], nodes[i + 1][1]) for i in range(0, len(nodes) - 1, 2)]
        nodes = paired + ([nodes[-1]] if len(nodes) % 2 else [])
    return tuple(x for level in reversed(levels) for x in level)


def tree_brute_force(gains: np.ndarray, budget: int) -> tuple[float, tuple[int, ...]]:
    """Enumeration with optimal_tree_gains' documented tie-break: the largest value, then the
    smallest total, then the smallest left share at each node, top down."""
    n, k1 = gains.shape
    rows = gains.tolist()
    best = None
    for s in itertools.product(range(k1), repeat=n):
        if sum(s) > budget:
            continue
        key = (-sum(rows[i][si] for i, si in enumerate(s)), sum(s), tree_left_shares(s), s)
        if best is None or key < best:
            best = key
    return -best[0], best[3]


def assert_feasible(s: np.ndarray, n: int, k: int, budget: int) -> None:
    assert s.dtype == np.int64 and s.shape == (n,)
    assert s.sum() <= budget and ((s >= 0) & (s <= k)).all()


@given(gain_tables(max_n=13, max_k=8, min_n=0), st.integers(0, 120))
def test_tree_reaches_the_dp_optimum_on_any_gain_table(gains, budget):
    # Negative, non-monotone, non-concave rows; N = 13 exercises odd counts at every level.
    n, k = gains.shape[0], gains.shape[1] - 1
    s_tree = optimal_tree_gains(gains, budget)
    assert_feasible(s_tree, n, k, budget)
    v_dp = gains_value(gains, optimal_dp_gains(gains, budget))
    assert gains_value(gains, s_tree) == pytest.approx(v_dp, rel=1e-9, abs=1e-9)


@given(gain_tables(max_n=5, max_k=3), st.integers(0, 16))
def test_tree_equals_brute_force_value_on_tiny_instances(gains, budget):
    v_brute, _ = tree_brute_force(gains, budget)
    s_tree = optimal_tree_gains(gains, budget)
    assert_feasible(s_tree, gains.shape[0], gains.shape[1] - 1, budget)
    assert gains_value(gains, s_tree) == pytest.approx(v_brute, rel=1e-9, abs=1e-9)


@given(gain_tables(max_n=5, max_k=3, integer=True), st.integers(0, 16))
def test_tree_tie_break_smaller_total_then_smaller_left_shares(gains, budget):
    # Integer gains: float sums are exact, so every optimum ties exactly with the others.
    _, s_brute = tree_brute_force(gains, budget)
    assert tuple(optimal_tree_gains(gains, budget)) == s_brute


def test_tree_tie_break_examples():
    zeros = np.zeros((5, 4))
    assert optimal_tree_gains(zeros, 20).tolist() == [0] * 5  # smaller total: verify nothing
    flat = np.array([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    assert optimal_tree_gains(flat, 1).tolist() == [0, 1]  # smaller left share
    assert optimal_dp_gains(flat, 1).tolist() == [0, 1]
    assert optimal_tree_gains(flat, 4).tolist() == [1, 1]  # smaller total
    three = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    # Nodes {0, 1} and {2}: the left node gets the smaller share, then request 0 inside it.
    assert optimal_tree_gains(three, 1).tolist() == [0, 0, 1]
    assert optimal_tree_gains(three, 2).tolist() == [0, 1, 1]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_tree_small_batches_match_the_dp_and_brute_force(n):
    rng = np.random.default_rng(n)
    gains = rng.normal(size=(n, 4))  # K = 3, any sign
    for budget in range(3 * n + 2):
        s_tree = optimal_tree_gains(gains, budget)
        assert_feasible(s_tree, n, 3, budget)
        v_dp = gains_value(gains, optimal_dp_gains(gains, budget))
        assert gains_value(gains, s_tree) == pytest.approx(v_dp, rel=1e-12, abs=1e-12)
        if n:
            assert gains_value(gains, s_tree) == pytest.approx(
                tree_brute_force(gains, budget)[0], rel=1e-12, abs=1e-12
            )


@given(gain_tables(max_n=9, max_k=6, min_n=0))
def test_tree_budget_zero_verifies_nothing(gains):
    assert optimal_tree_gains(gains, 0).tolist() == [0] * gains.shape[0]


@given(gain_tables(max_n=9, max_k=6, integer=True, min_n=0), st.integers(0, 3))
def test_tree_budget_of_everything_takes_each_rows_first_maximum(gains, extra):
    # Without a binding budget every row takes its best s, the smallest one among ties.
    n, k = gains.shape[0], gains.shape[1] - 1
    expected = np.argmax(gains, axis=1)
    assert optimal_tree_gains(gains, n * k + extra).tolist() == expected.tolist()


def test_tree_on_exact_bv_gains_matches_the_dp():
    # BV's exact per-path gains E[τ | X^s] (prefix_gains) are non-monotone, non-concave.
    rng = np.random.default_rng(41)
    tokens, dr, tr = random_paths(rng, 100, 8, 6)
    st_ = position_stats(tokens, dr, tr)
    gains = prefix_gains(st_["q"], st_["pt"], st_["z"], "block")
    assert (np.diff(gains, axis=1) < 0).any()  # some rows fall
    for budget in (0, 50, 100, 300, 600, 800, 1000):
        s_tree = optimal_tree_gains(gains, budget)
        assert_feasible(s_tree, 100, 8, budget)
        v_dp = gains_value(gains, optimal_dp_gains(gains, budget))
        assert gains_value(gains, s_tree) == pytest.approx(v_dp, rel=1e-9)


def test_tree_is_deterministic_and_layout_independent():
    rng = np.random.default_rng(43)
    gains = np.round(rng.normal(size=(37, 6)) * 4) / 4  # many exact ties
    s = optimal_tree_gains(gains, 60)
    assert np.array_equal(optimal_tree_gains(gains, 60), s)
    assert np.array_equal(optimal_tree_gains(np.asfortranarray(gains), 60), s)
    wide = np.zeros((37, 12))
    wide[:, ::2] = gains
    assert np.array_equal(optimal_tree_gains(wide[:, ::2], 60), s)  # strided input
    assert np.array_equal(optimal_tree_gains(gains.astype(np.float32), 60), s)
    assert np.array_equal(optimal_tree_gains(gains.tolist(), np.int64(60)), s)


@pytest.mark.parametrize(
    "gains, budget",
    [
        (np.array([1.0, 2.0]), 1),  # not 2-d
        (np.zeros((2, 0)), 1),  # no s = 0 column
        (np.array([[0.0, np.nan]]), 1),  # NaN
        (np.array([[0.0, np.inf]]), 1),  # infinity
        (np.array([[0.0, 0.2]]), -1),  # negative budget
        (np.array([[0.0, 0.2]]), 1.5),  # fractional budget
    ],
)
def test_tree_bad_input_is_a_one_line_user_error(gains, budget):
    for fn in (optimal_dp_gains, optimal_tree_gains):
        with pytest.raises(SpecbatchError):
            fn(gains, budget)


def test_monotone_fast_path_is_an_exact_optimum():
    """On non-increasing rows, top-min(C, #positive) reaches optimal_dp's value (and, without
    ties, its allocation); rows that rise go to the DP."""
    from specbatch.theory.allocate.budget import allocate, monotone_optimum

    rng = np.random.default_rng(5)
    for _ in range(30):
        n, k = int(rng.integers(1, 20)), int(rng.integers(1, 7))
        values = np.cumprod(rng.uniform(0, 1, size=(n, k)), axis=1)
        values[rng.uniform(size=n) < 0.2] = 0.0
        c = int(rng.integers(0, n * k + 3))
        fast = monotone_optimum(values, c)
        exact = optimal_dp(values, c)
        assert np.array_equal(fast, exact)
        assert allocation_value(values, fast) == pytest.approx(allocation_value(values, exact))
    rising = np.array([[0.1, 0.9], [0.5, 0.0]])
    assert allocate(rising, 2, "block").tolist() == [2, 0]  # DP; top-C would pick [1, 1]


def test_monotone_topc_equals_greedy_topc_ties_included():
    from specbatch.theory.allocate.budget import monotone_topc

    rng = np.random.default_rng(9)
    for _ in range(60):
        n, k = int(rng.integers(1, 30)), int(rng.integers(1, 8))
        levels = rng.choice([1.0, 0.5, 0.25, 0.0], size=(n, k)) if rng.uniform() < 0.5 else \
            rng.uniform(size=(n, k))
        values = np.cumprod(levels, axis=1)  # non-increasing, many exact ties in half the cases
        c = int(rng.integers(0, n * k + 2))
        assert np.array_equal(monotone_topc(values, c), greedy_topc(values, c))
