"""Per-node numbers that replay a tree verifier without the model rows (docs/trees.md).

A chain trace stores, per drafted token, q, pt and BV's residual mass Z, so that a simulator
can draw τ for any verifier without the full distributions. The tree analogue: given the
realised tree, every verifier's random walk is driven by one fixed number per decision,
computable at capture time from the full rows:

- ``rrs_accept[u]``: for each draw of node u (in draw order), the probability that recursive
  rejection sampling accepts it given the earlier draws of u were rejected. (The residual after
  a rejection depends only on the earlier draws' tokens, so the number is fixed by the tree.)
- ``trv_accept[u]``: Traversal Verification's probability of accepting u when u becomes the
  first remaining leaf, i.e. after every child of u was deleted (the root: 1). A node is only
  reached in that state one way, so the number is fixed by the tree.
- ``gbv_h[u]``: on greedy multi-path BV's chosen path, block verification's threshold h at u
  (``τ = max{depth(u) : η_u < h_u}``, the root h = 1); ``None`` off the path.

:func:`tree_stats` computes them exactly from a model pair; :func:`tree_stats_numpy` is its float64
twin from full rows per node (what a capture has; parity test to 1e-12). :func:`tau_law_from_stats`
turns them into the exact law of τ (the parity test against :mod:`theory.trees.verifiers` is exact)
and :func:`replay_tau` draws τ with uniforms, as a simulator would. Nodes are numbered in pre-order
(root 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbatch.errors import require
from specbatch.theory.exact.small_models import ModelPair, Prefix, one_of, zero_of
from specbatch.theory.trees.multidraft import residual, without
from specbatch.theory.trees.tree_shapes import Node, Shape
from specbatch.theory.trees.verifiers import gbv_block, point_mass


@dataclass(frozen=True)
class TreeStats:
    """One realised tree flattened in pre-order, with the replay numbers of each verifier."""

    parent: tuple  # [N] parent node id, -1 for the root
    depth: tuple  # [N]
    token: tuple  # [N] drafted token, -1 for the root
    q: tuple  # [N] Ms(token | parent path) (root: 1)
    pt: tuple  # [N] Mb(token | parent path) (root: 1)
    draws: tuple  # [N] tuple of child node ids in draw order (a path trie repeats a child)
    rrs_accept: tuple  # [N] tuple aligned with draws
    trv_accept: tuple  # [N]
    gbv_h: tuple  # [N] h on GBV's path, None elsewhere (None everywhere for branching trees)

    @property
    def children(self) -> tuple:
        """Child node ids of every node, in the order the tree lists them."""
        out: list = [[] for _ in self.parent]
        for u, parent in enumerate(self.parent):
            if parent >= 0:
                out[parent].append(u)
        return tuple(tuple(c) for c in out)


def _flatten(pair: ModelPair, root: Node, context: Prefix) -> tuple:
    """Pre-order lists: (node objects, prefixes, parent ids, child-id lists)."""
    nodes, prefixes, parents, kids = [], [], [], []

    def walk(node: Node, prefix: Prefix, parent: int) -> int:
        me = len(nodes)
        nodes.append(node)
        prefixes.append(prefix)
        parents.append(parent)
        kids.append([])
        for child in node.children:
            kids[me].append(walk(child, prefix + (child.token,), me))
        return me

    walk(root, (), -1)
    return nodes, prefixes, parents, kids


def tree_stats(pair: ModelPair, root: Node, shape: Shape, context: Prefix = ()) -> TreeStats:
    """The replay numbers of every verifier defined on ``shape`` for one realised tree."""
    context = tuple(context)
    nodes, prefixes, parents, kids = _flatten(pair, root, context)
    one, zero = one_of(pair), zero_of(pair)
    rows_t = [pair.target.row(context + s) for s in prefixes]
    rows_d = [pair.draft.row(context + s) if kids[u] else rows_t[u]  # leaves draw nothing
              for u, s in enumerate(prefixes)]
    n = len(nodes)
    q = [one] + [rows_d[parents[u]][nodes[u].token] for u in range(1, n)]
    pt = [one] + [rows_t[parents[u]][nodes[u].token] for u in range(1, n)]
    draws = [tuple(kids[u][i] for i in nodes[u].draws) for u in range(n)]
    without_replacement = shape.kind == "branching" and shape.sampling == "distinct"
    topk = shape.kind == "branching" and shape.sampling == "topk"

    rrs = []
    for u in range(n):
        target, proposal, accept = rows_t[u], rows_d[u], []
        for i, c in enumerate(draws[u]):
            x = nodes[c].token
            if topk:
                proposal = point_mass(pair, x)
            accept.append(min(one, target[x] / proposal[x]))
            target = residual(target, proposal)
            if without_replacement and i + 1 < len(draws[u]):
                proposal = without(proposal, x)
        rrs.append(tuple(accept))

    remove = shape.kind == "paths" or without_replacement
    trv = [zero] * n

    def visit(u: int, weight) -> None:
        target, proposal = rows_t[u], rows_d[u]
        for i, c in enumerate(kids[u]):
            x = nodes[c].token
            if topk:
                proposal = point_mass(pair, x)
            visit(c, min(weight * target[x] / proposal[x], one) if proposal[x] > 0 else zero)
            z = sum((max(weight * b - s, zero) for s, b in zip(proposal, target)), zero)
            if z > 0:
                target = tuple(max(weight * b - s, zero) / z for s, b in zip(proposal, target))
            den = z + one - weight
            weight = z / den if den > 0 else one
            if remove and i + 1 < len(kids[u]):
                proposal = without(proposal, x)
        trv[u] = one if u == 0 else weight

    visit(0, one)
    return TreeStats(tuple(parents), tuple(len(s) for s in prefixes),
                     tuple(nd.token for nd in nodes), tuple(q), tuple(pt), tuple(draws),
                     tuple(rrs), tuple(trv), _gbv_h(pair, root, shape, context, kids, nodes))


def _gbv_h(pair: ModelPair, root: Node, shape: Shape, context: Prefix, kids, nodes) -> tuple:
    """BV's thresholds along GBV's chosen path (h_0 = 1 at the root), None off the path."""
    out: list = [None] * len(nodes)
    if shape.kind != "paths":
        return tuple(out)
    path, _, h, _, _ = gbv_block(pair, root, shape.paths, context)
    u = 0
    out[0] = h[0]
    for i, x in enumerate(path, start=1):
        u = next(c for c in kids[u] if nodes[c].token == x)
        out[u] = h[i]
    return tuple(out)


def tau_law_from_stats(stats: TreeStats, verifier: str) -> tuple:
    """Exact ``P(τ = d)``, d = 0..depth, of a verifier from the replay numbers alone."""
    require(verifier in ("specinfer", "traversal", "gbv"),
            f"verifier: expected specinfer, traversal or gbv, got {verifier!r}")
    one = stats.q[0]
    law = [one * 0] * (max(stats.depth) + 1)
    if verifier == "specinfer":
        def walk(u: int, reach) -> None:
            for c, a in zip(stats.draws[u], stats.rrs_accept[u]):
                walk(c, reach * a)
                reach = reach * (1 - a)
            law[stats.depth[u]] += reach
        walk(0, one)
    elif verifier == "traversal":
        kids = stats.children

        def visit(u: int, reach):
            for c in kids[u]:
                reach = visit(c, reach)
            law[stats.depth[u]] += reach * stats.trv_accept[u]
            return reach * (1 - stats.trv_accept[u])
        visit(0, one)
    else:
        path = sorted((u for u, h in enumerate(stats.gbv_h) if h is not None),
                      key=lambda u: stats.depth[u])
        require(bool(path), "gbv: these stats come from a branching tree (no GBV path)")
        survive = one
        for u in reversed(path):
            law[stats.depth[u]] += survive * stats.gbv_h[u]
            survive = survive * (1 - stats.gbv_h[u])
    return tuple(law)


def post_order(children) -> tuple:
    """Node ids in post-order (children in listed order, then the node; root 0 last): the
    order in which Traversal Verification meets its leaves.  children: per node its child ids."""
    order: list = []

    def post(u: int) -> None:
        for c in children[u]:
            post(c)
        order.append(u)

    post(0)
    return tuple(order)


def replay_tau(stats: TreeStats, verifier: str, rng: np.random.Generator) -> int:
    """Draw τ for one verification of the recorded tree, one uniform per decision."""
    if verifier == "specinfer":
        u = 0
        while True:
            for c, a in zip(stats.draws[u], stats.rrs_accept[u]):
                if rng.random() < a:
                    u = c
                    break
            else:
                return stats.depth[u]
    if verifier == "traversal":
        for u in post_order(stats.children):
            if rng.random() < stats.trv_accept[u]:
                return stats.depth[u]
        return 0
    path = [u for u, h in enumerate(stats.gbv_h) if h is not None]
    require(bool(path), "gbv: these stats come from a branching tree (no GBV path)")
    tau = 0
    for u in sorted(path, key=lambda u: stats.depth[u]):
        if rng.random() < stats.gbv_h[u]:
            tau = stats.depth[u]
    return tau


# --------------------------------------------------------------------------- numpy twin


def _residual_np(target: np.ndarray, proposal: np.ndarray, weight: float = 1.0) -> tuple:
    """``max(w·target − proposal, 0)`` normalised (target itself if massless) and its mass."""
    res = np.maximum(weight * target - proposal, 0.0)
    mass = float(res.sum())
    return (res / mass if mass > 0 else target), mass


def _without_np(row: np.ndarray, token: int) -> np.ndarray:
    out = row.copy()
    out[token] = 0.0
    total = out.sum()
    return out / total if total > 0 else out


def _skew_np(target: np.ndarray, proposal: np.ndarray, below: float, here: float, k: int,
             order: np.ndarray) -> np.ndarray:
    lower = np.empty_like(proposal)
    lower[order] = np.concatenate([[0.0], np.cumsum(proposal[order])[:-1]])
    den = (below + here) ** k - below ** k
    return ((below + here * (lower + proposal)) ** k - (below + here * lower) ** k) / den


def tree_stats_numpy(root: Node, shape: Shape, target_rows: dict, draft_rows: dict) -> TreeStats:
    """:func:`tree_stats` from full float rows, for capture: ``{node path: row # [V]}``.

    ``target_rows`` needs every node's path (the context excluded), ``draft_rows`` every node
    that draws children. float64 numpy; the exact twin is :func:`tree_stats` (parity test).
    """
    prefixes, parents, kids, tokens, draw_lists = [], [], [], [], []

    def walk(node: Node, prefix: tuple, parent: int) -> int:
        me = len(prefixes)
        prefixes.append(prefix)
        parents.append(parent)
        tokens.append(node.token)
        kids.append([])
        draw_lists.append(node.draws)
        for child in node.children:
            kids[me].append(walk(child, prefix + (child.token,), me))
        return me

    walk(root, (), -1)
    n = len(prefixes)
    rows_t = [np.asarray(target_rows[s], dtype=np.float64) for s in prefixes]
    rows_d = [np.asarray(draft_rows[s], dtype=np.float64) if kids[u] else rows_t[u]
              for u, s in enumerate(prefixes)]
    q = [1.0] + [float(rows_d[parents[u]][tokens[u]]) for u in range(1, n)]
    pt = [1.0] + [float(rows_t[parents[u]][tokens[u]]) for u in range(1, n)]
    draws = [tuple(kids[u][i] for i in draw_lists[u]) for u in range(n)]
    distinct = shape.kind == "branching" and shape.sampling == "distinct"
    topk = shape.kind == "branching" and shape.sampling == "topk"

    def point(x: int, like: np.ndarray) -> np.ndarray:
        out = np.zeros_like(like)
        out[x] = 1.0
        return out

    rrs = []
    for u in range(n):
        target, proposal, accept = rows_t[u], rows_d[u], []
        for i, c in enumerate(draws[u]):
            x = tokens[c]
            proposal = point(x, proposal) if topk else proposal
            accept.append(min(1.0, float(target[x] / proposal[x])))
            target = _residual_np(target, proposal)[0]
            if distinct and i + 1 < len(draws[u]):
                proposal = _without_np(proposal, x)
        rrs.append(tuple(accept))

    remove = shape.kind == "paths" or distinct
    trv = [0.0] * n

    def visit(u: int, weight: float) -> None:
        target, proposal = rows_t[u], rows_d[u]
        for i, c in enumerate(kids[u]):
            x = tokens[c]
            proposal = point(x, proposal) if topk else proposal
            visit(c, min(weight * float(target[x] / proposal[x]), 1.0) if proposal[x] > 0
                  else 0.0)
            new_target, z = _residual_np(target, proposal, weight)
            target = new_target if z > 0 else target
            den = z + 1.0 - weight
            weight = z / den if den > 0 else 1.0
            if remove and i + 1 < len(kids[u]):
                proposal = _without_np(proposal, x)
        trv[u] = 1.0 if u == 0 else weight

    visit(0, 1.0)
    gbv: list = [None] * n
    if shape.kind == "paths":
        u, below, here, weight, path = 0, 0.0, 1.0, 1.0, [0]
        skews = []
        while kids[u]:
            target, proposal = rows_t[u], rows_d[u]
            ratio = np.where(proposal > 0, target / np.where(proposal > 0, proposal, 1.0), np.inf)
            order = np.lexsort((np.arange(len(ratio)), ratio))
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            skews.append(_skew_np(target, proposal, below, here, shape.paths, order))
            c = max(kids[u], key=lambda c: rank[tokens[c]])
            below += here * float(proposal[order[:rank[tokens[c]]]].sum())
            here *= float(proposal[tokens[c]])
            u = c
            path.append(u)
        gbv[0] = 1.0
        for i, u in enumerate(path[1:], start=1):
            weight = min(weight * pt[u] / float(skews[i - 1][tokens[u]]), 1.0)
            if i == len(path) - 1:
                gbv[u] = weight
                continue
            z = _residual_np(rows_t[u], skews[i], weight)[1]
            den = z + 1.0 - weight
            gbv[u] = z / den if den > 0 else 1.0
    return TreeStats(tuple(parents), tuple(len(s) for s in prefixes), tuple(tokens), tuple(q),
                     tuple(pt), tuple(draws), tuple(rrs), tuple(trv), tuple(gbv))
