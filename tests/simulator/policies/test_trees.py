"""Tree policies and tree runs: SGLang's static rule, TETRIS over nodes, the engine's twin."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.policies.view import StepView
from specbatch.simulator.run import build_cost, simulate
from specbatch.traces.format.files import read_trace
from tests.simulator.helpers import StepTimeOnly
from tests.simulator.replay.test_tree import ROOT

TREE = "smollm2-drop2-tree"


@pytest.fixture(scope="module")
def trace():
    return read_trace(ROOT / "traces" / "data" / TREE)


def view_of(trace, rows, budget=None):
    rows = np.asarray(rows, dtype=np.int64)
    view = StepView(trace, rows, np.zeros(rows.shape[0], dtype=np.int64), budget, 10, None)
    return view


def decide(trace, rows, budget, **kw):
    config = load_config(None, trace=TREE, verify="specinfer", **kw)
    policy = make_policy(config, trace.K)
    view = view_of(trace, rows)
    view.budget = budget if budget is not None else policy.k * view.n
    return policy, view, policy.decide_tree(view)


def test_static_tree_takes_the_k_most_confident_nodes(trace):
    """SGLang's organize_draft_results: topk(path score, num_draft_tokens − 1) per request."""
    _, view, (drafted, verified, mask) = decide(trace, [0, 1, 2], None, policy="static-tree",
                                                num_speculative_tokens=3)
    t = view.tree
    assert drafted.tolist() == [10, 10, 10] and verified.tolist() == [3, 3, 3]
    for i, row in enumerate([0, 1, 2]):
        chosen = set(np.flatnonzero(mask[i, 1:]) + 1)
        top3 = set(np.argsort(-t.conf[row, 1:], kind="stable")[:3] + 1)
        assert chosen == top3 and mask[i, 0]


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, 3469), min_size=1, max_size=24),
       k=st.integers(1, 10), extra=st.integers(0, 9), budget=st.integers(0, 120))
def test_tetris_tree_is_the_batch_top_c_and_stays_closed(trace, rows, k, extra, budget):
    """Σ s_i = min(C, Σ caps), s_i ≤ min(k + e, N − 1), every request's subtree closed, and
    no unchosen node scores above a chosen one (the global top-C by path confidence)."""
    extra = min(extra, 10 - k)
    policy, view, (drafted, verified, mask) = decide(
        trace, rows, budget, policy="tetris-tree", num_speculative_tokens=k, extra=extra)
    t = view.tree
    cap = min(k + extra, 10)
    assert (verified <= cap).all() and verified.sum() == min(budget, cap * len(rows))
    assert (mask[:, 1:].sum(axis=1) == verified).all() and t.check_closed(mask).all()
    conf = t.conf[np.asarray(rows)][:, 1:]
    eligible = t.rank[np.asarray(rows)][:, 1:] < cap
    chosen, left = conf[mask[:, 1:]], conf[eligible & ~mask[:, 1:]]
    if chosen.size and left.size:
        assert chosen.min() >= left.max()


def test_tetris_tree_gives_more_nodes_to_confident_requests(trace):
    """With C = 3n the batch's nodes move to the requests whose trees the draft trusts."""
    t = read_trace(ROOT / "traces" / "data" / TREE)
    rows = np.arange(64)
    _, view, (_, verified, _) = decide(t, rows, None, policy="tetris-tree",
                                       num_speculative_tokens=3, extra=7)
    top1 = view.tree.conf[rows, 1]
    assert verified.sum() == 192 and verified.std() > 0
    assert np.corrcoef(top1, verified)[0, 1] > 0.3


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(st.integers(0, 3469), min_size=1, max_size=16), k=st.integers(1, 6),
       budget_per_request=st.integers(0, 6))
def test_tree_optimum_bounds_both_rules_in_expectation(trace, rows, k, budget_per_request):
    """At the same C (and cap k + e = 10), the optimum's Σ E[τ] is at least TETRIS-over-nodes'
    and at least the static tree's when C = k·n; its subtrees are closed and within C."""
    n = len(rows)
    budget = budget_per_request * n
    opt = decide(trace, rows, budget, policy="tree-optimum", num_speculative_tokens=k,
                 extra=10 - k)
    tet = decide(trace, rows, budget, policy="tetris-tree", num_speculative_tokens=k,
                 extra=10 - k)
    t, r = opt[1].tree, np.asarray(rows)
    (_, v_opt, m_opt), (_, _, m_tet) = opt[2], tet[2]
    assert v_opt.sum() <= budget and t.check_closed(m_opt).all()
    assert t.expected(r, m_opt).sum() >= t.expected(r, m_tet).sum() - 1e-12
    static = decide(trace, rows, None, policy="static-tree", num_speculative_tokens=k)[2][2]
    best_at_kn = decide(trace, rows, k * n, policy="tree-optimum", num_speculative_tokens=k,
                        extra=10 - k)[2][2]
    assert t.expected(r, best_at_kn).sum() >= t.expected(r, static).sum() - 1e-12


@pytest.mark.parametrize("kw", [
    dict(policy="tree-optimum", num_speculative_tokens=3, extra=7, verify="specinfer"),
    dict(policy="static-tree", num_speculative_tokens=4, verify="specinfer"),
    dict(policy="static-tree", num_speculative_tokens=10, verify="traversal"),
    dict(policy="tetris-tree", num_speculative_tokens=3, extra=4, verify="specinfer",
         enable_chunked_prefill=True, max_num_batched_tokens=96),
    dict(policy="tetris-tree", num_speculative_tokens=2, extra=2, verify="specinfer",
         scheduler="vllm-v0", kv_mode="paged", kv_capacity=2000, max_num_seqs=12),
])
def test_tree_runs_match_the_per_request_reference(trace, kw):
    """The vectorised subtree replay and the budget cuts of V1 steps give the reference
    engine's tables exactly (TreeStats per row, scalar hash, one step_time per pass)."""
    config = load_config(None, trace=TREE, requests=24, **kw)
    roofline = build_cost(config)
    fast = simulate(config, trace, cost_model=roofline)
    slow = simulate(config, trace, cost_model=StepTimeOnly(roofline), reference=True)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    assert fast.summary["verify"] == kw["verify"]
    assert (fast.steps["depth"][fast.steps["batch"] > 0] <= 3).all()  # D = the tree's depth


def test_a_tree_run_is_deterministic_and_prices_the_verified_nodes(trace):
    config = load_config(None, trace=TREE, requests=16, policy="static-tree",
                         num_speculative_tokens=5, verify="specinfer")
    a, b = simulate(config, trace), simulate(config, trace)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    decode = a.steps[a.steps["decode_requests"] > 0]
    assert (decode["verified"] <= 5 * decode["decode_requests"]).all()
    assert (decode["drafted"] == 10 * decode["decode_requests"]).all()


@pytest.mark.parametrize("kw, field", [
    (dict(policy="fixed", verify="specinfer"), "verify"),
    (dict(policy="static-tree", verify="token"), "verify"),
    (dict(policy="tetris-tree", verify="traversal"), "policy"),
    (dict(policy="static-tree", verify="specinfer", num_speculative_tokens=11),
     "num_speculative_tokens"),
    (dict(policy="static-tree", verify="traversal", num_speculative_tokens=4),
     "num_speculative_tokens"),
])
def test_impossible_tree_settings_are_one_line_errors(trace, kw, field):
    with pytest.raises(SpecbatchError, match=f"field {field}: expected"):
        simulate(load_config(None, trace=TREE, requests=4, **kw), trace)


def test_a_tree_rule_on_a_chain_trace_is_refused():
    config = load_config(None, trace="tiny", requests=4, policy="static-tree", verify="specinfer")
    with pytest.raises(SpecbatchError, match="field verify: expected token or block on a chain"):
        simulate(config)


def test_static_tree_on_a_hand_tree_is_sglangs_topk_of_path_scores():
    """The hand tree of test_tree_tables (path scores 1: .6, 2: .3, 3: .3, 4: .27):
    SGLang's organize_draft_results with num_draft_tokens = k + 1 keeps topk(scores, k); the
    tie between nodes 2 and 3 goes to the lower node id (torch.topk leaves ties unspecified)."""
    from tests.simulator.replay.test_tree import hand_trace

    trace = hand_trace()
    expected = {1: [1, 1, 0, 0, 0], 2: [1, 1, 1, 0, 0], 3: [1, 1, 1, 1, 0], 4: [1, 1, 1, 1, 1]}
    for k, mask in expected.items():
        config = load_config(None, trace="tiny", policy="static-tree", verify="specinfer",
                             num_speculative_tokens=k)
        policy = make_policy(config, 2)
        view = StepView(trace, np.array([0]), np.zeros(1, dtype=np.int64), None, k, None)
        view.budget = k
        drafted, verified, got = policy.decide_tree(view)
        assert got[0].astype(int).tolist() == mask and verified.tolist() == [k]
        assert drafted.tolist() == [4]  # the whole tree is drafted
