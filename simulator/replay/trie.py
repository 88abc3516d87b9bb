"""Replaying a verifier on a trace's recorded path tries (K i.i.d. draft paths of L tokens).

A trie trace (``capture --tree KxL``, traces/FORMAT.md) records per position the trie of K
draft paths sampled i.i.d. from Ms: node counts vary by position (equal prefixes merge), and a
node's draws repeat a child once per path through it. Three verifiers replay exactly from the
stored numbers (:mod:`theory.trees.stats`), each on the **whole** trie (a subtree would change
the draws, so no per-node selection replays):

- ``specinfer``: recursive rejection sampling with replacement; at node u the draws are tried in
  path order and draw j is accepted when ``η < rrs_accept``; uniform ``d·W + j`` at depth d
  (W = K, the root's draws);
- ``traversal``: the first node in post-order with ``η_j < trv_accept``; uniform j;
- ``gbv`` (greedy multi-path block verification): on the chosen path with thresholds
  h_0 = 1, h_1..h_L, τ = max{d : η_d < h_d}; uniform d.

:class:`TrieTables` has the interface the engine and the tree policies read from
:class:`~simulator.replay.tree.TreeTables` (``tau``, ``uniforms_needed``, ``widths``, ``max_depth``,
``drafted``, ``nodes``, ``prefix_mask``: :class:`simulator.replay.protocols.TreeReplay`), with
per-row structure; its twin is :func:`simulator.replay.tree.tau_reference`. :func:`tree_tables_for`
picks the class of a trace.
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.replay.tree import TreeTables, replay_method, rrs_walk, rule_value
from specbatch.theory.trees.stats import post_order

_I64 = np.int64


def tree_tables_for(trace) -> TreeTables | TrieTables:
    """The replay tables of a tree trace: :class:`TrieTables` for path tries, else
    :class:`TreeTables` (which refuses a chain trace in one line)."""
    tree = getattr(trace, "tree", None)
    if tree is not None and tree.shape.kind == "paths":
        return TrieTables(trace)
    return TreeTables(trace)


class TrieTables:
    """A trie trace's trees as padded per-row arrays (N = the most nodes of any row).

    sizes:  # [rows] nodes per row, root included
    depth:  # [rows, N] (−1 in padding)
    kids, accept: # [rows, N, W] each node's draws (child ids, −1 padded) and rrs_accept
    trv:    # [rows, N] trv_accept;  post: # [rows, N] post-order (root last, then −1 padding)
    gbv:    # [rows, L + 1] h on GBV's path by depth (h_0 = 1)
    """

    #: The rules this class replays and the method of each (as TreeTables.REPLAYS).
    REPLAYS = {"specinfer": "_tau_specinfer", "traversal": "_tau_traversal", "gbv": "_tau_gbv"}

    def __init__(self, trace) -> None:
        tree = trace.tree
        shape = tree.shape
        self.paths, self.max_depth = int(shape.paths), int(shape.length)
        offsets = tree.node_offsets
        rows = offsets.shape[0] - 1
        sizes = np.diff(offsets)
        n_nodes = int(sizes.max(initial=1))
        row_of = np.repeat(np.arange(rows), sizes)
        local = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], sizes)
        self.n_rows, self.n_nodes, self.sizes = rows, n_nodes, sizes.astype(_I64)
        self.depth = np.full((rows, n_nodes), -1, dtype=_I64)
        self.depth[row_of, local] = tree.depth
        draw_counts = np.diff(tree.draw_offsets)
        self.width = max(int(draw_counts.max(initial=1)), 1)
        owner = np.repeat(np.arange(draw_counts.shape[0]), draw_counts)  # node of each draw
        slot = np.arange(tree.draws.shape[0]) - np.repeat(tree.draw_offsets[:-1], draw_counts)
        self.kids = np.full((rows, n_nodes, self.width), -1, dtype=_I64)
        self.kids[row_of[owner], local[owner], slot] = tree.draws
        self.accept = np.zeros((rows, n_nodes, self.width))
        self.accept[row_of[owner], local[owner], slot] = tree.rrs_accept
        self.trv = np.zeros((rows, n_nodes))
        self.trv[row_of, local] = tree.trv_accept
        self.post = np.full((rows, n_nodes), -1, dtype=_I64)
        for r in range(rows):  # once per trace: each row's post-order (tries differ by row)
            children = [sorted({int(c) for c in self.kids[r, u] if c >= 0})
                        for u in range(int(sizes[r]))]  # by node id, as TreeStats.children
            self.post[r, :sizes[r]] = post_order(children)
        self.gbv = np.zeros((rows, self.max_depth + 1))
        on = np.isfinite(tree.gbv_h)
        self.gbv[row_of[on], tree.depth[on].astype(_I64)] = tree.gbv_h[on]
        self.gbv[:, 0] = 1.0  # the root: τ ≥ 0
        # draft passes: the root, then the K path tips, L passes in all
        self.widths = np.array([1] + [self.paths] * (self.max_depth - 1), dtype=_I64)

    @property
    def drafted(self) -> int:
        """Draft tokens per request: K paths of L tokens (repeats included)."""
        return self.paths * self.max_depth

    def nodes(self, rows: np.ndarray) -> np.ndarray:
        """Non-root nodes of each row's trie, what verifying it costs.  # [n]"""
        return self.sizes[rows] - 1

    def uniforms_needed(self, rule: str) -> int:
        """L·W for specinfer, N for traversal, L + 1 for gbv."""
        return rule_value(self, rule, {"specinfer": self.max_depth * self.width,
                                     "traversal": self.n_nodes, "gbv": self.max_depth + 1})

    def prefix_mask(self, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """# [n, N] the root and nodes 1..counts[i] of each row (the whole trie when counts
        is its node count, the only subtree that replays)."""
        ids = np.arange(self.n_nodes)
        return (ids <= np.asarray(counts)[:, None]) & (ids < self.sizes[rows][:, None])

    def tau(self, rule: str, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        """τ_i on each request's whole trie (``mask`` is the whole trie; module docstring).
        rows # [n];  eta # [n, uniforms_needed(rule)].  Returns # [n] int64."""
        return replay_method(self, rule)(rows, mask, eta)

    def _tau_gbv(self, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        ok = eta[:, :self.max_depth + 1] < self.gbv[rows]  # [n, L + 1], column 0 true
        return (self.max_depth - np.argmax(ok[:, ::-1], axis=1)).astype(_I64)

    def _tau_traversal(self, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        post = self.post[rows]  # [n, N]
        hit = (post >= 0) & (eta[:, :self.n_nodes] < self.trv[rows[:, None], np.maximum(post, 0)])
        first = np.argmax(hit, axis=1)  # the root's number is 1: a hit always exists
        return self.depth[rows, post[np.arange(rows.shape[0]), first]]

    def _tau_specinfer(self, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        def draws(cur: np.ndarray) -> tuple:
            kids = self.kids[rows, cur]  # [n, W]
            return kids, kids >= 0, self.accept[rows, cur]

        return rrs_walk(draws, eta, self.max_depth, self.width)
