"""Draft-tree laws: shapes, realised trees and their exact law (docs/trees.md).

A *tree* is a realised draft: a :class:`Node` per drafted token, the root standing for the
context. Three tree laws (:func:`tree_law`, from a :class:`Shape`):

- ``branching`` ``(b_1, .., b_D)``, sampling ``iid``: every node at depth d-1 gets ``b_d``
  children drawn i.i.d. from ``Ms(·|path)`` (SpecInfer's expansion; equal tokens stay separate
  nodes);
- ``branching``, sampling ``distinct``: the children are drawn one after another without
  replacement (each from Ms restricted to the tokens not drawn yet);
- ``branching``, sampling ``topk``: the children are the b_d most probable tokens of
  ``Ms(·|path)`` (ties by token id), deterministic, as EAGLE's static trees; verifiers treat
  each child as drawn from a point mass on its token;
- ``paths`` ``K x L``: K i.i.d. draft paths of L tokens merged into a trie (the drafting of
  SpecTr's multi-path setting and of greedy multi-path block verification); a node's children
  are its distinct next tokens in order of first appearance, and its *draws* are the next
  tokens of every path through it, with multiplicity, in path order.

The law is enumerated exactly (Fractions for exact pairs), so :data:`MAX_TREES` bounds the
number of realisations and :data:`MAX_DEPTH`, :data:`MAX_WIDTH` the shape.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from specbatch.errors import SpecbatchError, require
from specbatch.theory.exact.small_models import ModelPair, Prefix, one_of, sequence_prob, zero_of
from specbatch.theory.trees.multidraft import draft_law

#: Largest number of realised trees an exact enumeration may walk.
MAX_TREES = 50_000

#: How a branching tree's children are drawn.
SAMPLINGS = ("iid", "distinct", "topk")

#: Largest tree depth, children per node and number of paths a shape may ask for.
MAX_DEPTH, MAX_WIDTH = 6, 8


@dataclass(frozen=True)
class Node:
    """One drafted token (the root: token -1), its children, and the draws in draft order.

    ``draws[i]`` is the index in ``children`` of the i-th draft drawn at this node (a trie of
    paths repeats a child once per path through it).
    """

    token: int
    children: tuple = ()
    draws: tuple = ()


@dataclass(frozen=True)
class Shape:
    """A tree law: ``kind`` "branching" (``widths`` per depth, ``sampling``) or "paths" (K x L)."""

    kind: str
    widths: tuple = ()
    sampling: str = "iid"
    paths: int = 0
    length: int = 0

    @property
    def depth(self) -> int:
        return len(self.widths) if self.kind == "branching" else self.length

    def trees_bound(self, vocab: int) -> int:
        """An upper bound on the number of realised trees, V to the number of draws (the
        exponent capped at 64, which already exceeds any enumeration limit for V >= 2)."""
        if self.kind == "paths":
            draws = min(self.paths * self.length, 64)
        elif self.sampling == "topk":
            draws = 0
        else:
            draws, level = 0, 1
            for width in self.widths:
                level = min(level * width, 64)
                draws = min(draws + level, 64)
        return vocab ** draws

    def describe(self) -> str:
        if self.kind == "paths":
            return f"{self.paths} i.i.d. paths of {self.length} tokens (trie)"
        return f"children per depth {','.join(map(str, self.widths))}, {self.sampling} draws"


def parse_shape(text: str, sampling: str = "iid") -> Shape:
    """``"2,2,1"`` (children per depth) or ``"3x2"`` (3 i.i.d. paths of 2 tokens)."""
    text = str(text).strip().lower()
    require(sampling in SAMPLINGS,
            f"--sampling: expected one of {list(SAMPLINGS)}, got {sampling!r}")
    try:
        if "x" in text:
            k, length = (int(v) for v in text.split("x"))
            shape = Shape("paths", paths=k, length=length)
            ok = 1 <= k <= MAX_WIDTH and 1 <= length <= MAX_DEPTH
        else:
            widths = tuple(int(v) for v in text.split(","))
            shape = Shape("branching", widths=widths, sampling=sampling)
            ok = 1 <= len(widths) <= MAX_DEPTH and all(1 <= w <= MAX_WIDTH for w in widths)
    except ValueError:
        ok = False
    if not ok:
        raise SpecbatchError(f"--tree: expected children per depth like '2,2,1' or paths x "
                             f"length like '3x2' (integers 1..{MAX_WIDTH}, depth at most "
                             f"{MAX_DEPTH}), got {text[:40]!r}")
    return shape


# --------------------------------------------------------------------------- tree laws


def _children_law(row, width: int, sampling: str) -> dict:
    """``{children tokens: probability}`` at one node: drawn (``draft_law``) or the top-k."""
    if sampling != "topk":
        return draft_law(row, width, sampling)
    top = sorted(range(len(row)), key=lambda x: (-row[x], x))[:width]
    return {tuple(top): row[0] * 0 + 1}


def _branching(pair: ModelPair, prefix: Prefix, widths: tuple, sampling: str, cache: dict) -> dict:
    """``{children tuple: probability}`` of the subtree below the node at ``prefix``."""
    if not widths:
        return {(): one_of(pair)}
    key = (prefix, len(widths))
    if key in cache:
        return cache[key]
    out: dict = defaultdict(lambda: zero_of(pair))
    below = {}
    for tokens, mass in _children_law(pair.draft.row(prefix), widths[0], sampling).items():
        options = []
        for x in tokens:
            if x not in below:
                below[x] = _branching(pair, prefix + (x,), widths[1:], sampling, cache)
            options.append([(Node(x, kids, tuple(range(len(kids)))), pk)
                            for kids, pk in below[x].items()])
        for combo in itertools.product(*options):
            prob = mass
            for _, pk in combo:
                prob = prob * pk
            out[tuple(node for node, _ in combo)] += prob
    cache[key] = dict(out)
    return cache[key]


def trie(paths: list, depth: int) -> Node:
    """The trie of equal-length token paths: children by first appearance, draws per path."""
    if depth == 0 or not paths:
        return Node(-1)
    firsts: list = []
    for path in paths:
        if path[0] not in firsts:
            firsts.append(path[0])
    kids = []
    for x in firsts:
        sub = trie([p[1:] for p in paths if p[0] == x], depth - 1)
        kids.append(Node(x, sub.children, sub.draws))
    return Node(-1, tuple(kids), tuple(firsts.index(p[0]) for p in paths))


def _paths(pair: ModelPair, context: Prefix, k: int, length: int) -> dict:
    out: dict = defaultdict(lambda: zero_of(pair))
    singles = [(x, sequence_prob(pair.draft, x, context))
               for x in itertools.product(range(pair.vocab), repeat=length)]
    singles = [(x, px) for x, px in singles if px > 0]
    for combo in itertools.product(singles, repeat=k):
        prob = one_of(pair)
        for _, px in combo:
            prob = prob * px
        out[trie([x for x, _ in combo], length)] += prob
    return dict(out)


def tree_law(pair: ModelPair, shape: Shape, context: Prefix = ()) -> dict:
    """``{root Node: probability}`` over every realised tree of ``shape`` (exact)."""
    bound = shape.trees_bound(pair.vocab)
    if bound > MAX_TREES:
        raise SpecbatchError(f"tree {shape.describe()}: more than {MAX_TREES} realised trees "
                             f"may occur at V={pair.vocab} (the exact-enumeration limit); use "
                             f"a smaller vocabulary or tree")
    context = tuple(context)
    if shape.kind == "paths":
        return _paths(pair, context, shape.paths, shape.length)
    law = _branching(pair, context, shape.widths, shape.sampling, {})
    return {Node(-1, kids, tuple(range(len(kids)))): prob for kids, prob in law.items()}


def node_set(root: Node) -> frozenset:
    """Every node of a tree as its token path (the root is ``()``)."""
    out = {()}
    stack = [((), root)]
    while stack:
        prefix, node = stack.pop()
        for child in node.children:
            out.add(prefix + (child.token,))
            stack.append((prefix + (child.token,), child))
    return frozenset(out)
