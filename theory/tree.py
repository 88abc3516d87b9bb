"""Draft trees of depth >= 1: their laws, three verifiers, and exact enumeration (docs/trees.md).

A *tree* is a realised draft: a :class:`Node` per drafted token, the root standing for the
context. Three tree laws (:func:`tree_law`, from a ``shape``):

- ``branching`` ``(b_1, .., b_D)``, sampling ``iid``: every node at depth d-1 gets ``b_d``
  children drawn i.i.d. from ``Ms(·|path)`` (SpecInfer's expansion; equal tokens stay separate
  nodes);
- ``branching``, sampling ``distinct``: the children are drawn one after another without
  replacement (each from Ms restricted to the tokens not drawn yet);
- ``paths`` ``K x L``: K i.i.d. draft paths of L tokens merged into a trie (the drafting of
  SpecTr's multi-path setting and of greedy multi-path block verification); a node's children
  are its distinct next tokens in order of first appearance, and its *draws* are the next
  tokens of every path through it, with multiplicity, in path order.

A verifier returns an accepted node (its path, length τ) and one extra token Y; the output is
``O = path + Y``. Verifiers (:data:`VERIFIERS`), each in the variant its tree law needs:

- ``specinfer``: recursive rejection sampling down the tree (Miao et al. 2024): at each node
  the draws are walked with RRS (:func:`theory.multidraft.rrs`: with replacement for i.i.d.
  draws, without for ``distinct``); an accepted draw moves to its child, all rejected emit Y
  from the residual, a leaf emits Y from the target row.
- ``traversal``: Traversal Verification (Weng et al. 2025, arXiv 2505.12398), leaf to root in
  post-order: every node carries a weight ``w`` (``w_child = min(w · Mb(x)/Ms(x), 1)``, root 1),
  the first remaining leaf is accepted with probability w; a rejected leaf is deleted and its
  parent updated with BV's step: ``Z = Σ max(w Mb − Ms, 0)``, ``Mb ← max(w Mb − Ms, 0)/Z``,
  ``w ← Z/(Z + 1 − w)`` (1 when the denominator is 0), and for ``distinct`` and ``paths`` trees
  ``Ms ←`` Ms without the deleted token (the remaining children were drawn from it). On a single
  chain this is block verification step for step (THEORY.md §3).
- ``gbv``: greedy multi-path block verification (Thomas & Pal 2026, arXiv 2602.16961), ``paths``
  trees only: rank continuations lexicographically by ``Mb/Ms`` (ties by token id), take the
  highest-ranked of the K paths, and run block verification on it with the draft rows replaced
  by the law of the best of K paths (:func:`skew_row`).

Everything is exact enumeration over every realised tree (Fractions for exact pairs), so keep
V, the shape and the depth small: :data:`MAX_TREES` bounds the number of realisations.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from specbatch.errors import SpecbatchError, require
from specbatch.theory.models import ModelPair, Number, Prefix, one_of, sequence_prob, zero_of
from specbatch.theory.multidraft import draft_law, residual, without

#: Largest number of realised trees an exact enumeration may walk.
MAX_TREES = 50_000

KINDS = ("branching", "paths")

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
    require(sampling in ("iid", "distinct"),
            f"--sampling: expected 'iid' or 'distinct', got {sampling!r}")
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


def _branching(pair: ModelPair, prefix: Prefix, widths: tuple, sampling: str, cache: dict) -> dict:
    """``{children tuple: probability}`` of the subtree below the node at ``prefix``."""
    if not widths:
        return {(): one_of(pair)}
    key = (prefix, len(widths))
    if key in cache:
        return cache[key]
    out: dict = defaultdict(lambda: zero_of(pair))
    below = {}
    for tokens, mass in draft_law(pair.draft.row(prefix), widths[0], sampling).items():
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


# --------------------------------------------------------------------------- verifiers


def _emit(law: dict, prefix: Prefix, mass: Number, row) -> None:
    if not mass > 0:
        return
    for y, py in enumerate(row):
        if py > 0:
            law[(prefix, y)] += mass * py


def specinfer(pair: ModelPair, root: Node, shape: Shape, context: Prefix = ()) -> dict:
    """RRS down the tree: ``{(accepted path, Y): probability}`` given the realised tree."""
    sampling = shape.sampling if shape.kind == "branching" else "iid"
    law: dict = defaultdict(lambda: zero_of(pair))

    def walk(node: Node, prefix: Prefix, reach: Number) -> None:
        p = pair.target.row(tuple(context) + prefix)
        q = pair.draft.row(tuple(context) + prefix)
        target, proposal = p, q
        for i, ci in enumerate(node.draws):
            child = node.children[ci]
            a = min(one_of(pair), target[child.token] / proposal[child.token])
            if a > 0:
                walk(child, prefix + (child.token,), reach * a)
            reach = reach * (1 - a)
            if not reach > 0:
                return
            target = residual(target, proposal)
            if sampling == "distinct" and i + 1 < len(node.draws):
                proposal = without(proposal, child.token)
        _emit(law, prefix, reach, target)

    walk(root, (), one_of(pair))
    return dict(law)


def traversal(pair: ModelPair, root: Node, shape: Shape, context: Prefix = ()) -> dict:
    """Traversal Verification (post-order, leaf to root): ``{(path, Y): probability}``."""
    remove = shape.kind == "paths" or shape.sampling == "distinct"
    law: dict = defaultdict(lambda: zero_of(pair))
    one, zero = one_of(pair), zero_of(pair)

    def visit(node: Node, prefix: Prefix, weight: Number, reach: Number) -> Number:
        """Process a subtree whose root has ``weight``; return the mass that rejects it."""
        target = pair.target.row(tuple(context) + prefix)
        proposal = pair.draft.row(tuple(context) + prefix)
        for i, child in enumerate(node.children):
            qx = proposal[child.token]
            w_child = min(weight * target[child.token] / qx, one) if qx > 0 else zero
            reach = visit(child, prefix + (child.token,), w_child, reach)
            if not reach > 0:
                return zero
            z = sum((max(weight * b - s, zero) for s, b in zip(proposal, target)), zero)
            if z > 0:
                target = tuple(max(weight * b - s, zero) / z for s, b in zip(proposal, target))
            den = z + one - weight
            weight = z / den if den > 0 else one
            if remove and i + 1 < len(node.children):
                proposal = without(proposal, child.token)
        accept = one if not prefix else weight
        _emit(law, prefix, reach * accept, target)
        return reach * (one - accept)

    visit(root, (), one, one)
    return dict(law)


def _rank_key(target, proposal, x: int):
    return (proposal[x] == 0, target[x] / proposal[x] if proposal[x] > 0 else 0, x)


def skew_row(target, proposal, below: Number, here: Number, k: int) -> tuple:
    """Law of the next token of the best of K i.i.d. paths, given its prefix is this node.

    ``below``: probability that one path's prefix ranks strictly below this node's; ``here``:
    probability that it equals it (``Ms(prefix)``). With ``F_<(t)`` the draft mass of tokens
    ranked below t: ``[(A + X(F_<(t) + q(t)))^K − (A + X F_<(t))^K] / [(A + X)^K − A^K]``.
    """
    order = sorted(range(len(proposal)), key=lambda x: _rank_key(target, proposal, x))
    lower = {}
    run = here * 0
    for x in order:
        lower[x] = run
        run = run + proposal[x]
    den = (below + here) ** k - below ** k
    return tuple(((below + here * (lower[x] + proposal[x])) ** k
                  - (below + here * lower[x]) ** k) / den for x in range(len(proposal)))


def best_path(pair: ModelPair, root: Node, k: int, context: Prefix = ()) -> tuple:
    """GBV's chosen path and the skewed draft rows along it: (tokens, skew rows, target rows)."""
    node, prefix = root, ()
    below, here = zero_of(pair), one_of(pair)
    skews, targets = [], []
    while node.children:
        target = pair.target.row(tuple(context) + prefix)
        proposal = pair.draft.row(tuple(context) + prefix)
        skews.append(skew_row(target, proposal, below, here, k))
        targets.append(target)
        child = max(node.children, key=lambda c: _rank_key(target, proposal, c.token))
        order = sorted(range(pair.vocab), key=lambda x: _rank_key(target, proposal, x))
        below = below + here * sum((proposal[x] for x in order[:order.index(child.token)]),
                                   zero_of(pair))
        here = here * proposal[child.token]
        node, prefix = child, prefix + (child.token,)
    targets.append(pair.target.row(tuple(context) + prefix))
    return prefix, tuple(skews), tuple(targets)


def gbv(pair: ModelPair, root: Node, shape: Shape, context: Prefix = ()) -> dict:
    """Greedy multi-path BV: block verification on the best path with its skewed draft law."""
    require(shape.kind == "paths", "gbv: needs a 'paths' tree (K x L), got a branching tree")
    path, skews, targets = best_path(pair, root, shape.paths, context)
    one, zero = one_of(pair), zero_of(pair)
    weights = [one]  # p_0..p_L
    for x, s_row, t_row in zip(path, skews, targets):
        weights.append(min(weights[-1] * t_row[x] / s_row[x], one))
    law: dict = defaultdict(lambda: zero)
    # h_i = Z_{i+1}/(Z_{i+1} + 1 − p_i) for i < L, h_L = p_L; P(τ = i) = h_i Π_{j>i} (1 − h_j)
    length = len(path)
    h = [one]
    for i in range(1, length + 1):
        if i == length:
            h.append(weights[i])
            continue
        z = sum((max(weights[i] * b - s, zero) for s, b in zip(skews[i], targets[i])), zero)
        den = z + one - weights[i]
        h.append(z / den if den > 0 else one)
    survive = one
    for i in range(length, -1, -1):
        mass = survive * h[i]
        survive = survive * (one - h[i])
        if not mass > 0:
            continue
        if i == length:
            row = targets[i]
        else:
            row = tuple(max(weights[i] * b - s, zero) for s, b in zip(skews[i], targets[i]))
            total = sum(row, zero)
            row = tuple(v / total for v in row)
        _emit(law, path[:i], mass, row)
    return dict(law)


#: Verifier name -> function ``(pair, root, shape, context) -> {(path, Y): probability}``.
VERIFIERS = {"specinfer": specinfer, "traversal": traversal, "gbv": gbv}


def verifiers_for(shape: Shape) -> tuple:
    """The verifiers defined on a tree law (GBV needs K i.i.d. paths)."""
    return tuple(v for v in VERIFIERS if v != "gbv" or shape.kind == "paths")


# --------------------------------------------------------------------------- laws and checks


def iteration_law(pair: ModelPair, shape: Shape, verifier: str, context: Prefix = (),
                  trees: dict | None = None) -> dict:
    """Exact ``{(accepted path, Y): probability}`` over every realised tree."""
    require(verifier in verifiers_for(shape),
            f"verifier: expected one of {list(verifiers_for(shape))}, got {verifier!r}")
    trees = tree_law(pair, shape, context) if trees is None else trees
    out: dict = defaultdict(lambda: zero_of(pair))
    fn = VERIFIERS[verifier]
    for root, prob in trees.items():
        for key, mass in fn(pair, root, shape, context).items():
            out[key] += prob * mass
    return dict(out)


def expected_accepted(law: dict) -> Number:
    """``E[τ]``: the expected number of accepted draft tokens of an iteration law."""
    return sum((len(path) * mass for (path, _), mass in law.items()), 0 * next(iter(law.values())))


def validity_residual(pair: ModelPair, law: dict, depth: int, context: Prefix = ()) -> Number:
    """``max_z |Σ_k Q(z^{k+1}) Mb(z_{k+2..} | z^{k+1}) − Mb(z)|`` over z ∈ V^{depth+1}.

    THEORY.md §4's validity condition with ``Q(s) = P(O = s)``: exactly 0 iff one iteration
    followed by ordinary target sampling reproduces the target's law.
    """
    out: dict = defaultdict(lambda: zero_of(pair))
    for (path, y), mass in law.items():
        out[path + (y,)] += mass
    worst = zero_of(pair)
    context = tuple(context)
    for z in itertools.product(range(pair.vocab), repeat=depth + 1):
        lhs = zero_of(pair)
        for k in range(depth + 1):
            qk = out.get(z[: k + 1])
            if qk:
                lhs += qk * sequence_prob(pair.target, z[k + 1:], context + z[: k + 1])
        worst = max(worst, abs(lhs - sequence_prob(pair.target, z, context)))
    return worst


def depth_acceptance(law: dict, depth: int) -> tuple:
    """``P(τ >= d)`` for d = 1..depth (the per-depth acceptance of an iteration law)."""
    zero = 0 * next(iter(law.values()))
    return tuple(sum((m for (path, _), m in law.items() if len(path) >= d), zero)
                 for d in range(1, depth + 1))

