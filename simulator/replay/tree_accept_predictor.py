"""A learned per-node acceptance predictor for TETRIS over tree nodes (``tetris-tree
--predictor learned|logistic``; docs/trees.md).

Path draft confidence ranks draft probability, not acceptance: on sampled (i.i.d.) trees a
token of low draft probability is often accepted (``min(1, p/q)`` is large when q is small),
so ``tetris-tree`` by confidence loses to the static tree there. This module fits, on the
calibration requests' tree nodes (simulator.policies.calibration: never replayed), a model of each
draw's acceptance number ``rrs_accept`` (SpecInfer accepts the draw given the earlier draws at
its node were rejected) from signals the draft has before verification (:data:`FEATURES`):

- the node's depth and its draw index among its siblings;
- its temperature-1 draft probability ``draft_conf`` (and its log), its parent's, and the
  log of the path confidence (Π ``draft_conf`` from the root to the node);
- whether its token repeats an earlier sibling's, and the earlier siblings' summed
  ``draft_conf`` (how much of the draft's mass the node's earlier draws already covered);
- the tree's sampling (1 for i.i.d. children, 0 for top-k): constant within one trace.

Never q, pt, the replay numbers or the reach. The label is a probability, so it is used as a *soft*
label, as the chain predictor does (:mod:`simulator.replay.accept_predictor`): each node is one
accepted example of weight a and one rejected example of weight 1 − a, and the classifier's log loss
is the cross-entropy against a, a proper scoring rule whose minimiser is E[a | x] (a regressor on a
would need clipping into [0, 1]; the classifier's output is a probability). The models are
:func:`simulator.replay.accept_predictor.make_model`'s (``learned``: gradient-boosted trees,
``logistic``: standardised logistic regression; deterministic). A repeated sibling token is
predicted 0 outright: RRS never accepts it (after x is rejected the residual has no mass at x).

The per-node score is the predicted reach r̂(u) = r̂(parent)·â(u)·Π_{earlier draws v}(1 − â(v))
(the reach formula of :mod:`theory.trees.reach` on â). The batch's C nodes are those of
:func:`theory.trees.alloc.frontier_greedy` on r̂ with the per-request cap k + e, computed as a
sort (:class:`NodeRanking`): per row, once per run, the nodes in the order the frontier greedy
takes them from that row alone, with m(u) = min of r̂ over u's predecessor chain (r̂ made
monotone along pred), which is non-increasing along that order; per step, the batch's top-C of
m, each request's share a prefix of its order (ties: lower request, then earlier in its
order). The global frontier greedy takes, at every step, a node of largest m among the nodes
not taken yet (if z has the largest m, z or its first untaken ancestor is on the frontier with
score ≥ m(z), so the greedy's pick g has score ≥ m(z), and m(pred g) ≥ m(z) since picks come
in non-increasing m), and from each request a prefix of that request's own greedy order; so
the two choose the same nodes except where two requests' m tie exactly in float64 (a test
checks equality on the bundled i.i.d. trace).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.replay.accept_predictor import (
    LEARNED,
    FittedModel,
    fit_soft_labels,
    one_thread,
    remember,
)
from specbatch.simulator.replay.tree import TreeTables

if TYPE_CHECKING:
    from specbatch.traces.format.trace import Trace

#: Columns of :func:`node_features`, in order.
FEATURES = ("depth", "draw_index", "draft_conf", "log_draft_conf", "parent_conf",
            "log_path_conf", "repeat", "siblings_conf_before", "iid")
#: Confidences are floored here before a log.
TINY = 1e-12
#: Fitted tree predictors kept per process (a sweep refits nothing it has fitted already).
_CACHE: dict[str, TreePredictor] = {}
_I64 = np.int64


def draw_index(parent: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Each node's index among its parent's draws (0: first draw; root 0).  # [N]"""
    index = np.zeros(parent.shape[0], dtype=_I64)
    for u in range(1, parent.shape[0]):  # pre-order: pred(u) < u
        index[u] = 0 if pred[u] == parent[u] else index[pred[u]] + 1
    return index


def node_features(draft_conf: np.ndarray, token: np.ndarray, parent: np.ndarray,
                  pred: np.ndarray, depth: np.ndarray, iid: bool) -> np.ndarray:
    """The :data:`FEATURES` of every non-root node, row by row.

    draft_conf, token # [rows, N] (trees of one structure, pre-order, root 0);
    parent, pred, depth # [N]. Returns # [rows, N − 1, len(FEATURES)] float64; each row's
    features depend on that row alone."""
    rows, size = draft_conf.shape
    conf = np.clip(np.asarray(draft_conf, dtype=np.float64), 0.0, 1.0)
    conf[:, 0] = 1.0  # the root: the context, drafted with certainty
    log_conf = np.log(np.maximum(conf, TINY))
    log_path = np.zeros_like(log_conf)
    repeat = np.zeros((rows, size))
    before = np.zeros((rows, size))  # Σ draft_conf of the earlier siblings
    for u in range(1, size):
        log_path[:, u] = log_path[:, parent[u]] + log_conf[:, u]
        v = pred[u]
        if v != parent[u]:
            before[:, u] = before[:, v] + conf[:, v]
        while v != parent[u]:  # the earlier siblings, walking back in draw order
            repeat[:, u] = np.maximum(repeat[:, u], token[:, u] == token[:, v])
            v = pred[v]
    index = draw_index(parent, pred)
    cols = (np.broadcast_to(depth, (rows, size)), np.broadcast_to(index, (rows, size)), conf,
            log_conf, conf[:, parent.clip(0)], log_path, repeat, before,
            np.full((rows, size), float(iid)))
    return np.stack([np.asarray(c, dtype=np.float64)[:, 1:] for c in cols], axis=-1)


def monotone(score: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """m(u) = min of ``score`` over u and its predecessor chain (root kept).  # [rows, N]"""
    m = np.array(score, dtype=np.float64)
    for u in range(1, m.shape[1]):
        np.minimum(m[:, u], m[:, pred[u]], out=m[:, u])
    return m


def greedy_order(score: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Per row, the non-root nodes in the order :func:`theory.trees.alloc.frontier_greedy`
    takes them from that row alone (highest score whose predecessor is taken; ties: lower
    node id).  score # [rows, N];  returns # [rows, N − 1] int64"""
    rows, size = score.shape
    frontier = np.zeros((rows, size), dtype=bool)
    frontier[:, 1:] = pred[1:] == 0
    order = np.empty((rows, size - 1), dtype=_I64)
    every = np.arange(rows)
    for j in range(size - 1):
        pick = np.argmax(np.where(frontier, score, -np.inf), axis=1)  # first max: lower id
        order[:, j] = pick
        frontier[every, pick] = False
        frontier |= pred[None, :] == pick[:, None]
    return order


@dataclass(frozen=True, eq=False)
class NodeRanking:
    """Every trace row's nodes in TETRIS order for one score (module docstring).

    order # [rows, N − 1]: the row's frontier-greedy order (each prefix draw-prefix closed)
    rank  # [rows, N]: position of node u in ``order`` (root: −1)
    score # [rows, N − 1]: m at ``order``, non-increasing along each row
    reach # [rows, N]: the raw score r̂ (root 1)
    """

    order: np.ndarray
    rank: np.ndarray
    score: np.ndarray
    reach: np.ndarray

    def prefix_mask(self, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """# [n, N] the first ``counts[i]`` nodes of each row's order, plus the root."""
        mask = np.less(self.rank[rows], np.asarray(counts)[:, None])
        mask[:, 0] = True
        return mask


def rank_nodes(reach: np.ndarray, pred: np.ndarray) -> NodeRanking:
    """The :class:`NodeRanking` of scores ``reach`` # [rows, N] over one tree structure."""
    rows, size = reach.shape
    order = greedy_order(reach, pred)
    rank = np.full((rows, size), -1, dtype=_I64)
    np.put_along_axis(rank, order, np.arange(size - 1), axis=1)
    score = np.take_along_axis(monotone(reach, pred), order, axis=1)
    return NodeRanking(order, rank, score, reach)


class TreePredictor(FittedModel):
    """A fitted model of per-draw acceptance on tree nodes (module docstring); ``key``
    fingerprints the calibration trees and kind."""

    def node_probs(self, trace: Trace, tables: TreeTables) -> np.ndarray:
        """â(u) for every row and node of ``trace`` (``tables``: its TreeTables), root 1,
        repeated sibling tokens 0.  Returns # [rows, N]"""
        x = trace_features(trace, tables)  # [rows, N − 1, F]
        rows, size = tables.n_rows, tables.n_nodes
        prob = np.ones((rows, size))
        if rows and size > 1:
            with one_thread():
                fitted = self.model.predict_proba(x.reshape(-1, len(FEATURES)))[:, 1]
            prob[:, 1:] = np.clip(fitted, 0.0, 1.0).reshape(rows, size - 1)
            prob[:, 1:][x[..., FEATURES.index("repeat")] > 0] = 0.0
        return prob

    def ranking(self, trace: Trace, tables: TreeTables) -> NodeRanking:
        """The run's :class:`NodeRanking` by predicted reach r̂, for every row of ``trace``."""
        reach = tables.reach_for(self.node_probs(trace, tables))
        return rank_nodes(reach, tables.pred)


def trace_features(trace: Trace, tables: TreeTables) -> np.ndarray:
    """:func:`node_features` of a tree trace's rows.  # [rows, N − 1, F]"""
    tree = trace.tree
    shape = (tables.n_rows, tables.n_nodes)
    return node_features(tree.draft_conf.reshape(shape), tree.token.reshape(shape),
                         tables.parent, tables.pred, tables.depth,
                         tree.shape.sampling == "iid")


def fingerprint(trace: Trace, kind: str) -> str:
    """SHA-256 of what a fit reads (structure, tokens, draft_conf, rrs_accept, sampling)."""
    tree = trace.tree
    h = hashlib.sha256(f"{kind}/{tree.shape.sampling}".encode())
    for arr in (tree.node_offsets, tree.parent, tree.token, tree.draft_conf,
                tree.draw_offsets, tree.draws, tree.rrs_accept):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def fit_tree_predictor(trace: Trace, kind: str = "learned") -> TreePredictor:
    """Fit a ``kind`` predictor on every non-root node of ``trace`` (the calibration
    requests), soft-labelled by the node's ``rrs_accept`` (module docstring). Cached per
    process by :func:`fingerprint`. Calibration trees whose draws are all accepted or all
    rejected leave nothing to learn: a one-line error."""
    if kind not in LEARNED:
        raise SpecbatchError(f"predictor: expected one of {', '.join(LEARNED)} for policy "
                             f"tetris-tree, got {kind!r}")
    require(getattr(trace, "tree", None) is not None and trace.tree.shape.kind != "paths",
            "predictor: tetris-tree fits on a branching tree trace (capture --tree SHAPE)")
    key = fingerprint(trace, kind)
    got = _CACHE.get(key)
    if got is not None:
        return got
    tables = TreeTables(trace)
    x = trace_features(trace, tables).reshape(-1, len(FEATURES))
    a = tables.accept[:, 1:].ravel()
    model = fit_soft_labels(kind, x, a, "the calibration requests' trees have", "draw")
    return remember(_CACHE, key, TreePredictor(kind, model, key))
