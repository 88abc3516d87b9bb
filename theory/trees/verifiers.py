"""Verifiers on draft trees and the exact law of one iteration (docs/trees.md).

Tree laws and realised trees are :mod:`theory.trees.tree_shapes`. A verifier returns an accepted
node (its path, length τ) and one extra token Y; the output is ``O = path + Y``. Verifiers
(:data:`VERIFIERS`), each in the variant its tree law needs:

- ``specinfer``: recursive rejection sampling down the tree (Miao et al. 2024): at each node
  the draws are walked with RRS (as :func:`theory.trees.multidraft.rrs`: with replacement for i.i.d.
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

:func:`iteration_law` sums a verifier's law over every realised tree; :func:`validity_residual`
is THEORY.md §4's validity check on it (exactly 0 for a lossless verifier on an exact pair).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from specbatch.errors import require
from specbatch.theory.exact.enumeration import block_thresholds_exact, path_stats_exact
from specbatch.theory.exact.small_models import (
    ModelPair,
    Number,
    Prefix,
    one_of,
    sequence_prob,
    zero_of,
)
from specbatch.theory.trees.multidraft import residual, without
from specbatch.theory.trees.tree_shapes import Node, Shape, tree_law

# --------------------------------------------------------------------------- verifiers


def _emit(law: dict, prefix: Prefix, mass: Number, row) -> None:
    if not mass > 0:
        return
    for y, py in enumerate(row):
        if py > 0:
            law[(prefix, y)] += mass * py


def point_mass(pair: ModelPair, token: int) -> tuple:
    """The draft row of a deterministic (top-k) child: all mass on its token."""
    return tuple(one_of(pair) if x == token else zero_of(pair) for x in range(pair.vocab))


def specinfer(pair: ModelPair, root: Node, shape: Shape, context: Prefix = ()) -> dict:
    """RRS down the tree: ``{(accepted path, Y): probability}`` given the realised tree."""
    sampling = shape.sampling if shape.kind == "branching" else "iid"
    law: dict = defaultdict(lambda: zero_of(pair))

    def walk(node: Node, prefix: Prefix, reach: Number) -> None:
        target = pair.target.row(tuple(context) + prefix)
        proposal = pair.draft.row(tuple(context) + prefix) if node.draws else target
        for i, ci in enumerate(node.draws):
            child = node.children[ci]
            if sampling == "topk":
                proposal = point_mass(pair, child.token)
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
    topk = shape.kind == "branching" and shape.sampling == "topk"
    law: dict = defaultdict(lambda: zero_of(pair))
    one, zero = one_of(pair), zero_of(pair)

    def visit(node: Node, prefix: Prefix, weight: Number, reach: Number) -> Number:
        """Process a subtree whose root has ``weight``; return the mass that rejects it."""
        target = pair.target.row(tuple(context) + prefix)
        proposal = pair.draft.row(tuple(context) + prefix) if node.children else target
        for i, child in enumerate(node.children):
            if topk:
                proposal = point_mass(pair, child.token)
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


def gbv_block(pair: ModelPair, root: Node, k: int, context: Prefix = ()) -> tuple:
    """GBV's path with block verification's weights and thresholds on its skewed rows.

    returns (path, weights ``p_0..p_L``, thresholds ``h_0..h_L`` (h_0 = 1), skew rows,
    target rows), through the exact BV statistics of :mod:`theory.exact.enumeration` (THEORY.md §3).
    """
    path, skews, targets = best_path(pair, root, k, context)
    one = one_of(pair)
    stats = path_stats_exact(path, skews, targets)
    return (path, (one,) + stats["p"], (one,) + block_thresholds_exact(stats["p"], stats["z"]),
            skews, targets)


def gbv(pair: ModelPair, root: Node, shape: Shape, context: Prefix = ()) -> dict:
    """Greedy multi-path BV: block verification on the best path with its skewed draft law."""
    require(shape.kind == "paths", "gbv: needs a 'paths' tree (K x L), got a branching tree")
    path, weights, h, skews, targets = gbv_block(pair, root, shape.paths, context)
    one, zero = one_of(pair), zero_of(pair)
    law: dict = defaultdict(lambda: zero)
    length = len(path)
    survive = one  # P(τ = i) = h_i Π_{j>i} (1 − h_j)
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

