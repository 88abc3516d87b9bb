"""theory/tree_alloc.py: reach values, the best closed subtree per size, and the batch optimum."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.theory import tree_alloc as A
from specbatch.theory import tree_shapes as S
from specbatch.theory import tree_stats as TS
from specbatch.theory.models import random_pair
from specbatch.traces.format import read_trace

BRANCHING = [("2,1", "iid"), ("2,2", "distinct"), ("1,2", "iid"), ("3,2,1", "topk"),
             ("2,2", "topk")]


def flat(stats: TS.TreeStats) -> tuple:
    """(parent, draw_offsets, draws, rrs_accept) arrays of one tree."""
    counts = [len(d) for d in stats.draws]
    return (np.array(stats.parent), np.r_[0, np.cumsum(counts)],
            np.array([c for d in stats.draws for c in d], dtype=np.int64),
            np.array([float(a) for acc in stats.rrs_accept for a in acc]))


def expected_tau(stats: TS.TreeStats):
    return sum(d * p for d, p in enumerate(TS.tau_law_from_stats(stats, "specinfer")))


def exact_trees(spec: str, sampling: str, seed: int, limit: int = 12) -> list:
    """Replay numbers (Fractions) of the most probable realised trees of a random exact pair."""
    shape = S.parse_shape(spec, sampling)
    pair = random_pair(seed, 3, ("iid", "markov", "table")[seed % 3], depth=shape.depth,
                       concentration=0.7, exact=True)
    law = sorted(S.tree_law(pair, shape).items(), key=lambda kv: -kv[1])[:limit]
    return [TS.tree_stats(pair, root, shape) for root, _ in law]


@cache
def bundled(name: str):
    return read_trace(name).tree


def trace_arrays(name: str) -> tuple:
    """(pred # [N] shared, reach # [rows, N], path confidence # [rows, N]) of a bundled trace."""
    t = bundled(name)
    n = int(t.node_offsets[1])
    pred = A.predecessors(t.parent, t.draw_offsets, t.draws, t.node_offsets).reshape(-1, n)
    assert (pred == pred[0]).all()  # one structure per trace
    r = A.reach_values(t.node_offsets, t.parent, t.draw_offsets, t.draws, t.rrs_accept)
    conf = A.path_products(t.node_offsets, t.parent, t.draft_conf)
    return pred[0], r.reshape(-1, n), conf.reshape(-1, n)


def closed_sets(pred: np.ndarray) -> list:
    """Every draw-prefix-closed set of non-root nodes, as a bool mask # [N] (root True)."""
    out = []
    for bits in itertools.product([False, True], repeat=pred.size - 1):
        mask = np.array([True, *bits])
        if A.is_closed(pred, mask[None])[0]:
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


# --------------------------------------------------------------------- predecessors, reach


def test_predecessor_of_a_node_is_its_previous_sibling_draw_or_its_parent():
    # The 2,2,1 tree in pre-order: 0 -> (1, 6); 1 -> (2, 4); 2 -> 3; 4 -> 5; 6 -> (7, 9); ...
    parent = np.array([-1, 0, 1, 2, 1, 4, 0, 6, 7, 6, 9])
    draws = [[1, 6], [2, 4], [3], [], [5], [], [7, 9], [8], [], [10], []]
    offsets = np.r_[0, np.cumsum([len(d) for d in draws])]
    pred = A.predecessors(parent, offsets, np.concatenate(draws))
    assert pred.tolist() == [-1, 0, 1, 2, 2, 4, 1, 6, 7, 7, 9]
    # Draw order, not node order, defines the predecessor: swap node 1's draws.
    draws[1] = [4, 2]
    pred = A.predecessors(parent, offsets, np.concatenate(draws))
    assert pred[4] == 1 and pred[2] == 4


def test_a_path_trie_repeats_draws_and_is_refused():
    shape = S.parse_shape("2x2")
    pair = random_pair(3, 2, "iid", exact=True)
    root = next(r for r in S.tree_law(pair, shape) if len(set(r.draws)) < len(r.draws))
    parent, offsets, draws, rrs = flat(TS.tree_stats(pair, root, shape))
    with pytest.raises(SpecbatchError, match="drawn exactly once"):
        A.predecessors(parent, offsets, draws)


@pytest.mark.parametrize("spec, sampling", BRANCHING)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reach_sums_to_the_expected_accepted_length_of_rrs_exactly(spec, sampling, seed):
    for stats in exact_trees(spec, sampling, seed):
        reach = A.reach_of_stats(stats)
        assert sum(reach[1:]) == expected_tau(stats)  # Fractions: exact
        parent, offsets, draws, rrs = flat(stats)
        got = A.reach_values([0, len(parent)], parent, offsets, draws, rrs)
        assert np.allclose(got, [float(x) for x in reach], rtol=0, atol=1e-12)


@pytest.mark.parametrize("spec, sampling", [("2,2", "distinct"), ("3,2,1", "topk"),
                                            ("2,1", "iid")])
def test_expected_tau_on_every_closed_subtree_is_its_reach_sum_exactly(spec, sampling):
    for stats in exact_trees(spec, sampling, seed=4, limit=3):
        reach = A.reach_of_stats(stats)
        pred = A.predecessors(*flat(stats)[:3])
        for bits in itertools.product([False, True], repeat=len(reach) - 1):
            keep = (True, *bits)
            if A.is_closed(pred, np.array([keep]))[0]:
                sub = A.subtree_stats(stats, keep)
                assert expected_tau(sub) == sum(x for x, k in zip(reach[1:], bits) if k)
            else:
                with pytest.raises(SpecbatchError, match="not draw-prefix closed"):
                    A.subtree_stats(stats, keep)


@pytest.mark.parametrize("name", ["smollm2-drop2-tree", "smollm2-drop2-tree-iid"])
def test_trace_wide_reach_equals_the_per_tree_loop(name):
    t = bundled(name)
    n = int(t.node_offsets[1])
    r = A.reach_values(t.node_offsets, t.parent, t.draw_offsets, t.draws, t.rrs_accept)
    pred = A.predecessors(t.parent, t.draw_offsets, t.draws, t.node_offsets)
    for row in range(0, t.n_rows, max(1, t.n_rows // 40)):
        stats = t.stats(row)
        span = slice(row * n, (row + 1) * n)
        assert np.allclose(r[span], A.reach_of_stats(stats), rtol=0, atol=1e-12)
        assert abs(r[span][1:].sum() - expected_tau(stats)) < 1e-12
        assert (pred[span] == A.predecessors(*flat(stats)[:3])).all()


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
        assert mask.sum() - 1 == k and A.is_closed(pred, mask[None])[0]
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
    counts = A.allocate(values, budget)
    got = sum(v[k] for v, k in zip(values, counts))
    assert counts.sum() <= budget and np.isfinite(got)
    assert abs(got - brute_allocate(values, budget)) < 1e-9


def test_allocate_ties_prefer_fewer_nodes_then_lower_requests():
    flat_top = [np.array([0.0, 1.0, 1.0])] * 2
    assert A.allocate(flat_top, 4).tolist() == [1, 1]  # 2 nodes reach what 4 do
    linear = [np.array([0.0, 0.5, 1.0])] * 3
    assert A.allocate(linear, 2).tolist() == [2, 0, 0]
    assert A.allocate([np.array([0.0, 1.0])] * 3, 2).tolist() == [1, 1, 0]
    holes = [np.array([0.0, -np.inf, 5.0]), np.array([0.0, 1.0, 2.0])]
    assert A.allocate(holes, 2).tolist() == [2, 0]
    assert A.allocate(holes, 1).tolist() == [0, 1]
    assert A.allocate([], 3).tolist() == []


def test_optimal_subtrees_match_the_milp():
    rng = np.random.default_rng(7)
    for budget in (2, 5, 9):
        pred = np.array([-1] + [int(rng.integers(0, u)) for u in range(1, 7)])
        r = np.c_[np.ones(3), rng.random((3, 6))]
        masks, value = A.optimal_subtrees(pred, r, budget)
        milp_masks, milp_value = A.optimal_subtrees_milp(pred, r, budget)
        assert abs(value - milp_value) < 1e-9
        for m in (masks, milp_masks):
            assert A.is_closed(pred, m).all() and m[:, 1:].sum() <= budget
        assert abs((r * masks)[:, 1:].sum() - value) < 1e-9


@given(st.lists(forests(max_nodes=5), min_size=1, max_size=3), st.integers(0, 8))
@settings(max_examples=25, deadline=None)
def test_optimal_subtrees_of_mixed_structures_match_brute_force(cases, budget):
    size = max(p.size for p, _ in cases)
    pred = np.array([np.r_[p, np.arange(p.size, size) - 1] for p, _ in cases])  # pad: chains
    r = np.array([np.r_[v, np.zeros(size - v.size)] for _, v in cases])
    masks, value = A.optimal_subtrees(pred, r, budget)
    assert masks[:, 1:].sum() <= budget
    assert all(A.is_closed(p, m[None])[0] for p, m in zip(pred, masks))
    assert abs((r * masks)[:, 1:].sum() - value) < 1e-9
    tables = [brute_by_size(p, v, size - 1) for p, v in zip(pred, r)]
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
        A.allocate([np.array([-np.inf, 1.0])], 1)
    with pytest.raises(SpecbatchError, match="feasible size"):
        A.chosen_masks(A.best_by_size(pred, np.ones(3), 1), [2])


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
        assert A.is_closed(pred, A.top_nodes(path_conf[rows], budget)).all()
        assert A.is_closed(pred, A.top_nodes_per_request(path_conf[rows], budget // 4)).all()


def test_top_c_by_path_confidence_can_break_closure_on_a_sampled_tree():
    """i.i.d. children are not sorted: a later draw can be more confident than an earlier one,
    and a top-C set then holds it without its predecessor (not replayable with rrs_accept)."""
    pred, _, path_conf = trace_arrays("smollm2-drop2-tree-iid")
    broken = [(row, c) for row in range(200) for c in range(1, pred.size)
              if not A.is_closed(pred, A.top_nodes(path_conf[row:row + 1], c))[0]]
    assert broken


def test_the_optimum_never_loses_to_the_confidence_rules_at_equal_budget():
    pred, r, conf = trace_arrays("smollm2-drop2-tree")
    rng = np.random.default_rng(1)
    for n, k in [(4, 2), (8, 3), (16, 1)]:
        rows = rng.choice(r.shape[0], n, replace=False)
        masks, value = A.optimal_subtrees(pred, r[rows], k * n)
        assert masks[:, 1:].sum() <= k * n
        for rule in (A.top_nodes(conf[rows], k * n), A.top_nodes_per_request(conf[rows], k)):
            assert value >= (r[rows] * rule)[:, 1:].sum() - 1e-12
