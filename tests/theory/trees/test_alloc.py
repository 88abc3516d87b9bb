"""theory/trees/alloc.py: the best closed subtree per size, the batch optimum and its twins."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.theory.trees import alloc as A
from specbatch.theory.trees import reach as R
from tests.theory.trees.test_reach import bundled, trace_arrays


def closed_sets(pred: np.ndarray) -> list:
    """Every draw-prefix-closed set of non-root nodes, as a bool mask # [N] (root True)."""
    out = []
    for bits in itertools.product([False, True], repeat=pred.size - 1):
        mask = np.array([True, *bits])
        if R.is_closed(pred, mask[None])[0]:
            out.append(mask)
    return out


def brute_by_size(pred: np.ndarray, r: np.ndarray, cmax: int) -> np.ndarray:
    best = np.full(cmax + 1, -np.inf)
    for mask in closed_sets(pred):
        k = int(mask.sum()) - 1
        if k <= cmax:
            best[k] = max(best[k], float(r[1:][mask[1:]].sum()))
    return best


def brute_allocate(values: list, budget: int) -> float:
    best = -np.inf
    for counts in itertools.product(*(range(len(v)) for v in values)):
        if sum(counts) <= budget:
            best = max(best, sum(v[k] for v, k in zip(values, counts)))
    return best


@st.composite
def forests(draw, max_nodes: int = 9):
    """A predecessor forest in pre-order (pred(u) < u) and reach-like values in [0, 1]."""
    size = draw(st.integers(1, max_nodes))
    pred = np.array([-1] + [draw(st.integers(0, u - 1)) for u in range(1, size)], dtype=np.int64)
    r = np.array([1.0] + [draw(st.floats(0, 1)) for _ in range(1, size)])
    return pred, r


# --------------------------------------------------------------------- best closed sets


@given(forests(), st.integers(0, 10))
@settings(max_examples=60, deadline=None)
def test_best_by_size_is_the_brute_force_optimum_and_its_sets_realise_it(case, cmax):
    pred, r = case
    table = A.best_by_size(pred, r, cmax)
    want = brute_by_size(pred, r, cmax)
    assert table.value.shape == (cmax + 1,)
    assert np.array_equal(np.isinf(table.value), np.isinf(want))
    feasible = np.isfinite(want)
    assert np.allclose(table.value[feasible], want[feasible], rtol=0, atol=1e-9)
    sizes = np.flatnonzero(feasible)
    stacked = A.best_by_size(pred, np.repeat(r[None], sizes.size, axis=0), cmax)
    masks = A.chosen_masks(stacked, sizes)  # one tree per size at once
    for k, mask in zip(sizes, masks):
        assert (A.chosen_masks(table, [k])[0] == mask).all()
        assert mask.sum() - 1 == k and R.is_closed(pred, mask[None])[0]
        assert abs(r[mask][1:].sum() - table.value[k]) < 1e-9


def test_best_by_size_runs_every_tree_of_a_batch_at_once():
    pred, r, _ = trace_arrays("smollm2-drop2-tree")
    batch = r[:20]
    table = A.best_by_size(pred, batch, 10)
    for i in range(0, 20, 5):
        assert np.allclose(table.value[i], A.best_by_size(pred, batch[i], 10).value, atol=0)
    assert np.allclose(table.value[:, 10], batch[:, 1:].sum(axis=1))  # all nodes
    assert (np.diff(table.value, axis=1) >= 0).all()  # r ≥ 0: a larger budget never hurts


# --------------------------------------------------------------------- batch allocation


@given(st.lists(st.lists(st.floats(0, 10), min_size=0, max_size=4), min_size=1, max_size=4),
       st.integers(0, 12), st.data())
@settings(max_examples=60, deadline=None)
def test_allocate_matches_brute_force(gains, budget, data):
    values = []
    for g in gains:
        v = np.r_[0.0, g]
        holes = data.draw(st.lists(st.integers(1, max(1, v.size - 1)), max_size=2))
        v[[h for h in holes if h < v.size]] = -np.inf  # infeasible sizes
        values.append(v)
    counts = A.allocate_sizes(values, budget)
    got = sum(v[k] for v, k in zip(values, counts))
    assert counts.sum() <= budget and np.isfinite(got)
    assert abs(got - brute_allocate(values, budget)) < 1e-9


def test_allocate_ties_prefer_fewer_nodes_then_lower_requests():
    flat_top = [np.array([0.0, 1.0, 1.0])] * 2
    assert A.allocate_sizes(flat_top, 4).tolist() == [1, 1]  # 2 nodes reach what 4 do
    linear = [np.array([0.0, 0.5, 1.0])] * 3
    assert A.allocate_sizes(linear, 2).tolist() == [2, 0, 0]
    assert A.allocate_sizes([np.array([0.0, 1.0])] * 3, 2).tolist() == [1, 1, 0]
    holes = [np.array([0.0, -np.inf, 5.0]), np.array([0.0, 1.0, 2.0])]
    assert A.allocate_sizes(holes, 2).tolist() == [2, 0]
    assert A.allocate_sizes(holes, 1).tolist() == [0, 1]
    assert A.allocate_sizes([], 3).tolist() == []


def test_optimal_subtrees_match_the_milp():
    rng = np.random.default_rng(7)
    for budget, limit in ((2, None), (5, None), (9, None), (9, 2)):
        pred = np.array([-1] + [int(rng.integers(0, u)) for u in range(1, 7)])
        r = np.c_[np.ones(3), rng.random((3, 6))]
        masks, value = A.optimal_subtrees(pred, r, budget, limit)
        milp_masks, milp_value = A.optimal_subtrees_milp(pred, r, budget, limit)
        assert abs(value - milp_value) < 1e-9
        for m in (masks, milp_masks):
            assert R.is_closed(pred, m).all() and m[:, 1:].sum() <= budget
            assert limit is None or (m[:, 1:].sum(axis=1) <= limit).all()
        assert abs((r * masks)[:, 1:].sum() - value) < 1e-9


@given(st.lists(forests(max_nodes=5), min_size=1, max_size=3), st.integers(0, 8),
       st.none() | st.integers(0, 4))
@settings(max_examples=25, deadline=None)
def test_optimal_subtrees_of_mixed_structures_match_brute_force(cases, budget, limit):
    size = max(p.size for p, _ in cases)
    pred = np.array([np.r_[p, np.arange(p.size, size) - 1] for p, _ in cases])  # pad: chains
    r = np.array([np.r_[v, np.zeros(size - v.size)] for _, v in cases])
    masks, value = A.optimal_subtrees(pred, r, budget, limit)
    assert masks[:, 1:].sum() <= budget
    assert limit is None or (masks[:, 1:].sum(axis=1) <= limit).all()
    assert all(R.is_closed(p, m[None])[0] for p, m in zip(pred, masks))
    assert abs((r * masks)[:, 1:].sum() - value) < 1e-9
    cap = size - 1 if limit is None else min(limit, size - 1)
    tables = [brute_by_size(p, v, cap) for p, v in zip(pred, r)]
    assert abs(value - brute_allocate(tables, budget)) < 1e-9


def test_bad_input_is_a_one_line_error():
    pred = np.array([-1, 0, 1])
    with pytest.raises(SpecbatchError, match="budget"):
        A.optimal_subtrees(pred, np.ones((2, 3)), -1)
    with pytest.raises(SpecbatchError, match="finite"):
        A.best_by_size(pred, np.array([1.0, np.nan, 0.5]), 2)
    with pytest.raises(SpecbatchError, match="pre-order"):
        A.best_by_size(np.array([-1, 2, 0]), np.ones(3), 2)
    with pytest.raises(SpecbatchError, match="size 0"):
        A.allocate_sizes([np.array([-np.inf, 1.0])], 1)
    with pytest.raises(SpecbatchError, match="feasible size"):
        A.chosen_masks(A.best_by_size(pred, np.ones(3), 1), [2])
    with pytest.raises(SpecbatchError, match="pred: expected"):
        A.optimal_subtrees(np.array([-1, 0]), np.ones((2, 3)), 2)
    for rule in (lambda: A.top_nodes(np.ones((2, 3)), -1),
                 lambda: A.frontier_greedy(pred, np.ones((2, 3)), 1.5),
                 lambda: A.top_nodes_per_request(np.ones((2, 3)), -2)):
        with pytest.raises(SpecbatchError, match="budget"):
            rule()


# --------------------------------------------------------------------- confidence heuristics


def test_top_c_by_path_confidence_is_closed_on_the_top_k_trace():
    """Children drafted top-k are sorted by draft confidence, so a node's predecessor (its
    parent, or its previous sibling) never has a lower path confidence and ranks before it
    (ties by node order): every top-C set of any batch is draw-prefix closed."""
    t = bundled("smollm2-drop2-tree")
    owner = np.repeat(np.arange(t.parent.size), np.diff(t.draw_offsets))
    base = np.repeat(t.node_offsets[:-1], np.diff(t.node_offsets))
    conf = t.draft_conf[base[owner] + t.draws]
    same = owner[1:] == owner[:-1]
    assert (conf[1:][same] <= conf[:-1][same]).all()  # siblings in draw order: non-increasing
    pred, _, path_conf = trace_arrays("smollm2-drop2-tree")
    rng = np.random.default_rng(0)
    for _ in range(30):
        rows = rng.choice(path_conf.shape[0], int(rng.integers(1, 9)), replace=False)
        budget = int(rng.integers(0, 10 * rows.size + 1))
        assert R.is_closed(pred, A.top_nodes(path_conf[rows], budget)).all()
        assert R.is_closed(pred, A.top_nodes_per_request(path_conf[rows], budget // 4)).all()


def test_top_c_by_path_confidence_can_break_closure_on_a_sampled_tree():
    """i.i.d. children are not sorted: a later draw can be more confident than an earlier one,
    and a top-C set then holds it without its predecessor (not replayable with rrs_accept)."""
    pred, _, path_conf = trace_arrays("smollm2-drop2-tree-iid")
    broken = [(row, c) for row in range(200) for c in range(1, pred.size)
              if not R.is_closed(pred, A.top_nodes(path_conf[row:row + 1], c))[0]]
    assert broken


def test_the_optimum_never_loses_to_the_confidence_rules_at_equal_budget():
    pred, r, conf = trace_arrays("smollm2-drop2-tree")
    rng = np.random.default_rng(1)
    for n, k in [(4, 2), (8, 3), (16, 1)]:
        rows = rng.choice(r.shape[0], n, replace=False)
        masks, value = A.optimal_subtrees(pred, r[rows], k * n)
        assert masks[:, 1:].sum() <= k * n
        for rule in (A.top_nodes(conf[rows], k * n), A.top_nodes_per_request(conf[rows], k),
                     A.frontier_greedy(pred, r[rows], k * n)):
            assert value >= (r[rows] * rule)[:, 1:].sum() - 1e-12


@given(st.lists(forests(max_nodes=7), min_size=1, max_size=3), st.integers(0, 12), st.data())
@settings(max_examples=40, deadline=None)
def test_frontier_greedy_is_closed_for_any_score(cases, budget, data):
    for pred, _ in cases:
        score = np.array(data.draw(st.lists(st.floats(0, 1), min_size=pred.size,
                                            max_size=pred.size)))
        masks = A.frontier_greedy(pred, score[None], budget)
        assert R.is_closed(pred, masks).all()
        assert masks[:, 1:].sum() == min(budget, pred.size - 1)


def test_frontier_greedy_is_top_c_under_monotone_confidence_and_repairs_sampled_trees():
    pred, _, conf = trace_arrays("smollm2-drop2-tree")
    rng = np.random.default_rng(2)
    for _ in range(10):
        rows = rng.choice(conf.shape[0], 6, replace=False)
        budget = int(rng.integers(0, 61))
        assert (A.frontier_greedy(pred, conf[rows], budget)
                == A.top_nodes(conf[rows], budget)).all()
    pred, _, conf = trace_arrays("smollm2-drop2-tree-iid")
    masks = A.frontier_greedy(pred, conf[:40], 120)
    assert R.is_closed(pred, masks).all() and masks[:, 1:].sum() == 120
    assert not R.is_closed(pred, A.top_nodes(conf[:40], 120)).all()


def naive_frontier_greedy(pred, score, budget, limit):
    """The rule written plainly: repeatedly scan every request under ``limit`` for its
    frontier nodes and take the best (score, then lower request, then lower node id)."""
    n, size = score.shape
    masks = np.zeros((n, size), dtype=bool)
    masks[:, 0] = True
    for _ in range(budget):
        frontier = [(-score[i, u], i, u) for i in range(n) for u in range(1, size)
                    if masks[i].sum() - 1 < limit and not masks[i, u] and masks[i, pred[u]]]
        if not frontier:
            break
        _, i, u = min(frontier)
        masks[i, u] = True
    return masks


@given(forests(max_nodes=7), st.integers(1, 4), st.integers(0, 14), st.integers(0, 7),
       st.data())
@settings(max_examples=60, deadline=None)
def test_frontier_greedy_with_a_limit_is_the_plain_rule_capped_per_request(
        case, n, budget, limit, data):
    pred, _ = case
    score = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
                                        min_size=n * pred.size, max_size=n * pred.size)))
    score = score.reshape(n, pred.size)
    masks = A.frontier_greedy(pred, score, budget, limit=limit)
    assert (masks == naive_frontier_greedy(pred, score, budget, limit)).all()
    assert R.is_closed(pred, masks).all()
    assert (masks[:, 1:].sum(axis=1) <= limit).all()
    assert masks[:, 1:].sum() == min(budget, n * min(limit, pred.size - 1))
    assert (A.frontier_greedy(pred, score, budget, limit=pred.size - 1)
            == A.frontier_greedy(pred, score, budget)).all()
