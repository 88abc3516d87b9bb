"""Replaying a tree verifier on a trace's recorded draft trees, for any verified subtree.

A tree trace (:mod:`traces.format.tree_nodes`) stores, per position row, one static draft tree in
pre-order (root 0) with every verifier's replay numbers (:mod:`theory.trees.stats`). A policy
verifies a subtree S of it per request, given as a node mask # [n, N] (the root always in S).
Two verifiers replay exactly from the stored numbers:

- ``specinfer`` (recursive rejection sampling down the tree, SpecInfer): at node u the kept
  children are tried in draw order; child c is accepted when ``η < rrs_accept(c)``. The number
  of a draw depends only on the draws before it at u, so the replay is exact for every subtree
  that is **draw-prefix closed**: a node is kept only with its predecessor, pred(u) = the
  previous child of parent(u) in draw order, or parent(u) for a first child (docs/trees.md).
  Then the expected accepted length is additive, E[τ | S] = Σ_{u∈S} r(u), with the reach
  r(u) = r(parent) · a(u) · Π_{earlier draws v}(1 − a(v)) (:attr:`TreeTables.reach`, from
  :func:`theory.trees.reach.reach_values`).
- ``traversal`` (Traversal Verification): its number at u depends on the whole subtree below u,
  so only the full recorded tree replays (the leaf order is post-order; the first u with
  ``η_u < trv_accept(u)`` ends the walk at depth(u)).

Common random numbers: request i at output position t draws its uniforms from the same
(key, t) stream as chain verification (:func:`simulator.replay.chain.uniforms`); SpecInfer reads
uniform ``d·W + j`` for draw j at depth d (W the widest node), Traversal uniform ``j`` for the
j-th node in post-order. Every policy sees the same coins.

:meth:`TreeTables.tau` is the vectorised replay; :func:`tau_reference` its per-request twin
written from :class:`~specbatch.theory.trees.stats.TreeStats` (parity-tested).
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.theory.trees.reach import predecessors, reach_values
from specbatch.theory.trees.stats import post_order

_I64 = np.int64


class TreeTables:
    """A tree trace's trees as dense per-row arrays (every row has the same structure: the
    capture's full branching shape, checked here).

    parent, depth, pred: # [N] the shared structure (pre-order, root 0; pred as above)
    kids:     # [N, W] children in draw order, −1 padded
    accept:   # [rows, N] rrs_accept of the draw that proposed node u (root: 1)
    trv:      # [rows, N] trv_accept
    conf:     # [rows, N] path draft confidence, Π of temperature-1 draft probabilities on the
              path (0 for a repeated sibling token), made monotone along pred (min with
              pred's): the score engines rank by
    reach:    # [rows, N] SpecInfer's P(the walk passes u), root 1
    order:    # [rows, N − 1] non-root nodes by descending ``conf``, ties by node id: every
              prefix is draw-prefix closed
    rank:     # [rows, N] position of node u in ``order`` (root: −1)
    widths:   # [D] nodes at depth d < D: the query of draft pass d per request
    """

    #: The rules this class replays and the method of each (simulator.replay.rules names
    #: this class in exactly these rows; a test checks both ways).
    REPLAYS = {"specinfer": "_tau_specinfer", "traversal": "_tau_traversal"}

    def __init__(self, trace) -> None:
        tree = getattr(trace, "tree", None)
        require(tree is not None, "verify: a tree rule (specinfer, traversal) needs a tree "
                "trace (capture --tree SHAPE), this trace records chains")
        offsets = tree.node_offsets
        rows = offsets.shape[0] - 1
        sizes = np.diff(offsets)
        n_nodes = int(sizes[0]) if rows else 1
        require(bool((sizes == n_nodes).all()), "trace tree: expected the same node count in "
                "every row (a full branching shape)")
        parent = tree.parent.reshape(rows, n_nodes).astype(_I64)
        if rows and not (parent == parent[0]).all():
            raise SpecbatchError("trace tree: expected one tree structure in every row (a "
                                 "full branching shape)")
        self.n_rows, self.n_nodes = rows, n_nodes
        self.parent = parent[0] if rows else np.array([-1], dtype=_I64)
        self.depth = tree.depth[:n_nodes].astype(_I64)
        self.max_depth = int(self.depth.max())
        self.kids = _children(self.parent)
        self.width = self.kids.shape[1]
        first = slice(0, int(tree.draw_offsets[n_nodes]) if rows else 0)
        self.pred = predecessors(self.parent, tree.draw_offsets[:n_nodes + 1],
                                 tree.draws[first])  # row 0's draws: the shared structure
        self._tree = tree
        self._drawn = _drawn_nodes(tree)  # [M] global node each draw proposes
        accept = np.ones(rows * n_nodes)
        accept[self._drawn] = tree.rrs_accept  # each node's draw's number (root: 1)
        self.accept = accept.reshape(rows, n_nodes)
        self.trv = tree.trv_accept.reshape(rows, n_nodes)
        self.conf = _monotone_conf(tree.draft_conf.reshape(rows, n_nodes),
                                   tree.token.reshape(rows, n_nodes), self.parent, self.pred)
        self.reach = self.reach_for(self.accept)
        node_ids = np.broadcast_to(np.arange(1, n_nodes), (rows, n_nodes - 1))
        self.order = (np.lexsort((node_ids, -self.conf[:, 1:])) + 1).astype(_I64) \
            if rows else np.zeros((0, n_nodes - 1), dtype=_I64)
        self.rank = np.full((rows, n_nodes), -1, dtype=_I64)
        np.put_along_axis(self.rank, self.order, np.arange(n_nodes - 1), axis=1)
        self.widths = np.bincount(self.depth, minlength=self.max_depth + 1)[:self.max_depth]
        self.post = np.asarray(post_order([[int(c) for c in row if c >= 0] for row in self.kids]),
                               dtype=_I64)

    @property
    def drafted(self) -> int:
        """Nodes drafted per request (the whole tree less the root)."""
        return self.n_nodes - 1

    def reach_for(self, accept: np.ndarray) -> np.ndarray:
        """SpecInfer's reach r(u) on every row for per-node acceptance numbers ``accept``
        # [rows, N] (each node's draw; the recorded ``rrs_accept`` or a model's estimate), by
        :func:`theory.trees.reach.reach_values` over this trace's draws.  Returns # [rows, N]"""
        tree = self._tree
        return reach_values(tree.node_offsets, tree.parent, tree.draw_offsets, tree.draws,
                            accept.ravel()[self._drawn]).reshape(self.n_rows, self.n_nodes)

    def nodes(self, rows: np.ndarray) -> np.ndarray:
        """Non-root nodes of each row's tree (N − 1 for every row).  # [n]"""
        return np.full(rows.shape[0], self.n_nodes - 1, dtype=_I64)

    def uniforms_needed(self, rule: str) -> int:
        """Uniforms one verification reads: D·W decisions for specinfer, N for traversal."""
        return rule_value(self, rule, {"specinfer": self.max_depth * self.width,
                                     "traversal": self.n_nodes})

    def prefix_mask(self, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """# [n, N] the first ``counts[i]`` nodes of each row's confidence order, plus the
        root.  rows, counts # [n]"""
        mask = np.empty((rows.shape[0], self.n_nodes), dtype=bool)
        np.less(self.rank[rows], np.asarray(counts)[:, None], out=mask)
        mask[:, 0] = True
        return mask

    def expected(self, rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """E[τ_i | S_i] = Σ_{u∈S_i, u≠root} r(u) under specinfer.  # [n]"""
        return (self.reach[rows] * mask)[:, 1:].sum(axis=1)

    def tau(self, rule: str, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        """τ_i, the accepted depth of each request's verified subtree (module docstring).

        rows # [n] trace rows;  mask # [n, N] bool verified nodes (root included);
        eta # [n, uniforms_needed(rule)] the request's uniforms.  Returns # [n] int64."""
        return replay_method(self, rule)(rows, mask, eta)

    def _tau_specinfer(self, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        idx = np.arange(rows.shape[0])
        accept = self.accept[rows]  # [n, N]

        def draws(cur: np.ndarray) -> tuple:
            kids = self.kids[cur]  # [n, W]
            safe = np.maximum(kids, 0)
            return kids, (kids >= 0) & mask[idx[:, None], safe], accept[idx[:, None], safe]

        return rrs_walk(draws, eta, self.max_depth, self.width)

    def _tau_traversal(self, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        hit = eta[:, :self.n_nodes] < self.trv[rows][:, self.post]  # [n, N] in post-order
        first = np.argmax(hit, axis=1)  # the root's number is 1, so a hit always exists
        return self.depth[self.post[first]]

    def check_closed(self, mask: np.ndarray) -> np.ndarray:
        """# [n] bool: each row's mask holds the root and every kept node's predecessor."""
        pred_kept = mask[:, np.maximum(self.pred, 0)]
        ok = ~mask[:, 1:] | pred_kept[:, 1:]
        return mask[:, 0] & ok.all(axis=1)


def replay_method(tables, rule: str):
    """The bound method ``tables`` replays ``rule`` with (its class's ``REPLAYS``), or the
    one-line refusal of a rule it does not replay."""
    name = type(tables).REPLAYS.get(rule)
    if name is None:
        refuse_rule(tables, rule, tuple(type(tables).REPLAYS))
    return getattr(tables, name)


def rule_value(tables, rule: str, values: dict) -> int:
    """``values[rule]``, or the one-line refusal of a rule ``tables`` does not replay."""
    got = values.get(rule)
    if got is None:
        refuse_rule(tables, rule, tuple(values))
    return got


def refuse_rule(tables, rule: str, replayed: tuple) -> None:
    """A rule a replay class does not replay is an error, never another rule's walk."""
    raise SpecbatchError(f"verify: {type(tables).__name__} replays {', '.join(replayed)}, "
                         f"got {rule!r}")


def rrs_walk(draws, eta: np.ndarray, max_depth: int, width: int) -> np.ndarray:
    """SpecInfer's walk down the batch's trees, τ_i = the depth reached: at depth d the current
    node's draws j = 0..W−1 are tried in order, draw j accepted when allowed and
    ``η[:, d·W + j] < accept``; no accepted draw ends the walk.
    draws(cur # [n]) -> (child ids, allowed, accept), each # [n, W], of the current nodes;
    eta # [n, ≥ D·W].  Returns # [n] int64."""
    n = eta.shape[0]
    cur = np.zeros(n, dtype=_I64)
    tau = np.zeros(n, dtype=_I64)
    alive = np.ones(n, dtype=bool)
    for d in range(max_depth):
        kids, allowed, accept = draws(cur)
        nxt = cur.copy()
        moved = np.zeros(n, dtype=bool)
        for j in range(width):
            take = alive & ~moved & allowed[:, j] & (eta[:, d * width + j] < accept[:, j])
            nxt[take] = kids[take, j]
            moved |= take
        alive &= moved
        if not alive.any():
            break
        cur = np.where(alive, nxt, cur)
        tau += alive
    return tau


def cut_mask(mask: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each row's first ``counts[i]`` verified nodes by node id (the root kept): a closed
    set's pre-order prefix is closed, since pred(u) < u. The engine cuts a request the
    step's token budget could not fully schedule this way.  mask # [n, N], counts # [n]"""
    kept = np.cumsum(mask[:, 1:], axis=1) <= np.asarray(counts)[:, None]
    out = mask.copy()
    out[:, 1:] &= kept
    return out


def _children(parent: np.ndarray) -> np.ndarray:
    """Children in draw order # [N, W] (−1 padded): a full branching tree in pre-order lists
    a node's children in draw order."""
    n = parent.shape[0]
    counts = np.bincount(parent[1:], minlength=n) if n > 1 else np.zeros(n, dtype=_I64)
    kids = np.full((n, max(int(counts.max(initial=0)), 1)), -1, dtype=_I64)
    filled = np.zeros(n, dtype=_I64)
    for u in range(1, n):  # once per trace, over one tree's N nodes
        p = int(parent[u])
        kids[p, filled[p]] = u
        filled[p] += 1
    return kids


def _drawn_nodes(tree) -> np.ndarray:
    """# [M] the global node id each draw proposes (its local child id plus its row's base)."""
    return tree.draws.astype(_I64) + np.repeat(
        tree.node_offsets[:-1], np.diff(tree.draw_offsets[tree.node_offsets]))


def _monotone_conf(draft_conf: np.ndarray, token: np.ndarray, parent: np.ndarray,
                   pred: np.ndarray) -> np.ndarray:
    """Path confidence Π draft_conf along the path, 0 for a node whose token repeats an
    earlier sibling's (SpecInfer never accepts a repeat: after x is rejected the residual
    has no mass on x, and a first x accepted surely leaves nothing to try), then min with
    pred's so every prefix of the ranking is closed (pre-order).
    draft_conf, token # [rows, N]"""
    conf = np.ones_like(draft_conf)
    for u in range(1, parent.shape[0]):
        path = conf[:, parent[u]] * draft_conf[:, u]
        sibling = pred[u]
        while sibling != parent[u]:  # the earlier siblings, walking back in draw order
            path = np.where(token[:, u] == token[:, sibling], 0.0, path)
            sibling = pred[sibling]
        conf[:, u] = np.minimum(path, conf[:, pred[u]])
    return conf


def tau_reference(stats, rule: str, kept: set, eta: list) -> int:
    """Per-request twin of :meth:`TreeTables.tau` and
    :meth:`~simulator.replay.trie.TrieTables.tau` from a row's
    :class:`~specbatch.theory.trees.stats.TreeStats`: ``kept`` the verified node ids (root
    included), ``eta`` the request's uniforms (gbv: uniform d at depth d)."""
    walk = _REFERENCE.get(rule)
    if walk is None:
        raise SpecbatchError(f"verify: tau_reference replays {', '.join(_REFERENCE)}, "
                             f"got {rule!r}")
    return walk(stats, kept, eta)


def _gbv_reference(stats, kept: set, eta: list) -> int:
    tau = 0
    for u in sorted((u for u, h in enumerate(stats.gbv_h) if h is not None),
                    key=lambda u: stats.depth[u]):
        if eta[stats.depth[u]] < stats.gbv_h[u]:
            tau = stats.depth[u]
    return tau


def _traversal_reference(stats, kept: set, eta: list) -> int:
    for j, u in enumerate(post_order(stats.children)):
        if eta[j] < stats.trv_accept[u]:
            return stats.depth[u]
    return 0


def _specinfer_reference(stats, kept: set, eta: list) -> int:
    width = max(len(d) for d in stats.draws)
    u = 0
    for d in range(max(stats.depth)):
        for j, (child, a) in enumerate(zip(stats.draws[u], stats.rrs_accept[u])):
            if child not in kept:
                return d
            if eta[d * width + j] < a:
                u = child
                break
        else:
            return d
    return max(stats.depth)


#: Each tree rule's per-request walk (the twin of the classes' ``REPLAYS`` methods).
_REFERENCE = {"specinfer": _specinfer_reference, "traversal": _traversal_reference,
              "gbv": _gbv_reference}
