"""The best valid verifier for a draft-tree law: an LP in the spirit of LP B (THEORY.md §4).

A verifier sees the whole realised tree (and every model row) and outputs a node of it (its
path s, |s| = τ) and one extra token y. Realised trees with the same set of nodes are
interchangeable for it, so the LP's draft side is the law of the *node set* N:

- variables ``P[N, s, y] ≥ 0`` for every node set N of positive probability, s ∈ N, y ∈ V;
- ``Σ_{s, y} P[N, s, y] = P(node set = N)``;
- validity, for every ``z ∈ V^{D+1}``: ``Σ_{k=0..D} Q(z^{k+1}) Mb(z_{k+2..D+1} | z^{k+1}) = Mb(z)``
  with ``Q(s y) = Σ_N P[N, s, y]``;
- maximise ``E[τ] = Σ |s| · P[N, s, y]``.

Summed over z the validity equations give the node-set equations' total (both are 1), so the
last z's equation is implied and left out: float laws whose totals differ in the last bit stay
feasible.

For a depth-1 tree of n drafts this is the optimal-transport LP of
:mod:`theory.trees.multidraft`; for a single chain it is LP B (optimum ``E[τ_BV]``).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from specbatch.errors import SpecbatchError
from specbatch.limits import MAX_TREE_LP_NONZEROS, check_size
from specbatch.theory.exact.lp import DEFAULT_SOLVER, LinearProgram, LPResult, solve_program
from specbatch.theory.exact.small_models import ModelPair, Prefix, sequence_prob
from specbatch.theory.trees.multidraft import solver_options
from specbatch.theory.trees.tree_shapes import Shape, node_set, tree_law
from specbatch.theory.trees.verifiers import (
    depth_acceptance,
    expected_accepted,
    iteration_law,
    validity_residual,
    verifiers_for,
)

#: Refuse tree LPs with more variables than this.
MAX_TREE_LP_VARIABLES = 200_000


def node_set_law(trees: dict) -> dict:
    """``{frozenset of node paths: probability}`` from ``{root: probability}``."""
    out: dict = defaultdict(float)
    for root, prob in trees.items():
        out[node_set(root)] += float(prob)
    return dict(out)


def lp_nonzeros(vocab: int, depth: int, sets: list) -> int:
    """An upper bound on the LP's constraint coefficients, counted before any is built: each
    (node set N, node s ∈ N) has V outputs y, each in V^(D − |s|) validity equations (one per
    tail of s y), plus one node-set coefficient."""
    return sum(vocab ** (depth + 1 - len(s)) + vocab for key in sets for s in key)


def tree_program(pair: ModelPair, depth: int, sets: dict, context: Prefix = ()) -> LinearProgram:
    """The LP above as arrays; variables in the order (node set, sorted node path, y)."""
    vocab = pair.vocab
    context = tuple(context)
    keys = list(sets)
    variables = [(g, s, y) for g, key in enumerate(keys) for s in sorted(key) for y in range(vocab)]
    if len(variables) > MAX_TREE_LP_VARIABLES:
        raise SpecbatchError(f"tree LP: {len(variables)} variables, above the limit of "
                             f"{MAX_TREE_LP_VARIABLES}; use a smaller vocabulary or tree")
    check_size("tree LP", lp_nonzeros(vocab, depth, keys), MAX_TREE_LP_NONZEROS,
               "constraint coefficients (Σ over node sets N and nodes s of V^(D+1-|s|))",
               "use a smaller vocabulary or tree")
    rows, cols, vals = [], [], []
    for j, (g, _, _) in enumerate(variables):
        rows.append(g)
        cols.append(j)
        vals.append(1.0)
    z_index = {z: len(keys) + i
               for i, z in enumerate(itertools.product(range(vocab), repeat=depth + 1))}
    for j, (_, s, y) in enumerate(variables):
        head = s + (y,)
        for tail in itertools.product(range(vocab), repeat=depth + 1 - len(head)):
            coef = float(sequence_prob(pair.target, tail, context + head))
            if coef != 0.0:
                rows.append(z_index[head + tail])
                cols.append(j)
                vals.append(coef)
    last = len(keys) + len(z_index) - 1  # implied by the others: dropped
    kept = [i for i, r in enumerate(rows) if r != last]
    rows, cols, vals = ([v[i] for i in kept] for v in (rows, cols, vals))
    b = [sets[k] for k in keys] + [float(sequence_prob(pair.target, z, context))
                                   for z in list(z_index)[:-1]]
    a_eq = sp.csr_matrix((vals, (rows, cols)), shape=(last, len(variables)))
    c = np.array([float(len(s)) for _, s, _ in variables])
    return LinearProgram(c, a_eq, np.array(b), (len(variables),))


def solve_tree_lp(pair: ModelPair, shape: Shape, context: Prefix = (), trees: dict | None = None,
                  solver: str = DEFAULT_SOLVER) -> LPResult:
    """The best valid verifier's ``E[τ]`` for a tree law (``trees``: from :func:`tree_law`)."""
    trees = tree_law(pair, shape, context) if trees is None else trees
    return solve_program(tree_program(pair, shape.depth, node_set_law(trees), context), solver,
                         solver_options(solver))


def tree_report(pair: ModelPair, shape: Shape, solver: str = DEFAULT_SOLVER) -> dict:
    """Every tree verifier's E[τ], per-depth acceptance and validity residual, and the LP."""
    trees = tree_law(pair, shape)
    best = solve_tree_lp(pair, shape, trees=trees, solver=solver)
    out: dict = {"vocab": pair.vocab, "tree": shape.describe(), "kind": shape.kind,
                 "depth": shape.depth, "exact": pair.exact, "realised_trees": len(trees),
                 "lp_valid": best.value, "solver": best.solver, "verifiers": {}}
    fractions: dict = {}
    for name in verifiers_for(shape):
        law = iteration_law(pair, shape, name, trees=trees)
        tau = expected_accepted(law)
        out["verifiers"][name] = {
            "expected_accepted": float(tau), "gap_to_lp": best.value - float(tau),
            "residual": float(validity_residual(pair, law, shape.depth)),
            "depth_acceptance": [float(v) for v in depth_acceptance(law, shape.depth)]}
        if pair.exact:
            fractions[name] = str(Fraction(tau))
    if pair.exact:
        out["fractions"] = fractions
    return out
