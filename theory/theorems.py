"""The theorem catalogue behind ``specbatch prove``: every theorem of THEORY.md §2-5, checked.

Each :class:`Theorem` is a one-sentence statement with its source and a seeded check over
random instances. A check returns a :class:`CheckResult` with the *worst margin* found, read
according to the theorem's ``kind``:

- ``"error"``: margin = max |LHS − RHS| over the instances; passes iff ``margin <= tolerance``.
  Checks on exact (Fraction) instances use tolerance 0: the margin must be exactly 0.
- ``"slack"``: margin = min (RHS − LHS) of an inequality LHS <= RHS; passes iff
  ``margin >= −tolerance``.
- ``"witness"``: margin = the largest strict gap found (a counterexample); passes iff
  ``margin > tolerance`` and no instance violates the companion inequality.

Losslessness and the identities of §2-3 are checked by exact enumeration
(:mod:`theory.exact.enumeration`) over random exact-rational pairs (all three model forms, V <= 4,
γ <= 3, rows with zeros); LP values (:mod:`theory.exact.lp`) and allocations
(:mod:`theory.allocate.budget`) are floats and use tolerances.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from specbatch.theory.allocate.budget import (
    allocation_value,
    greedy_heap,
    greedy_topc,
    optimal_dp,
    optimal_milp,
)
from specbatch.theory.exact import enumeration as exact
from specbatch.theory.exact.lp import solve_lp_a, solve_lp_b
from specbatch.theory.exact.small_models import FORMS, ModelPair, one_hot_draft, random_pair
from specbatch.theory.trees import tree_theorems as catalogue_trees
from specbatch.theory.verify.path_stats import block_weights, token_weights

#: Default number of random instances per theorem (``specbatch prove``).
DEFAULT_INSTANCES = 20

KINDS = {"error": "max |error|", "slack": "min slack", "witness": "max gap"}

BLOCK_PAPER = "Sun et al. 2025 (Block Verification), THEORY.md §3"
TETRIS_PAPER = "Wu et al. 2025 (TETRIS), THEORY.md §5"


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one theorem's check: instances tried, worst margin, verdict, detail."""

    instances: int
    margin: float
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Theorem:
    name: str
    statement: str
    source: str
    kind: str  # "error" | "slack" | "witness"
    tolerance: float
    check: Callable = field(repr=False)  # (rng, instances, theorem) -> CheckResult

    def run(self, instances: int, seed: int, index: int) -> CheckResult:
        rng = np.random.default_rng([seed, index])
        return self.check(rng, instances, self)


def _verdict(theorem: Theorem, margins: list, detail: str = "", violated: bool = False
             ) -> CheckResult:
    """Fold per-instance margins (Fractions or floats) into a :class:`CheckResult`."""
    if theorem.kind == "error":
        worst = max(margins, default=0)
        ok = worst <= theorem.tolerance
    elif theorem.kind == "slack":
        worst = min(margins, default=0)
        ok = worst >= -theorem.tolerance
    else:
        worst = max(margins, default=0)
        ok = worst > theorem.tolerance and not violated
    return CheckResult(len(margins), float(worst), bool(ok), detail)


# --------------------------------------------------------------------------- instances


def _random_case(rng: np.random.Generator, max_vocab: int = 4, max_gamma: int = 3,
                 min_gamma: int = 1, extra_depth: int = 0) -> tuple[ModelPair, int]:
    """A random exact pair (form, V, γ, concentration drawn from ``rng``) and its γ."""
    vocab = int(rng.integers(2, max_vocab + 1))
    gamma = int(rng.integers(min_gamma, max_gamma + 1))
    form = FORMS[int(rng.integers(len(FORMS)))]
    conc = float(rng.choice([0.3, 1.0, 3.0]))
    pair = random_pair(rng, vocab, form, depth=gamma + extra_depth, concentration=conc,
                       exact=True)
    return pair, gamma


def _law_gap(a: dict, b: dict) -> Fraction:
    keys = set(a) | set(b)
    return max((abs(a.get(k, 0) - b.get(k, 0)) for k in keys), default=Fraction(0))


# --------------------------------------------------------------------------- checks


def _lossless(rule: str):
    def check(rng, instances, theorem):
        margins = []
        for _ in range(instances):
            pair, gamma = _random_case(rng, extra_depth=2)
            margins.append(max(exact.validity_residual(pair, gamma, rule),
                               exact.loop_residual(pair, gamma, rule, 3)))
        return _verdict(theorem, margins)
    return check


def _tail(rule: str):
    def check(rng, instances, theorem):
        margins = []
        for _ in range(instances):
            pair, gamma = _random_case(rng)
            margins.append(exact.tail_residual(pair, gamma, rule))
        return _verdict(theorem, margins)
    return check


def _check_bv_formula(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        pair, gamma = _random_case(rng)
        margins.append(abs(exact.expected_tau(pair, gamma, "block")
                           - exact.expected_tau_formula(pair, gamma, "block")))
    return _verdict(theorem, margins)


def _check_ordering(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        pair, gamma = _random_case(rng)
        tv = float(exact.expected_tau(pair, gamma, "token"))
        bv = float(exact.expected_tau(pair, gamma, "block"))
        lp_b = solve_lp_b(pair, gamma).value
        lp_a = solve_lp_a(pair, gamma).value
        margins.append(min(bv - tv, lp_a - lp_b))
    return _verdict(theorem, margins)


def _check_lp_b(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        pair, gamma = _random_case(rng)
        margins.append(abs(solve_lp_b(pair, gamma).value
                           - float(exact.expected_tau(pair, gamma, "block"))))
    return _verdict(theorem, margins)


def _check_lp_a(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        pair, gamma = _random_case(rng)
        margins.append(abs(solve_lp_a(pair, gamma).value
                           - float(exact.lp_joint_formula(pair, gamma))))
    return _verdict(theorem, margins)


def _check_one_hot(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        pair, gamma = _random_case(rng)
        hot = one_hot_draft(pair, rng, depth=gamma)
        margins.append(_law_gap(exact.iteration_law(hot, gamma, "block"),
                                exact.iteration_law(hot, gamma, "token")))
    return _verdict(theorem, margins)


def _check_gamma_one(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        pair, _ = _random_case(rng, max_vocab=4, max_gamma=1)
        margins.append(_law_gap(exact.iteration_law(pair, 1, "block"),
                                exact.iteration_law(pair, 1, "token")))
    return _verdict(theorem, margins)


def _check_iid(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        vocab, gamma = int(rng.integers(2, 5)), int(rng.integers(1, 4))
        pair = random_pair(rng, vocab, "iid", concentration=float(rng.choice([0.3, 1.0, 3.0])),
                           exact=True)
        alpha = sum(min(s, b) for s, b in zip(pair.draft.row(()), pair.target.row(())))
        closed = (1 - alpha ** (gamma + 1)) / (1 - alpha) if alpha != 1 else Fraction(gamma + 1)
        margins.append(abs(exact.expected_tau(pair, gamma, "token") + 1 - closed))
    return _verdict(theorem, margins)


def _random_rows(rng: np.random.Generator, n: int, k: int, vocab: int = 8) -> tuple:
    """Drafted-token probabilities (q, pt) # [n, k] of random drafted paths (Dirichlet rows)."""
    draft = rng.dirichlet(np.full(vocab, 0.5), size=(n, k))  # [n, k, V]
    target = rng.dirichlet(np.full(vocab, 0.5), size=(n, k))
    u = rng.random((n, k, 1))
    tokens = np.minimum((draft.cumsum(axis=2) <= u).sum(axis=2), vocab - 1)  # [n, k]
    q = np.take_along_axis(draft, tokens[:, :, None], axis=2)[:, :, 0]
    pt = np.take_along_axis(target, tokens[:, :, None], axis=2)[:, :, 0]
    return np.maximum(q, 1e-12), pt


def _check_greedy_monotone(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        n, k = int(rng.integers(1, 7)), int(rng.integers(1, 6))
        budget = int(rng.integers(0, n * k + 2))
        values = token_weights(*_random_rows(rng, n, k))  # [n, k] non-increasing rows
        if rng.random() < 0.3:  # ties
            values = np.round(values, 1)
        optimum = allocation_value(values, optimal_milp(values, budget))
        greedy = allocation_value(values, greedy_topc(values, budget))
        heap = allocation_value(values, greedy_heap(values, budget))
        margins.append(max(abs(greedy - optimum), abs(heap - optimum)))
    return _verdict(theorem, margins)


def _check_greedy_block(rng, instances, theorem):
    margins, witness, violated = [], None, False
    tried = 0
    # keep searching (up to 50x) until a clear counterexample (gap >= 0.1) turns up
    while tried < instances or ((witness is None or witness[-1] < 0.1)
                                and tried < 50 * instances):
        tried += 1
        n, k = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        budget = int(rng.integers(1, n * k))
        values = np.round(block_weights(*_random_rows(rng, n, k)), 2)  # [n, k], may rise along j
        best_s = optimal_dp(values, budget)
        heap_s = greedy_heap(values, budget)
        best, heap = allocation_value(values, best_s), allocation_value(values, heap_s)
        gap = best - heap
        violated |= gap < -1e-9
        margins.append(gap)
        if gap > theorem.tolerance and (witness is None
                                        or (values.size, -gap) < (witness[0].size, -witness[-1])):
            witness = (values, budget, heap_s, heap, best_s, best, gap)
    detail = "no counterexample found"
    if witness is not None:
        values, budget, heap_s, heap, best_s, best, _ = witness
        detail = (f"values={values.tolist()} C={budget}: greedy s={heap_s.tolist()} "
                  f"value {heap:.4g} < optimum s={best_s.tolist()} value {best:.4g}")
    return _verdict(theorem, margins, detail, violated)


def _check_dp_milp(rng, instances, theorem):
    margins = []
    for _ in range(instances):
        n, k = int(rng.integers(1, 7)), int(rng.integers(1, 6))
        budget = int(rng.integers(0, n * k + 2))
        if rng.random() < 0.5:
            values = block_weights(*_random_rows(rng, n, k))
        else:
            values = rng.random((n, k)) * (rng.random((n, k)) < 0.7)
        dp = allocation_value(values, optimal_dp(values, budget))
        milp = allocation_value(values, optimal_milp(values, budget))
        margins.append(abs(dp - milp))
    return _verdict(theorem, margins)


def _folded(margins: Callable) -> Callable:
    """A check from a function of ``(rng, instances)`` returning per-instance margins."""
    def check(rng, instances, theorem):
        return _verdict(theorem, margins(rng, instances))
    return check


TREES = "docs/trees.md"

# --------------------------------------------------------------------------- the catalogue

CATALOGUE: tuple[Theorem, ...] = (
    Theorem("tv_lossless",
            "Token verification is lossless: one iteration then target sampling, and the whole "
            "loop's first tokens, follow the target's law exactly.",
            "Leviathan et al. 2023; THEORY.md §2, §4", "error", 0.0, _lossless("token")),
    Theorem("bv_lossless",
            "Block verification is lossless: one iteration then target sampling, and the whole "
            "loop's first tokens, follow the target's law exactly.",
            BLOCK_PAPER + ", §4", "error", 0.0, _lossless("block")),
    Theorem("tv_tail", "Under token verification P(τ ≥ i | X^i) = Π_{j≤i} min(1, r_j).",
            "THEORY.md §2", "error", 0.0, _tail("token")),
    Theorem("bv_tail", "Under block verification P(τ ≥ i | X^i) = p_i.",
            BLOCK_PAPER, "error", 0.0, _tail("block")),
    Theorem("bv_weights", "E[τ_BV] = Σ_i Σ_{x^i} w_i(x^i) with w_i = min(w_{i-1} Mb, Ms(x^i)).",
            BLOCK_PAPER, "error", 0.0, _check_bv_formula),
    Theorem("ordering", "E[τ_TV] <= E[τ_BV] = LP B <= LP A.",
            BLOCK_PAPER + ", §4", "slack", 1e-7, _check_ordering),
    Theorem("lp_b_is_bv", "LP B's optimum (best valid verifier) equals E[τ_BV].",
            "Sun et al. 2025, Theorem 2; THEORY.md §4", "error", 1e-7, _check_lp_b),
    Theorem("lp_a_closed_form", "LP A's optimum equals Σ_i Σ_{x^i} min(Ms(x^i), Mb(x^i)).",
            "THEORY.md §4", "error", 1e-7, _check_lp_a),
    Theorem("bv_tv_one_hot", "Block and token verification have the same law of (τ, output) "
            "for one-hot (deterministic) drafts.", BLOCK_PAPER, "error", 0.0, _check_one_hot),
    Theorem("bv_tv_gamma_one", "Block and token verification have the same law of (τ, output) "
            "when γ = 1.", BLOCK_PAPER, "error", 0.0, _check_gamma_one),
    Theorem("iid_formula", "With i.i.d. acceptance probability α, E[τ+1] = (1 − α^{γ+1})/(1 − α).",
            "Leviathan et al. 2023; THEORY.md §2", "error", 0.0, _check_iid),
    Theorem("greedy_optimal_monotone", "TETRIS greedy (top-C and heap) reaches the MILP "
            "optimum when values are non-increasing along each row.",
            TETRIS_PAPER, "error", 1e-9, _check_greedy_monotone),
    Theorem("greedy_suboptimal_block", "With block-verification values p_{i,j} greedy can be "
            "strictly worse than the optimum (and is never better).",
            "THEORY.md §5", "witness", 1e-9, _check_greedy_block),
    Theorem("dp_equals_milp", "The DP over requests and the MILP reach the same optimum for "
            "any non-negative values.", "THEORY.md §5", "error", 1e-9, _check_dp_milp),
    Theorem("multidraft_lossless", "With n drafts of one token, SpecInfer's recursive "
            "rejection sampling (with and without replacement) and SpecTr's k-sequential "
            "selection output exactly the target's law.",
            "Miao et al. 2024; Jeon et al. 2024; Sun et al. 2023; " + TREES, "error", 0.0,
            _folded(catalogue_trees.multidraft_lossless)),
    Theorem("alpha_star_closed_form", "The best acceptance of n i.i.d. drafts, "
            "α* = min_H [p(H) + 1 − q(H)^n], is reached on a prefix of the tokens sorted by "
            "p/q and equals the optimal-transport LP.",
            "Khisti et al. 2025; Hu et al. 2025; " + TREES, "error", 1e-7,
            _folded(catalogue_trees.alpha_star_closed_form)),
    Theorem("multidraft_below_optimum", "No multi-draft verifier accepts more often than the "
            "optimum for its draft law (α* for i.i.d. drafts).", TREES, "slack", 1e-7,
            _folded(catalogue_trees.multidraft_below_optimum)),
    Theorem("tree_lossless", "On draft trees SpecInfer's recursive rejection sampling, "
            "Traversal Verification and greedy multi-path block verification are lossless.",
            "Miao et al. 2024; Weng et al. 2025; Thomas & Pal 2026; " + TREES, "error", 0.0,
            _folded(catalogue_trees.tree_lossless)),
    Theorem("traversal_is_block_on_chain", "On a single chain Traversal Verification has "
            "block verification's law of (τ, output).", "Weng et al. 2025; " + TREES,
            "error", 0.0, _folded(catalogue_trees.traversal_is_block)),
    Theorem("tree_below_lp", "No tree verifier's E[τ] exceeds the best valid verifier for "
            "the tree law (the tree LP).", TREES, "slack", 1e-7,
            _folded(catalogue_trees.tree_below_lp)),
    Theorem("topk_trees_optimal", "On deterministic top-k trees recursive rejection sampling "
            "and Traversal Verification reach every node s with probability Mb(s), the best "
            "any valid verifier can do (= the tree LP).", TREES, "error", 1e-7,
            _folded(catalogue_trees.topk_trees_are_optimal)),
)


def run_catalogue(instances: int = DEFAULT_INSTANCES, seed: int = 0,
                  names: list | None = None) -> list[tuple[Theorem, CheckResult]]:
    """Run every theorem (or those named) on ``instances`` seeded random instances each."""
    chosen = [t for t in CATALOGUE if names is None or t.name in names]
    return [(t, t.run(instances, seed, CATALOGUE.index(t))) for t in chosen]
