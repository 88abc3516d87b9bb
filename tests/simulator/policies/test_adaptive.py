"""vllm-adaptive (vLLM's adaptive verification): THEORY.md §7's worked check, a hand-computed
three-request step (stale and fresh), vLLM's table construction by hand, a per-request
reference twin with parity tests, and determinism of whole runs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.policies.adaptive import (
    budget_scan,
    exact_step_costs,
    ranked_slots,
    split_budget,
)
from specbatch.simulator.policies.adaptive_tables import (
    CostTables,
    build_tables,
    dummy_shape,
    median_curve,
    profile_sizes,
    stepped_table,
)
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import simulate

S = np.array([[0.9, 0.5], [0.6, 0.1]])


def test_theory_7_worked_check_staircase_gives_2_and_smooth_gives_3():
    """THEORY.md §7: N = T = 2, D = 1; V(t) = 10 for t <= 4, 14 for t <= 8 -> B* = 2
    (ratios 0.182, 0.264, 0.318, 0.267, 0.273); V(t) = 8 + t/2 -> B* = 3 (0.200, 0.276,
    0.318, 0.348, 0.342)."""
    rows, positions = ranked_slots(S, np.array([2, 2]))
    scores = S[rows, positions]
    assert scores.tolist() == [0.9, 0.6, 0.5, 0.1]
    t = 2 + np.arange(5)
    staircase = 1 + np.where(t <= 4, 10.0, 14.0)
    smooth = 1 + 8 + t / 2
    assert budget_scan(scores, 2, staircase) == 2
    assert budget_scan(scores, 2, smooth) == 3
    assert split_budget(S, np.array([2, 2]), 2).tolist() == [1, 1]  # (1,1) and (2,1)
    assert split_budget(S, np.array([2, 2]), 3).tolist() == [2, 1]


CONF = np.array([[0.9, 0.8, 0.5], [0.6, 0.5, 0.9], [0.95, 0.9, 0.9]])  # current step
PREVIOUS = np.cumprod(np.full(3, 0.9))  # requests 0 and 1 had conf 0.9 at every position


def hand_policy(stale: str):
    """A vllm-adaptive of K = 3 whose tables are D(3) = 1, V(t) = 2 + t/2 (ms)."""
    config = load_config(None, policy="vllm-adaptive", k=3, adaptive_confidences=stale)
    policy = make_policy(config, 3)
    policy.tables = CostTables(draft=np.array([0.0, 1.0, 1.0, 1.0]),
                               verify=2 + np.arange(40) / 2)
    # rows 10 and 20 decoded last step (their survival remembered); row 30 is new
    policy.previous = {10: PREVIOUS, 20: PREVIOUS}
    return policy


def hand_view():
    return SimpleNamespace(n=3, rows=np.array([10, 20, 30]), kv=np.zeros(3, dtype=np.int64),
                           cost=None, proposed=None, cum_conf=np.cumprod(CONF, axis=1))


def test_hand_step_stale_budget_verifies_every_slot():
    """Stale survival: requests 0, 1: 0.9, 0.81, 0.729; request 2 new: 1, 1, 1. Sorted:
    1, 1, 1, .9, .9, .81, .81, .729, .729; cost(B) = 1 + 2 + (3 + B)/2 = 4.5 + B/2.
    Ratios (3 + Σ)/cost: B=6 8.61/7.5 = 1.148, B=7 9.42/8 = 1.1775, B=8 10.149/8.5 = 1.194,
    B=9 10.878/9 = 1.2087 (the max): B* = 9, every draft verified."""
    policy = hand_policy("stale")
    drafted, verified = policy.decide(hand_view())
    assert policy.budgets == [9]
    assert drafted.tolist() == [3, 3, 3] and verified.tolist() == [3, 3, 3]


def test_hand_step_fresh_budget_takes_the_top_six_by_current_survival():
    """Fresh survival: r0 .9, .72, .36; r1 .6, .30, .27; r2 .95, .855, .7695. Sorted sums:
    .95, 1.85, 2.705, 3.4745, 4.1945, 4.7945, 5.1545, ...; ratios B=5 7.1945/7 = 1.0278,
    B=6 7.7945/7.5 = 1.0393 (the max), B=7 8.1545/8 = 1.0193: B* = 6. Top six: (r2,1),
    (r0,1), (r2,2), (r2,3), (r0,2), (r1,1) -> verified [2, 1, 3]."""
    policy = hand_policy("fresh")
    assert policy.decide(hand_view())[1].tolist() == [2, 1, 3]
    assert policy.budgets == [6]


def test_stale_budget_with_the_current_split():
    """B from stale survival, split by the current one: with V(t) = 2 + t/2 for t <= 8 and
    + 10 past it, stale sizing stops at B = 5 (t = 8; ratio 3 + 4.8 = 7.8 / 7 = 1.114), and
    the five slots go to the current top five: (r2,1..3), (r0,1..2) -> [2, 0, 3]."""
    policy = hand_policy("stale")
    t = np.arange(40)
    policy.tables = CostTables(draft=np.array([0.0, 1.0, 1.0, 1.0]),
                               verify=2 + t / 2 + np.where(t > 8, 10.0, 0.0))
    assert policy.decide(hand_view())[1].tolist() == [2, 0, 3]
    assert policy.budgets == [5]


def test_observe_moves_each_survival_to_the_row_the_request_decodes_next():
    """Request at row 10 accepted 2 (emits 3 tokens): its next row is 13."""
    policy = hand_policy("stale")
    policy.decide(hand_view())
    policy.observe(np.array([3, 3, 3]), np.array([2, 0, 3]))
    assert sorted(policy.previous) == [13, 21, 34]
    np.testing.assert_array_equal(policy.previous[13], np.cumprod(CONF[0]))


def test_observe_after_a_budget_cut_advances_only_the_requests_that_ran():
    """A token budget ran only the first two decided requests (simulator.engine.v1.step cut_plan):
    they move to rows 13 and 21; the third did not advance and keeps what it had."""
    policy = hand_policy("stale")
    policy.decide(hand_view())
    policy.observe(np.array([3, 3, 3]), np.array([2, 0, 3]))  # rows 13, 21, 34 next
    policy.decide(SimpleNamespace(**{**vars(hand_view()), "rows": np.array([13, 21, 34])}))
    policy.observe(np.array([3, 1]), np.array([1, 0]))  # the third (row 34) was cut
    assert sorted(policy.previous) == [15, 22, 34]
    np.testing.assert_array_equal(policy.previous[34], np.cumprod(CONF[2]))


def test_stepped_table_by_hand():
    """vLLM's build_table on curve (1, 1), (4, 3), (8, 2), (16, 5), (32, 9), limit 8: forced
    monotone -> 1, 3, 3, 5, 9; t <= 8 steps to the next key (t = 2 -> 3, t = 5 -> 3); past the
    limit interpolated between keys past it (t = 9 -> 5 clamped, t = 24 -> 7); past the last
    key extrapolated at slope 4/16 (t = 40 -> 11)."""
    curve = [(1, 1.0), (4, 3.0), (8, 2.0), (16, 5.0), (32, 9.0)]
    table = stepped_table(curve, 40, 8)
    assert table[[0, 1, 2, 4, 5, 8, 9, 24, 32, 40]].tolist() == [1, 1, 3, 3, 3, 3, 5, 7, 9, 11]


def test_profile_sizes_and_shapes_follow_batches_to_profile():
    """Capture sizes, then 1.5 x the largest and doublings up to max tokens; a dummy step of
    t tokens is min(max_reqs, ceil(t / (K + 1))) requests sharing t evenly."""
    assert profile_sizes((1, 2, 4, 8), 40) == [1, 2, 4, 8, 12, 16, 32, 40]
    assert dummy_shape(10, 64, 3).tolist() == [4, 3, 3]
    assert dummy_shape(100, 8, 3).tolist() == [13, 13, 13, 13, 12, 12, 12, 12]
    assert median_curve([(2, 5.0), (1, 1.0), (2, 1.0), (2, 3.0)]) == [(1, 1.0), (2, 3.0)]


def test_profiled_tables_are_monotone_and_price_the_profile_context():
    cost = build_cost_model()
    tables = build_tables(cost, 16, 4, 8192, None)
    assert np.all(np.diff(tables.verify) >= 0) and np.all(np.diff(tables.draft[1:]) >= 0)
    short = build_tables(cost, 16, 4, 8192, None, context=128)
    assert short.verify[40] < tables.verify[40]  # attention over 8192 tokens costs more


def reference_decide(sizing, current, caps, cost_of):
    """Per-request reference twin: the budget by an explicit sort of (score, position,
    request) triples and a ratio loop in Python floats; the split by B rounds each giving one
    token to the request whose next slot has the highest current survival."""
    n = sizing.shape[0]
    slots = sorted((-sizing[i, j], j, i) for i in range(n) for j in range(caps[i]))
    best, best_b, total = -1.0, 0, 0.0
    costs = cost_of([i for _, _, i in slots], [j for _, j, _ in slots])
    for b in range(len(slots) + 1):
        if b:
            total += -slots[b - 1][0]
        ratio = (n + total) / costs[b]
        if ratio > best:
            best, best_b = ratio, b
    verified = [0] * n
    for _ in range(best_b):
        open_ = [(-current[i, verified[i]], verified[i], i) for i in range(n)
                 if verified[i] < caps[i]]
        verified[min(open_)[2]] += 1
    return best_b, verified


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), depth=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_fast_rule_matches_the_reference_twin(n, depth, seed):
    rng = np.random.default_rng(seed)
    sizing = np.cumprod(rng.choice([0.25, 0.5, 0.75, 1.0], size=(n, depth)), axis=1)
    current = np.cumprod(rng.choice([0.25, 0.5, 0.75, 1.0], size=(n, depth)), axis=1)
    caps = rng.integers(0, depth + 1, size=n)
    verify = 1.0 + rng.random(n * depth + n + 1).cumsum()

    def cost_of(rows, positions):
        return 0.5 + verify[n: n + len(rows) + 1]

    rows, positions = ranked_slots(sizing, caps)
    b = budget_scan(sizing[rows, positions], n, cost_of(rows, positions))
    ref_b, ref_verified = reference_decide(sizing, current, caps, cost_of)
    assert b == ref_b
    assert split_budget(current, caps, b).tolist() == ref_verified


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), depth=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_exact_costs_match_one_step_time_call_per_budget(n, depth, seed, h100):
    """exact_step_costs' running sums = the cost model's step on the explicit queries."""
    roofline = h100
    rng = np.random.default_rng(seed)
    kv = rng.integers(1, 3000, size=n)
    survival = np.cumprod(rng.random((n, depth)), axis=1)
    rows, positions = ranked_slots(survival, np.full(n, depth))
    fast = exact_step_costs(roofline, kv, depth, rows, positions)
    ones = np.ones(n, dtype=np.int64)
    fixed = roofline.overhead + sum(roofline.step_time("draft", ones, kv + d)
                                    for d in range(depth))
    verified = np.zeros(n, dtype=np.int64)
    for b in range(rows.shape[0] + 1):
        if b:
            verified[rows[b - 1]] += 1
        slow = fixed + roofline.step_time("target", verified + 1, kv)
        assert fast[b] == pytest.approx(slow, rel=1e-12)


def run(**knobs):
    config = load_config(None, policy="vllm-adaptive", trace="smollm2", requests=24,
                         max_num_seqs=8, k=4, **knobs)
    return simulate(config).summary


@pytest.mark.parametrize("knobs", [{}, {"adaptive_cost_tables": "exact",
                                        "adaptive_confidences": "fresh",
                                        "adaptive_survival": "truth"}])
def test_runs_are_deterministic(knobs):
    assert run(**knobs) == run(**knobs)


def test_truth_survival_is_refused_under_block_verification():
    with pytest.raises(SpecbatchError, match="truth is the TV bound"):
        make_policy(load_config(None, policy="vllm-adaptive", k=3, verify="block",
                                adaptive_survival="truth"), 3)


def test_adaptive_knobs_are_refused_for_other_policies():
    from specbatch.simulator.config.sim_config import check_settings_apply

    config = load_config(None, policy="tetris", k=3, adaptive_confidences="fresh")
    with pytest.raises(SpecbatchError, match="adaptive_confidences"):
        check_settings_apply(config, {"adaptive_confidences"})


CHAIN_TRACES = ("smollm2", "smollm2-drop2", "smollm2-drop2-greedy", "smollm2-drop4",
                "smollm2-drop4-t0", "smollm2-ngram", "smollm2-ngram-t0", "smollm2-q4", "tiny",
                "tiny-t0")


@pytest.mark.slow
@pytest.mark.parametrize("trace", CHAIN_TRACES)
def test_runs_on_every_bundled_chain_trace(trace):
    """vllm-adaptive as shipped, in the engine's reference mode (every plan checked)."""
    config = load_config(None, policy="vllm-adaptive", trace=trace, requests=8, max_num_seqs=4,
                         k=6)
    summary = simulate(config, reference=True).summary
    assert summary["tokens"] > 0 and 0 <= summary["verified"] <= summary["drafted"]
