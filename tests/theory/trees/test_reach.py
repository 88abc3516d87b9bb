"""theory/trees/reach.py: predecessors, reach values, and E[τ] of closed subtrees (exactly)."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.theory.exact.small_models import random_pair
from specbatch.theory.trees import reach as R
from specbatch.theory.trees import stats as TS
from specbatch.theory.trees import tree_shapes as S
from specbatch.traces.format.files import read_trace

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
    pred = R.predecessors(t.parent, t.draw_offsets, t.draws, t.node_offsets).reshape(-1, n)
    assert (pred == pred[0]).all()  # one structure per trace
    r = R.reach_values(t.node_offsets, t.parent, t.draw_offsets, t.draws, t.rrs_accept)
    conf = R.path_products(t.node_offsets, t.parent, t.draft_conf)
    return pred[0], r.reshape(-1, n), conf.reshape(-1, n)


# --------------------------------------------------------------------- predecessors, reach


def test_predecessor_of_a_node_is_its_previous_sibling_draw_or_its_parent():
    # The 2,2,1 tree in pre-order: 0 -> (1, 6); 1 -> (2, 4); 2 -> 3; 4 -> 5; 6 -> (7, 9); ...
    parent = np.array([-1, 0, 1, 2, 1, 4, 0, 6, 7, 6, 9])
    draws = [[1, 6], [2, 4], [3], [], [5], [], [7, 9], [8], [], [10], []]
    offsets = np.r_[0, np.cumsum([len(d) for d in draws])]
    pred = R.predecessors(parent, offsets, np.concatenate(draws))
    assert pred.tolist() == [-1, 0, 1, 2, 2, 4, 1, 6, 7, 7, 9]
    # Draw order, not node order, defines the predecessor: swap node 1's draws.
    draws[1] = [4, 2]
    pred = R.predecessors(parent, offsets, np.concatenate(draws))
    assert pred[4] == 1 and pred[2] == 4


def test_a_path_trie_repeats_draws_and_is_refused():
    shape = S.parse_shape("2x2")
    pair = random_pair(3, 2, "iid", exact=True)
    root = next(r for r in S.tree_law(pair, shape) if len(set(r.draws)) < len(r.draws))
    parent, offsets, draws, rrs = flat(TS.tree_stats(pair, root, shape))
    with pytest.raises(SpecbatchError, match="drawn exactly once"):
        R.predecessors(parent, offsets, draws)


@pytest.mark.parametrize("spec, sampling", BRANCHING)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reach_sums_to_the_expected_accepted_length_of_rrs_exactly(spec, sampling, seed):
    for stats in exact_trees(spec, sampling, seed):
        reach = R.reach_of_stats(stats)
        assert sum(reach[1:]) == expected_tau(stats)  # Fractions: exact
        parent, offsets, draws, rrs = flat(stats)
        got = R.reach_values([0, len(parent)], parent, offsets, draws, rrs)
        assert np.allclose(got, [float(x) for x in reach], rtol=0, atol=1e-12)


@pytest.mark.parametrize("spec, sampling", [("2,2", "distinct"), ("3,2,1", "topk"),
                                            ("2,1", "iid")])
def test_expected_tau_on_every_closed_subtree_is_its_reach_sum_exactly(spec, sampling):
    for stats in exact_trees(spec, sampling, seed=4, limit=3):
        reach = R.reach_of_stats(stats)
        pred = R.predecessors(*flat(stats)[:3])
        for bits in itertools.product([False, True], repeat=len(reach) - 1):
            keep = (True, *bits)
            if R.is_closed(pred, np.array([keep]))[0]:
                sub = R.subtree_stats(stats, keep)
                assert expected_tau(sub) == sum(x for x, k in zip(reach[1:], bits) if k)
            else:
                with pytest.raises(SpecbatchError, match="not draw-prefix closed"):
                    R.subtree_stats(stats, keep)


@pytest.mark.parametrize("name", ["smollm2-drop2-tree", "smollm2-drop2-tree-iid"])
def test_trace_wide_reach_equals_the_per_tree_loop(name):
    t = bundled(name)
    n = int(t.node_offsets[1])
    r = R.reach_values(t.node_offsets, t.parent, t.draw_offsets, t.draws, t.rrs_accept)
    pred = R.predecessors(t.parent, t.draw_offsets, t.draws, t.node_offsets)
    for row in range(0, t.n_rows, max(1, t.n_rows // 40)):
        stats = t.stats(row)
        span = slice(row * n, (row + 1) * n)
        assert np.allclose(r[span], R.reach_of_stats(stats), rtol=0, atol=1e-12)
        assert abs(r[span][1:].sum() - expected_tau(stats)) < 1e-12
        assert (pred[span] == R.predecessors(*flat(stats)[:3])).all()


def test_many_trees_of_different_shapes_in_one_call_equal_tree_by_tree():
    trees = [exact_trees("2,1", "iid", 0, limit=2)[1], exact_trees("3,2,1", "topk", 1)[0],
             exact_trees("1,2", "iid", 2, limit=1)[0]]
    parts = [flat(t) for t in trees]
    sizes = [p[0].size for p in parts]
    parent = np.concatenate([p[0] for p in parts])
    draw_offsets = np.r_[0, np.cumsum(np.concatenate([np.diff(p[1]) for p in parts]))]
    draws = np.concatenate([p[2] for p in parts])
    rrs = np.concatenate([p[3] for p in parts])
    offsets = np.r_[0, np.cumsum(sizes)]
    pred = R.predecessors(parent, draw_offsets, draws, offsets)
    reach = R.reach_values(offsets, parent, draw_offsets, draws, rrs)
    assert pred.tolist() == [u for p in parts for u in R.predecessors(*p[:3]).tolist()]
    assert np.allclose(reach, [float(x) for t in trees for x in R.reach_of_stats(t)],
                       rtol=0, atol=1e-12)


def test_path_products_multiply_along_the_path():
    parent = np.array([-1, 0, 1, 0, -1, 0])  # two trees: 0 -> 1 -> 2, 0 -> 3; 0 -> 1
    factor = np.array([9.0, 0.5, 0.25, 0.1, 9.0, 0.75])
    got = R.path_products([0, 4, 6], parent, factor)
    assert got.tolist() == [1.0, 0.5, 0.125, 0.1, 1.0, 0.75]
