"""What a draft-prefix-closed subtree of a recorded draft tree is worth (docs/trees.md).

A policy that verifies trees chooses, per request, a subtree of its recorded draft tree.
Replaying recursive rejection sampling (SpecInfer) on a subtree with the recorded
``rrs_accept`` numbers is exact iff the subtree is *draw-prefix closed*: a non-root node u may
be kept only if its predecessor is,

    pred(u) = the previous draw of parent(u) in draw order, or parent(u) for its first draw,

because ``rrs_accept`` of a draw is conditioned on the earlier draws at that node being
rejected. One predecessor per node makes a forest precedence (the left-child/right-sibling
form of the tree), and on a closed set S the expected accepted length is additive,

    E[τ | S] = Σ_{u ∈ S, u ≠ root} r(u),   r(u) = r(parent) · a(u) · Π_{earlier draws v} (1 − a(v)),

the *reach* r(u) = P(RRS walks through u), r(root) = 1, a = ``rrs_accept`` of u's draw.

:func:`predecessors` and :func:`reach_values` work per node, vectorised over every tree of a
trace (CSR ``node_offsets``, as :class:`specbatch.traces.format.tree_nodes.TreeNodes` stores them):
what a simulator precomputes once. :func:`reach_of_stats` is the per-node loop twin (exact with
Fractions) and :func:`subtree_stats` the replay numbers of a closed subtree (the additivity
identity is a test against ``tau_law_from_stats``). :func:`is_closed` checks node sets.
Ids are row-local and in pre-order (root 0), so pred(u) < u.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import require
from specbatch.theory.trees.stats import TreeStats


def _row_base(node_offsets: np.ndarray, size: int) -> np.ndarray:
    """Global index of each node's row root # [N] (checks the CSR layout)."""
    counts = np.diff(node_offsets)
    require(node_offsets.ndim == 1 and node_offsets.size >= 1 and node_offsets[0] == 0
            and bool((counts >= 1).all()) and node_offsets[-1] == size,
            f"node_offsets: expected CSR offsets of non-empty trees over {size} nodes, got "
            f"{node_offsets[:4].tolist()}...")
    return np.repeat(node_offsets[:-1], counts)


def _draw_layout(parent, draw_offsets, draws, node_offsets) -> tuple:
    """Checked draw layout: base # [N], owner # [M], child # [M] (global ids), first # [M]
    (a first draw at its node), is_root # [N].

    Every non-root node must be drawn exactly once, by its parent (a path trie, which draws
    one child several times, has no additive reach)."""
    parent = np.asarray(parent, dtype=np.int64)  # [N]
    size = parent.size
    node_offsets = (np.array([0, size], dtype=np.int64) if node_offsets is None
                    else np.asarray(node_offsets, dtype=np.int64))
    base = _row_base(node_offsets, size)  # [N]
    draw_offsets = np.asarray(draw_offsets, dtype=np.int64)  # [N+1]
    draws = np.asarray(draws, dtype=np.int64)  # [M]
    require(draw_offsets.shape == (size + 1,) and draw_offsets[0] == 0
            and bool((np.diff(draw_offsets) >= 0).all()) and draw_offsets[-1] == draws.size,
            f"draw_offsets: expected CSR offsets of {draws.size} draws over {size} nodes")
    owner = np.repeat(np.arange(size), np.diff(draw_offsets))  # [M]
    child = base[owner] + draws  # [M]
    row_end = np.repeat(node_offsets[1:], np.diff(node_offsets))
    require(bool(((draws >= 1) & (child < row_end[owner])).all()),
            "draws: expected non-root node ids of the drawing node's own tree")
    require(bool((base[child] + parent[child] == owner).all()),
            "draws: expected each draw to be a child of the drawing node")
    is_root = np.arange(size) == base
    drawn = np.bincount(child, minlength=size)
    require(bool((drawn == np.where(is_root, 0, 1)).all()),
            "draws: expected every non-root node drawn exactly once (a path trie repeats "
            "draws and has no additive reach)")
    first = np.arange(draws.size) == draw_offsets[owner]
    return base, owner, child, first, is_root


def predecessors(parent, draw_offsets, draws, node_offsets=None) -> np.ndarray:
    """``pred`` # [N] int64 (row-local ids, −1 at each root) of one or many trees.

    parent # [N] local parent ids (−1 at roots), draw_offsets # [N+1], draws # [M] local child
    ids in draw order, node_offsets # [rows+1] (default: one tree). pred(u) < u in pre-order.
    """
    base, owner, child, first, _ = _draw_layout(parent, draw_offsets, draws, node_offsets)
    before = np.r_[-1, child[:-1]]  # [M] previous draw (global)
    pred = np.full(base.size, -1, dtype=np.int64)
    pred[child] = np.where(first, owner, before) - base[child]
    return pred


def path_products(node_offsets, parent, factor) -> np.ndarray:
    """``Π factor`` along each node's path from its root (root: 1) # [N] float64.

    One vectorised pass per depth level; node ids local per row as in :func:`predecessors`."""
    parent = np.asarray(parent, dtype=np.int64)
    factor = np.asarray(factor, dtype=np.float64)
    base = _row_base(np.asarray(node_offsets, dtype=np.int64), parent.size)
    is_root = parent < 0
    up = np.where(is_root, 0, base + parent)  # [N] global parent (roots: a placeholder)
    out = np.where(is_root, 1.0, np.nan)
    for _ in range(parent.size):
        if not np.isnan(out).any():
            break
        out = np.where(is_root, 1.0, out[up] * factor)
    require(not np.isnan(out).any(), "parent: expected every node to reach its root")
    return out


def reach_values(node_offsets, parent, draw_offsets, draws, rrs_accept) -> np.ndarray:
    """``r`` # [N] float64: P(recursive rejection sampling walks through u), root 1.

    ``r(u) = r(parent) · a(u) · Π_{earlier draws v of parent}(1 − a(v))``; vectorised over all
    trees (one pass per draw rank, one per depth level). Σ r over a tree's non-root nodes is
    E[τ] of RRS on the full tree; over a closed subset, E[τ] on that subtree.
    """
    rrs = np.asarray(rrs_accept, dtype=np.float64)  # [M]
    require(bool(np.isfinite(rrs).all() and ((rrs >= 0) & (rrs <= 1)).all()),
            "rrs_accept: expected probabilities in [0, 1]")
    base, owner, child, first, _ = _draw_layout(parent, draw_offsets, draws, node_offsets)
    rank = np.arange(child.size) - np.asarray(draw_offsets, dtype=np.int64)[owner]  # [M]
    local = np.ones(base.size)  # [N] a(u) · Π (1 − a(earlier))
    survive = np.ones(base.size)  # [N] per owner: all draws so far rejected
    for level in range(int(rank.max(initial=-1)) + 1):
        at = rank == level
        local[child[at]] = rrs[at] * survive[owner[at]]
        survive[owner[at]] *= 1.0 - rrs[at]
    offsets = np.array([0, base.size]) if node_offsets is None else node_offsets
    return path_products(offsets, parent, local)


def reach_of_stats(stats: TreeStats) -> tuple:
    """The reach of every node of one tree, a plain loop (exact with Fraction numbers)."""
    reach = [None] * len(stats.parent)
    reach[0] = stats.q[0] * 0 + 1
    for u in range(len(stats.parent)):  # pre-order: a parent comes before its children
        left = reach[u]
        for c, a in zip(stats.draws[u], stats.rrs_accept[u]):
            reach[c] = left * a
            left = left * (1 - a)
    return tuple(reach)


def subtree_stats(stats: TreeStats, keep) -> TreeStats:
    """The replay numbers of the subtree ``keep`` (# [N] bool, root kept), which must be draw-
    prefix closed: kept nodes keep the kept prefix of their draws, the rest draw nothing."""
    keep = [bool(k) for k in keep]
    require(len(keep) == len(stats.parent) and keep[0], "keep: expected one flag per node, "
            "the root kept")
    draws, accept = [], []
    for u, (ds, acc) in enumerate(zip(stats.draws, stats.rrs_accept)):
        kept = [keep[c] for c in ds]
        n = sum(kept)
        require(all(kept[:n]) and not any(kept[n:]) and (keep[u] or n == 0), f"keep: node "
                f"{u}'s kept draws are not a prefix of its draws under a kept node (not "
                "draw-prefix closed)")
        draws.append(tuple(ds[:n]))
        accept.append(tuple(acc[:n]))
    return TreeStats(stats.parent, stats.depth, stats.token, stats.q, stats.pt, tuple(draws),
                     tuple(accept), stats.trv_accept, stats.gbv_h)


def is_closed(pred, masks) -> np.ndarray:
    """Per tree whether the node set ``masks`` # [n, N] is draw-prefix closed # [n] bool."""
    pred = np.asarray(pred, dtype=np.int64)
    masks = np.atleast_2d(np.asarray(masks, dtype=bool))
    pred2 = np.broadcast_to(pred, masks.shape)
    rows = np.arange(masks.shape[0])[:, None]
    pred_kept = masks[rows, np.maximum(pred2, 0)] | (pred2 < 0)
    return ~(masks & ~pred_kept).any(axis=1) & masks[:, 0]
