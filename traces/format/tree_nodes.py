"""The draft trees of a version-2 trace: per position one static tree, flattened in pre-order.

A tree trace (``traces/FORMAT.md``, "Tree traces") keeps the chain columns of version 1 (the
tree's first root-to-leaf path, so chain policies replay it unchanged) and adds, per
(request, position), the nodes of the drafted tree with the replay numbers of every tree
verifier (:mod:`specbatch.theory.trees.stats`): ``rrs_accept`` per draw (recursive rejection
sampling), ``trv_accept`` per node (Traversal Verification), ``gbv_h`` (greedy multi-path BV,
on path tries only: finite on GBV's path, NaN elsewhere). Node 0 is the root (the context:
token −1, ``q = pt = 1``). Two tree laws: full branching trees (``2,2,1``, the same node
count at every position) and tries of K i.i.d. paths of L tokens (``3x3``, at most
``1 + K·L`` nodes, fewer where paths share a prefix; their checks: :mod:`traces.format.tree_trie`).

:class:`TreeNodes` holds them as flat arrays with CSR offsets per position row (the rows of the
chain :class:`~specbatch.traces.format.trace.Trace`, same order) and per node (its draws).
:func:`make_tree_nodes` checks every value: structure against the shape, probabilities in
range, draws that are children of their node, and the replay numbers that the stored ``q``
and ``pt`` determine (module functions ``check_*``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.theory.trees.stats import TreeStats
from specbatch.theory.trees.tree_shapes import Shape, parse_shape
from specbatch.theory.trees.verifiers import verifiers_for
from specbatch.traces.format.checks import SLACK
from specbatch.traces.format.ranges import concat_ranges
from specbatch.traces.format.tree_trie import check_gbv_path, check_trie_draws, check_trie_structure
from specbatch.traces.format.tree_trie import fail_first as _fail

#: Samplings a tree trace may record (``capture --tree SHAPE --sampling``).
TREE_SAMPLINGS = ("topk", "iid")
#: Scalar node columns (int then float) and the two per-draw list columns.
NODE_INT_COLUMNS = ("node", "parent", "depth", "token")
NODE_FLOAT_COLUMNS = ("q", "pt", "draft_conf", "trv_accept", "gbv_h")
DRAW_COLUMNS = ("draws", "rrs_accept")
#: Tolerance of the replay numbers recomputed from stored q and pt (float32 storage of q and
#: pt carries ~1e-7 relative error; a ratio of them and a clip keep it below this).
REPLAY_TOL = 1e-5


def node_count(shape: Shape) -> int:
    """Nodes per position, root included: a full branching tree's ``1 + Σ_d Π_{e≤d} b_e``;
    for a trie of K paths of L tokens the most it can hold, ``1 + K·L`` (no shared prefix)."""
    if shape.kind == "paths":
        return 1 + shape.paths * shape.length
    total, level = 1, 1
    for width in shape.widths:
        level *= width
        total += level
    return total


def shape_text(shape: Shape) -> str:
    """A shape as ``--tree`` and meta.json write it: ``"2,2,1"`` or ``"3x3"``."""
    if shape.kind == "paths":
        return f"{shape.paths}x{shape.length}"
    return ",".join(map(str, shape.widths))


def tree_verifiers(shape: Shape) -> list:
    """The verifiers whose replay numbers a trace of ``shape`` stores (GBV on tries only)."""
    return list(verifiers_for(shape))


def tree_meta(shape: Shape) -> dict:
    """meta.json's ``tree`` object for a captured ``shape`` (a trie's sampling is ``iid``)."""
    return {"shape": shape_text(shape), "sampling": shape.sampling,
            "verifiers": tree_verifiers(shape), "nodes_per_position": node_count(shape)}


def check_tree_meta(meta: dict, where: str) -> Shape:
    """The ``tree`` object of a version-2 meta.json, checked; returns its :class:`Shape`."""
    tree = meta.get("tree")
    require(isinstance(tree, dict), f"file {where}: field tree: expected an object (version 2 "
            f"traces record their draft tree), got {tree!r:.40}")
    sampling = tree.get("sampling")
    require(sampling in TREE_SAMPLINGS, f"file {where}: field tree.sampling: expected one of "
            f"{list(TREE_SAMPLINGS)}, got {sampling!r:.40}")
    try:
        shape = parse_shape(str(tree.get("shape")), sampling)
    except SpecbatchError as exc:
        raise SpecbatchError(
            f"file {where}: field tree.shape: {str(exc).split(': ', 1)[-1]}"
        ) from None
    require(shape.kind == "branching" or sampling == "iid", f"file {where}: field "
            f"tree.sampling: expected 'iid' for a trie of paths {tree.get('shape')!r:.20}, got "
            f"{sampling!r}")
    require(shape.depth == meta.get("depth"), f"file {where}: field depth: expected the tree's "
            f"depth {shape.depth}, got {meta.get('depth')!r}")
    verifiers = tree_verifiers(shape)
    require(tree.get("verifiers") == verifiers, f"file {where}: field "
            f"tree.verifiers: expected {verifiers}, got {tree.get('verifiers')!r:.60}")
    n = tree.get("nodes_per_position")
    most = "at most " if shape.kind == "paths" else ""
    require(n == node_count(shape), f"file {where}: field tree.nodes_per_position: expected "
            f"{node_count(shape)} ({most}nodes per position) for shape {tree['shape']}, got "
            f"{n!r:.40}")
    return shape


@dataclass(frozen=True, eq=False)
class TreeNodes:
    """Every position's tree: ``node_offsets[row]:node_offsets[row + 1]`` are row's nodes in
    pre-order (node ids local to the row), ``draw_offsets[n]:draw_offsets[n + 1]`` node n's
    draws. Arrays are read-only."""

    shape: Shape
    node_offsets: np.ndarray  # [rows+1] int64
    parent: np.ndarray  # [N] int32, -1 at the root
    depth: np.ndarray  # [N] int8
    token: np.ndarray  # [N] int32, -1 at the root
    q: np.ndarray  # [N] float64 Ms(token | parent path) at T
    pt: np.ndarray  # [N] float64 Mb(token | parent path) at T
    draft_conf: np.ndarray  # [N] float64 temperature-1 draft probability of the token
    trv_accept: np.ndarray  # [N] float64
    gbv_h: np.ndarray  # [N] float64, NaN off GBV's path
    draw_offsets: np.ndarray  # [N+1] int64
    draws: np.ndarray  # [M] int32 child node ids (local)
    rrs_accept: np.ndarray  # [M] float64

    @property
    def n_rows(self) -> int:
        return int(self.node_offsets.shape[0] - 1)

    def columns(self) -> dict:
        """Scalar node columns by name, then ``draws``/``rrs_accept`` as per-node lists."""
        node = np.arange(self.parent.size) - np.repeat(self.node_offsets[:-1],
                                                       np.diff(self.node_offsets))
        cols = {"node": node, **{name: getattr(self, name) for name in NODE_INT_COLUMNS[1:]},
                **{name: getattr(self, name) for name in NODE_FLOAT_COLUMNS}}
        cols["draw_offsets"] = self.draw_offsets
        cols["draws"], cols["rrs_accept"] = self.draws, self.rrs_accept
        return cols

    def take(self, rows: np.ndarray) -> TreeNodes:
        """The trees of position rows ``rows`` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = np.diff(self.node_offsets)[rows]
        nodes = concat_ranges(self.node_offsets[rows], counts)
        draw_counts = np.diff(self.draw_offsets)[nodes]
        draws = concat_ranges(self.draw_offsets[nodes], draw_counts)
        cols = {name: getattr(self, name)[nodes]
                for name in (*NODE_INT_COLUMNS[1:], *NODE_FLOAT_COLUMNS)}
        return TreeNodes(self.shape, _offsets(counts), draw_offsets=_offsets(draw_counts),
                         draws=self.draws[draws], rrs_accept=self.rrs_accept[draws], **cols)

    def stats(self, row: int) -> TreeStats:
        """Row ``row``'s tree as :class:`~specbatch.theory.trees.stats.TreeStats` (replay)."""
        a, b = int(self.node_offsets[row]), int(self.node_offsets[row + 1])
        lo = self.draw_offsets[a:b + 1]
        draws = tuple(tuple(int(d) for d in self.draws[lo[i]:lo[i + 1]]) for i in range(b - a))
        rrs = tuple(tuple(float(x) for x in self.rrs_accept[lo[i]:lo[i + 1]])
                    for i in range(b - a))
        gbv = tuple(None if np.isnan(h) else float(h) for h in self.gbv_h[a:b])
        return TreeStats(tuple(int(v) for v in self.parent[a:b]),
                         tuple(int(v) for v in self.depth[a:b]),
                         tuple(int(v) for v in self.token[a:b]),
                         tuple(float(v) for v in self.q[a:b]),
                         tuple(float(v) for v in self.pt[a:b]),
                         draws, rrs, tuple(float(v) for v in self.trv_accept[a:b]), gbv)


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def make_tree_nodes(shape: Shape, node_offsets: np.ndarray, cols: dict, where: str, locate,
                    vocab: int | None = None) -> TreeNodes:
    """Build and check the trees of position rows from flat arrays.

    node_offsets: # [rows+1] CSR offsets of each row's nodes;  cols: ``node, parent, depth,
    token`` # [N] int, ``q, pt, draft_conf, trv_accept, gbv_h`` # [N] float, ``draw_offsets``
    # [N+1], ``draws`` # [M] int, ``rrs_accept`` # [M] float; nodes ordered by row then node
    id. ``locate(i)`` names flat node i in errors.
    """
    node_offsets = np.asarray(node_offsets, dtype=np.int64)
    counts = np.diff(node_offsets)
    rows = counts.size
    require(node_offsets[-1] == cols["node"].size, f"file {where}: field node: expected "
            f"{node_offsets[-1]} nodes for the {rows} positions, got {cols['node'].size}")
    n = node_count(shape)
    if shape.kind == "branching":
        _fail(counts != n, where, "node", f"{n} nodes per position (a full tree)", counts,
              lambda r: locate(int(node_offsets[r])))
    else:
        _fail((counts < 1 + shape.length) | (counts > n), where, "node", f"{1 + shape.length}.."
              f"{n} nodes per position (a trie of {shape.paths} paths of {shape.length})",
              counts, lambda r: locate(int(node_offsets[r])))
    ints = {name: np.asarray(cols[name], dtype=np.int64) for name in NODE_INT_COLUMNS}
    floats = {name: np.ascontiguousarray(cols[name], dtype=np.float64)
              for name in NODE_FLOAT_COLUMNS}
    draw_offsets = np.asarray(cols["draw_offsets"], dtype=np.int64)
    draws = np.asarray(cols["draws"], dtype=np.int64)
    rrs = np.ascontiguousarray(cols["rrs_accept"], dtype=np.float64)
    base = np.repeat(node_offsets[:-1], counts)
    check_structure(shape, ints, base, where, locate, vocab)
    check_values(shape, floats, ints, rrs, where, locate)
    check_draws(shape, ints, base, draw_offsets, draws, where, locate)
    if shape.kind == "paths":
        check_gbv_path(ints, floats, base, where, locate)
    check_replay(shape, ints, floats, node_offsets, draw_offsets, draws, rrs, where, locate)
    out = TreeNodes(shape, node_offsets, ints["parent"].astype(np.int32),
                    ints["depth"].astype(np.int8), ints["token"].astype(np.int32),
                    floats["q"], floats["pt"], floats["draft_conf"], floats["trv_accept"],
                    floats["gbv_h"], draw_offsets, draws.astype(np.int32), rrs)
    for name in out.__dataclass_fields__:
        value = getattr(out, name)
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return out


def check_structure(shape: Shape, ints: dict, base: np.ndarray, where: str, locate,
                    vocab: int | None) -> None:
    """Node ids 0..n−1 per position, ``parent < node`` (−1 only at the root), depths that follow the
    parents, token ids in the vocabulary (−1 at the root); on a branching tree each node's child
    count equals the shape's width at its depth (a trie: :mod:`traces.format.tree_trie`).

    base: # [N] flat index of each node's root."""
    node, parent, depth, token = (ints[k] for k in NODE_INT_COLUMNS)
    local = np.arange(node.size) - base
    _fail(node != local, where, "node", "node ids 0..n-1 in pre-order per position", node, locate)
    root = local == 0
    _fail(root & (parent != -1), where, "parent", "-1 at the root", parent, locate)
    _fail(~root & ((parent < 0) | (parent >= node)), where, "parent",
          "a node id below the node's own", parent, locate)
    glob = np.where(root, 0, base + np.maximum(parent, 0))
    expect_depth = np.where(root, 0, depth[glob] + 1)
    _fail(depth != expect_depth, where, "depth", "0 at the root and depth(parent) + 1",
          depth, locate)
    _fail(depth > shape.depth, where, "depth", f"at most the tree depth {shape.depth}", depth,
          locate)
    _fail(root & (token != -1), where, "token", "-1 at the root", token, locate)
    top = 2**31 if vocab is None else vocab
    _fail(~root & ((token < 0) | (token >= top)), where, "token",
          f"token ids in 0..{top - 1}", token, locate)
    kids = np.bincount(glob[~root], minlength=node.size)
    if shape.kind == "paths":
        check_trie_structure(shape, ints, base, glob, kids, where, locate)
        return
    widths = np.array([*shape.widths, 0])
    _fail(kids != widths[np.clip(depth, 0, shape.depth)], where, "parent",
          f"children per depth {shape.widths} (a full tree)", kids, locate)


def check_values(shape: Shape, floats: dict, ints: dict, rrs: np.ndarray, where: str,
                 locate) -> None:
    """Probabilities in [0, 1] (slack :data:`SLACK`), finite, ``q > 0``; the root's
    ``q = pt = trv_accept = 1``; ``gbv_h`` NaN on branching trees (no GBV path), NaN or in
    [0, 1] on tries (which nodes: :func:`traces.format.tree_trie.check_gbv_path`)."""
    root = ints["node"] == 0
    for name in ("q", "pt", "draft_conf", "trv_accept"):
        arr = floats[name]
        _fail(~np.isfinite(arr), where, name, "finite values", arr, locate)
        _fail((arr < -SLACK) | (arr > 1 + SLACK), where, name, f"values in [0, 1] (slack "
              f"{SLACK:g})", arr, locate)
    _fail(floats["q"] <= 0, where, "q", "q > 0 on a drafted token", floats["q"], locate)
    for name in ("q", "pt", "trv_accept"):
        _fail(root & (np.abs(floats[name] - 1) > SLACK), where, name, "1 at the root",
              floats[name], locate)
    gbv = floats["gbv_h"]
    if shape.kind == "branching":
        _fail(~np.isnan(gbv), where, "gbv_h", "NaN (no GBV path on a branching tree)", gbv,
              locate)
    else:
        _fail(np.isinf(gbv) | (gbv < -SLACK) | (gbv > 1 + SLACK), where, "gbv_h",
              f"NaN or values in [0, 1] (slack {SLACK:g})", gbv, locate)
    bad = ~np.isfinite(rrs) | (rrs < -SLACK) | (rrs > 1 + SLACK)
    if bad.any():
        raise SpecbatchError(f"file {where}: field rrs_accept: expected probabilities in "
                             f"[0, 1], got {float(rrs[np.flatnonzero(bad)[0]])!r}")


def check_draws(shape: Shape, ints: dict, base: np.ndarray, draw_offsets: np.ndarray,
                draws: np.ndarray, where: str, locate) -> None:
    """Draws are child ids of their node; on a branching tree every node draws each of its
    children once, in node order (a trie: :func:`traces.format.tree_trie.check_trie_draws`)."""
    node, parent = ints["node"], ints["parent"]
    size = node.size
    require(draw_offsets.shape == (size + 1,) and draw_offsets[0] == 0
            and bool(np.all(np.diff(draw_offsets) >= 0)) and draw_offsets[-1] == draws.size,
            f"file {where}: field draws: expected one list per node, got a damaged layout")
    owner = np.repeat(np.arange(size), np.diff(draw_offsets))
    row_size = np.bincount(base, minlength=size)[base]  # nodes of each node's row
    inside = (draws > 0) & (draws < row_size[owner])
    if not inside.all():
        i = int(owner[np.flatnonzero(~inside)[0]])
        raise SpecbatchError(f"file {where}: field draws: expected child node ids, got "
                             f"{int(draws[np.flatnonzero(~inside)[0]])} {locate(i)}")
    child_parent = parent[base[owner] + draws]
    bad = child_parent != node[owner]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SpecbatchError(f"file {where}: field draws: expected child node ids of the "
                             f"node, got {int(draws[i])} {locate(int(owner[i]))}")
    if shape.kind == "paths":
        check_trie_draws(shape, ints, base, draw_offsets, draws, owner, where, locate)
        return
    kids = np.bincount(np.where(node == 0, -1, parent + np.arange(size) - node)[node != 0],
                       minlength=size)
    ok = (child_parent == node[owner])
    counts_ok = np.diff(draw_offsets) == kids
    first = np.r_[True, owner[1:] != owner[:-1]]
    ok &= first | (draws > np.r_[0, draws[:-1]])  # increasing within a node: each child once
    if not (ok.all() and counts_ok.all()):
        i = int(owner[np.flatnonzero(~ok)[0]]) if not ok.all() else \
            int(np.flatnonzero(~counts_ok)[0])
        raise SpecbatchError(f"file {where}: field draws: expected each child of the node "
                             f"once, in node order (a {shape.sampling} tree), got "
                             f"{draws[draw_offsets[i]:draw_offsets[i + 1]].tolist()} {locate(i)}")


def check_replay(shape: Shape, ints: dict, floats: dict, node_offsets: np.ndarray,
                 draw_offsets: np.ndarray, draws: np.ndarray, rrs: np.ndarray, where: str,
                 locate) -> None:
    """The replay numbers that the stored q and pt determine (theory.trees.stats):

    - a node's first draw: ``rrs_accept = min(1, pt / q)`` (top-k: the draft is a point mass,
      so ``min(1, pt)``); on top-k trees every later draw too: the residual after rejecting
      tokens ``x_<i`` is Mb without them, ``rrs_accept_i = min(1, pt_i / (1 − Σ_{j<i} pt_j))``;
    - the first leaf in pre-order (the first root-to-leaf path, nodes 0..D): Traversal's
      acceptance is block verification's weight ``p_D``, ``p_d = min(p_{d−1} pt_d / q_d, 1)``
      (on a trie too: the first child of every node is met before any draft row is cut).
    """
    node, q, pt = ints["node"], floats["q"], floats["pt"]
    owner = np.repeat(np.arange(node.size), np.diff(draw_offsets))
    child = owner - node[owner] + draws
    topk = shape.kind == "branching" and shape.sampling == "topk"
    q_eff = np.ones_like(q) if topk else q
    first = np.r_[True, owner[1:] != owner[:-1]] if owner.size else np.zeros(0, bool)
    cum = np.cumsum(pt[child])
    start = np.maximum.accumulate(np.where(first, np.arange(owner.size), 0))
    before = cum - pt[child] - (cum[start] - pt[child][start])
    den = (1.0 - before) if topk else q_eff[child]
    check = first | topk
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.minimum(1.0, pt[child] / den)
    usable = check & (den > 1e-3)
    bad = usable & (np.abs(rrs - expected) > REPLAY_TOL * (1 + 1 / np.maximum(den, 1e-3)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SpecbatchError(f"file {where}: field rrs_accept: expected "
                             f"{float(expected[i])!r} from the stored pt and q, got "
                             f"{float(rrs[i])!r} {locate(int(owner[i]))}")
    path = node_offsets[:-1, None] + np.arange(1, shape.depth + 1)[None, :]  # [rows, D]
    weight = np.ones(path.shape[0])
    for d in range(shape.depth):
        u = path[:, d]
        with np.errstate(divide="ignore", invalid="ignore"):
            weight = np.minimum(weight * pt[u] / q_eff[u], 1.0)
    leaf = path[:, -1]
    bad = np.abs(floats["trv_accept"][leaf] - weight) > REPLAY_TOL * shape.depth
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise SpecbatchError(f"file {where}: field trv_accept: expected block verification's "
                             f"weight {float(weight[r])!r} on the first leaf, got "
                             f"{float(floats['trv_accept'][leaf[r]])!r} {locate(int(leaf[r]))}")
