"""Tree replay: SpecInfer and Traversal on a verified subtree of the recorded tree, exactly."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.replay.chain import request_keys, uniforms
from specbatch.simulator.replay.tree import TreeTables, cut_mask, tau_reference
from specbatch.theory.trees.stats import tau_law_from_stats
from specbatch.theory.trees.tree_shapes import parse_shape
from specbatch.traces.format.files import read_trace
from specbatch.traces.format.tree_nodes import TreeNodes

ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]


def hand_trace() -> SimpleNamespace:
    """One row of shape 2,1 in pre-order: root 0 → {1 → 2, 3 → 4}; SpecInfer tries 1 then 3.

    rrs_accept: a1 = 1/2, a3 = 2/5 (after 1 was rejected), a2 = 3/5, a4 = 1/4. Reach:
    r1 = 1/2, r2 = 3/10, r3 = (1 − 1/2)·2/5 = 1/5, r4 = 1/20, so E[τ] = 21/20."""
    f = np.array
    nodes = TreeNodes(
        parse_shape("2,1", "topk"), node_offsets=f([0, 5]), parent=f([-1, 0, 1, 0, 3]),
        depth=f([0, 1, 2, 1, 2]), token=f([-1, 7, 8, 9, 10]), q=np.ones(5), pt=np.ones(5),
        draft_conf=f([1.0, 0.6, 0.5, 0.3, 0.9]), trv_accept=f([1.0, 0.1, 0.2, 0.3, 0.4]),
        gbv_h=np.full(5, np.nan), draw_offsets=f([0, 2, 3, 3, 4, 4]), draws=f([1, 3, 2, 4]),
        rrs_accept=f([0.5, 0.4, 0.6, 0.25]))
    return SimpleNamespace(tree=nodes)


@pytest.fixture(scope="module")
def bundled() -> SimpleNamespace:
    return read_trace(ROOT / "traces" / "data" / "smollm2-drop2-tree")


def test_hand_tree_structure_reach_and_order():
    t = TreeTables(hand_trace())
    assert t.pred.tolist() == [-1, 0, 1, 1, 3]  # 3's predecessor is its earlier sibling 1
    assert t.kids.tolist() == [[1, 3], [2, -1], [-1, -1], [4, -1], [-1, -1]]
    np.testing.assert_allclose(t.reach[0], [1, 0.5, 0.3, 0.2, 0.05])
    # path confidence 1: .6, 2: .3, 3: min(.3, pred 1's .6) = .3, 4: min(.27, .3) = .27
    np.testing.assert_allclose(t.conf[0], [1, 0.6, 0.3, 0.3, 0.27])
    assert t.order[0].tolist() == [1, 2, 3, 4]  # ties (2 and 3) by node id
    assert t.widths.tolist() == [1, 2] and t.uniforms_needed("specinfer") == 4
    assert t.post.tolist() == [2, 1, 4, 3, 0]


def test_hand_tree_tau_by_hand():
    """Uniform slot d·W + j: draw j at depth d (W = 2)."""
    t = TreeTables(hand_trace())
    rows = np.array([0, 0, 0])
    full = np.ones((3, 5), dtype=bool)
    eta = np.array([[0.7, 0.3, 0.1, 0.9],    # 1 rejected, 3 accepted, 4 accepted: τ = 2
                    [0.4, 0.0, 0.7, 0.0],    # 1 accepted, 2 rejected: τ = 1
                    [0.9, 0.5, 0.0, 0.0]])   # 1 and 3 rejected: τ = 0
    assert t.tau("specinfer", rows, full, eta).tolist() == [2, 1, 0]
    only_first = np.array([[True, True, True, False, False]] * 3)  # 3 not verified
    assert t.tau("specinfer", rows, only_first, eta).tolist() == [0, 1, 0]
    # traversal: post-order 2, 1, 4, 3, 0 with trv .2, .1, .4, .3, 1
    eta_t = np.array([[0.5, 0.05, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9, 0.9]])
    assert t.tau("traversal", rows[:2], full[:2], eta_t).tolist() == [1, 0]


def test_reach_sums_to_the_exact_expected_accepted_length(bundled):
    """Σ_u r(u) over the whole tree equals E[τ] of the exact law built from the same
    numbers (theory.trees.stats.tau_law_from_stats), on every 50th row of the real trace."""
    t = TreeTables(bundled)
    for row in range(0, bundled.tree.n_rows, 50):
        law = tau_law_from_stats(bundled.tree.stats(row), "specinfer")
        expected = sum(d * p for d, p in enumerate(law))
        assert t.reach[row, 1:].sum() == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_hand_reach_is_exact_in_fractions():
    half, a3, a2, a4 = Fraction(1, 2), Fraction(2, 5), Fraction(3, 5), Fraction(1, 4)
    assert half + half * a2 + (1 - half) * a3 + (1 - half) * a3 * a4 == Fraction(21, 20)
    assert TreeTables(hand_trace()).reach[0, 1:].sum() == pytest.approx(21 / 20, abs=1e-15)


@pytest.mark.parametrize("rule", ["specinfer", "traversal"])
def test_vectorised_replay_matches_the_per_request_twin(bundled, rule):
    """Random rows, random closed subtrees (confidence prefixes of every size), real
    uniforms: the vectorised τ equals the loop over TreeStats row by row."""
    t = TreeTables(bundled)
    rng = np.random.default_rng(7)
    n = 300
    rows = rng.integers(0, t.n_rows, n)
    counts = (np.full(n, t.drafted) if rule == "traversal"
              else rng.integers(0, t.drafted + 1, n))
    mask = t.prefix_mask(rows, counts)
    assert t.check_closed(mask).all()
    need = t.uniforms_needed(rule)
    eta = uniforms(request_keys(3, np.arange(n)), rng.integers(0, 50, n), need)
    fast = t.tau(rule, rows, mask, eta)
    for i in range(n):
        stats = bundled.tree.stats(int(rows[i]))
        kept = set(np.flatnonzero(mask[i]).tolist())
        assert fast[i] == tau_reference(stats, rule, kept, eta[i].tolist())


def test_replayed_mean_matches_the_reach_sum(bundled):
    """Statistically: over 40,000 coins per subtree the mean τ is Σ r within 4 standard
    errors, for a 3-node prefix and the whole tree."""
    t = TreeTables(bundled)
    rng = np.random.default_rng(11)
    rows = np.repeat(rng.integers(0, t.n_rows, 4), 10_000)
    for k in (3, t.drafted):
        mask = t.prefix_mask(rows, np.full(rows.shape[0], k))
        tau = t.tau("specinfer", rows, mask, rng.random((rows.shape[0], 6)))
        se = tau.std() / np.sqrt(tau.size)
        assert abs(tau.mean() - t.expected(rows, mask).mean()) < 4 * se


def test_cut_keeps_a_closed_prefix(bundled):
    t = TreeTables(bundled)
    rows = np.arange(40)
    mask = t.prefix_mask(rows, np.full(40, t.drafted))
    for s in range(t.drafted + 1):
        cut = cut_mask(mask, np.full(40, s))
        assert (cut[:, 1:].sum(axis=1) == s).all()
        assert t.check_closed(cut).all()


def test_a_chain_trace_is_refused():
    with pytest.raises(SpecbatchError, match="needs a tree trace"):
        TreeTables(SimpleNamespace(tree=None))


def test_a_repeated_sibling_token_scores_zero():
    """An i.i.d. tree can draw one token twice; SpecInfer never accepts the repeat, so the
    draft-side score ranks it (and its subtree) last."""
    trace = hand_trace()
    tree = trace.tree
    token = tree.token.copy()
    token[3] = token[1]  # node 3 repeats node 1's token
    trace.tree = dataclasses.replace(tree, token=token)
    t = TreeTables(trace)
    np.testing.assert_allclose(t.conf[0], [1, 0.6, 0.3, 0.0, 0.0])
    assert t.order[0].tolist() == [1, 2, 3, 4]
