"""Margins of the multi-draft and tree theorems of ``specbatch prove`` (docs/trees.md).

Each function draws ``instances`` small random exact pairs from ``rng`` and returns one margin
per instance, read by :mod:`theory.theorems` according to the theorem's kind (``error``:
|LHS − RHS|, exactly 0 on exact instances; ``slack``: RHS − LHS of an inequality). Instances
stay tiny (V <= 4 for one token, V <= 3 and at most 3 draft nodes per level for trees) so the
whole catalogue keeps running in seconds.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from specbatch.theory.exact import enumeration as exact
from specbatch.theory.exact.small_models import FORMS, random_pair, sequence_prob
from specbatch.theory.trees import lp as tree_lp
from specbatch.theory.trees import multidraft, tree_shapes
from specbatch.theory.trees import verifiers as tree

#: Tree shapes the tree theorems draw from (small enough for exact enumeration in ms).
TREE_SHAPES = ("2", "3", "2,1", "1,2", "2x1", "2x2", "3x1")
#: Samplings of branching trees the tree theorems draw from.
SAMPLINGS = ("iid", "distinct", "topk")
CHAIN_SHAPES = ("1,1", "1,1,1")


def _rows(rng: np.random.Generator) -> tuple:
    """A random exact (p, q, n): V in 2..4, n in 1..3, rows with zeros now and then."""
    vocab, n = int(rng.integers(2, 5)), int(rng.integers(1, 4))
    conc = float(rng.choice([0.3, 1.0, 3.0]))
    pair = random_pair(rng, vocab, "iid", concentration=conc, exact=True)
    return pair.target.row(()), pair.draft.row(()), n


def _tree_case(rng: np.random.Generator, shapes: tuple = TREE_SHAPES,
               samplings: tuple = SAMPLINGS) -> tuple:
    """A random exact pair and a tree law over it (shape, sampling, model form drawn)."""
    spec = shapes[int(rng.integers(len(shapes)))]
    shape = tree_shapes.parse_shape(spec, samplings[int(rng.integers(len(samplings)))])
    vocab = int(rng.integers(2, 4))
    if shape.trees_bound(vocab) > 2000:
        vocab = 2
    form = FORMS[int(rng.integers(len(FORMS)))]
    pair = random_pair(rng, vocab, form, depth=shape.depth,
                       concentration=float(rng.choice([0.3, 1.0, 3.0])), exact=True)
    return pair, shape


def multidraft_lossless(rng: np.random.Generator, instances: int) -> list:
    """Worst exact residual ``max_y |P(Y = y) − p(y)|`` over the multi-draft verifiers."""
    margins = []
    for _ in range(instances):
        p, q, n = _rows(rng)
        margins.append(max(multidraft.law_residual(multidraft.verifier_law(p, q, n, name)[1], p)
                           for name in multidraft.VERIFIERS))
    return margins


def alpha_star_closed_form(rng: np.random.Generator, instances: int) -> list:
    """|α* (sorted prefixes) − min over all sets| (exact) and |α* − OT LP| (float)."""
    margins = []
    for _ in range(instances):
        p, q, n = _rows(rng)
        fast = multidraft.alpha_star(p, q, n)
        exact_gap = abs(fast - multidraft.alpha_star_bruteforce(p, q, n))
        lp_gap = abs(float(fast) - multidraft.optimal_acceptance_lp(p, q, n))
        margins.append(max(float(exact_gap), lp_gap))
    return margins


def multidraft_below_optimum(rng: np.random.Generator, instances: int) -> list:
    """Smallest ``optimum − acceptance`` over the verifiers (α* for i.i.d. drafts, else the LP)."""
    margins = []
    for _ in range(instances):
        p, q, n = _rows(rng)
        star = multidraft.alpha_star(p, q, n)
        distinct = multidraft.optimal_acceptance_lp(p, q, n, "distinct")
        slack = []
        for name, (_, sampling) in multidraft.VERIFIERS.items():
            accept = multidraft.verifier_law(p, q, n, name)[0]
            slack.append((float(star) if sampling == "iid" else distinct) - float(accept))
        margins.append(min(slack))
    return margins


def tree_lossless(rng: np.random.Generator, instances: int) -> list:
    """Worst exact validity residual of every tree verifier on a random tree law."""
    margins = []
    for _ in range(instances):
        pair, shape = _tree_case(rng)
        trees = tree_shapes.tree_law(pair, shape)
        margins.append(max(tree.validity_residual(
            pair, tree.iteration_law(pair, shape, v, trees=trees), shape.depth)
            for v in tree.verifiers_for(shape)))
    return margins


def traversal_is_block(rng: np.random.Generator, instances: int) -> list:
    """Largest exact gap between Traversal Verification on a chain and block verification."""
    margins = []
    for _ in range(instances):
        pair, shape = _tree_case(rng, CHAIN_SHAPES, ("iid",))  # a sampled chain, as BV's
        ours: dict = {}
        for (path, y), mass in tree.iteration_law(pair, shape, "traversal").items():
            key = (len(path), path + (y,))
            ours[key] = ours.get(key, Fraction(0)) + mass
        block = exact.iteration_law(pair, shape.depth, "block")
        keys = set(ours) | set(block)
        margins.append(max(abs(ours.get(k, 0) - block.get(k, 0)) for k in keys))
    return margins


def tree_below_lp(rng: np.random.Generator, instances: int) -> list:
    """Smallest ``LP − E[τ]`` over the tree verifiers (the LP: the best valid verifier)."""
    margins = []
    for _ in range(instances):
        pair, shape = _tree_case(rng)
        trees = tree_shapes.tree_law(pair, shape)
        best = tree_lp.solve_tree_lp(pair, shape, trees=trees).value
        margins.append(min(best - float(tree.expected_accepted(
            tree.iteration_law(pair, shape, v, trees=trees))) for v in tree.verifiers_for(shape)))
    return margins


def topk_trees_are_optimal(rng: np.random.Generator, instances: int) -> list:
    """|E[τ] − Σ_{nodes s} Mb(s)| for RRS and Traversal on top-k trees, and |LP − Σ Mb(s)|.

    With deterministic distinct children a node s can be output at most with probability
    Mb(s), and RRS reaches every node with exactly that probability.
    """
    margins = []
    for _ in range(instances):
        spec = ("1,1", "2,1", "2,2", "3,1", "1,2,1")[int(rng.integers(5))]
        shape = tree_shapes.parse_shape(spec, "topk")
        pair = random_pair(rng, int(rng.integers(2, 4)), FORMS[int(rng.integers(len(FORMS)))],
                           depth=shape.depth, concentration=float(rng.choice([0.3, 1.0, 3.0])),
                           exact=True)
        root = next(iter(tree_shapes.tree_law(pair, shape)))
        bound = sum(sequence_prob(pair.target, s) for s in tree_shapes.node_set(root) if s)
        gaps = [abs(tree.expected_accepted(tree.iteration_law(pair, shape, v)) - bound)
                for v in ("specinfer", "traversal")]
        lp = tree_lp.solve_tree_lp(pair, shape).value
        margins.append(max(float(max(gaps)), abs(lp - float(bound))))
    return margins
