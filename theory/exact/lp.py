"""The two optimisation problems of THEORY.md §4, built as sparse LPs and solved with cvxpy.

**LP A** (idealised block coupling): variables ``π[x, y] ≥ 0``, ``x, y ∈ V^γ``, with marginals
``Σ_y π[x, y] = Ms(x)`` and ``Σ_x π[x, y] = Mb(y)``; maximise ``E[lcp(x, y)]``. Its optimum is
``Σ_i Σ_{x^i} min(Ms(x^i), Mb(x^i))`` (an upper bound, not reachable by a valid verifier).

**LP B** (best valid verifier, full information): variables ``P[x, k, y] ≥ 0`` (draft
``x ∈ V^γ``, ``τ = k``, extra token ``y``) with ``Σ_{k,y} P[x, k, y] = Ms(x)`` for every x and,
for every ``z ∈ V^{γ+1}``, the validity equation
``Σ_{k=0..γ} Q(z^{k+1}) · Mb(z_{k+2..γ+1} | z^{k+1}) = Mb(z)`` where
``Q(z^{k+1}) = Σ_{x: x^k = z^k} P[x, k, z_{k+1}]``; maximise ``Σ k · P[x, k, y]``.
Its optimum equals ``E[τ_BV]`` (block paper, Theorem 2).

Sizes: LP A has ``V^{2γ}`` variables, LP B ``V^γ (γ+1) V`` variables and ``V^γ + V^{γ+1}``
equalities (V = 3, γ = 3: 324 and 108). Instances above ``max_variables`` are refused.
Coefficients are float64 (exact pairs are converted); the solver's answer is a float.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.theory.exact import enumeration as exact
from specbatch.theory.exact.small_models import ModelPair, Prefix, sequence_prob

if TYPE_CHECKING:  # scipy.sparse is imported where a program is built (start-up cost)
    import scipy.sparse as sp

#: Default cap on the number of LP variables (LP A: V^(2γ); LP B: V^γ (γ+1) V).
DEFAULT_MAX_VARIABLES = 20_000

#: Default solver (cvxpy name).
DEFAULT_SOLVER = "HIGHS"


@dataclass(frozen=True, eq=False)
class LPResult:
    """Optimum of one LP: ``value``, the primal ``solution`` (shape per problem), bookkeeping."""

    value: float
    solution: np.ndarray  # LP A: [V^γ, V^γ]; LP B: [V^γ, γ+1, V]
    status: str
    solver: str
    n_variables: int
    n_constraints: int
    seconds: float


@dataclass(frozen=True, eq=False)
class LinearProgram:
    """``max c·v  s.t.  A v = b,  v ≥ 0`` in arrays (so any LP solver can take it)."""

    c: np.ndarray  # [n]
    a_eq: sp.csr_matrix  # [m, n]
    b_eq: np.ndarray  # [m]
    shape: tuple  # shape of the solution array


#: Sizes past 2^SIZE_BITS are not computed (γ = 10^6 would build a 300,000-digit integer).
SIZE_BITS = 100


def lp_a_size(vocab: int, gamma: int) -> int | None:
    """LP A's variables V^(2γ), or None when above 2^SIZE_BITS."""
    return _power(vocab, 2 * gamma)


def lp_b_size(vocab: int, gamma: int) -> int | None:
    """LP B's variables V^γ (γ + 1) V, or None when above 2^SIZE_BITS."""
    base = _power(vocab, gamma + 1)
    return None if base is None or (gamma + 1).bit_length() + base.bit_length() > SIZE_BITS \
        else base * (gamma + 1)


def _power(vocab: int, exponent: int) -> int | None:
    if exponent * math.log2(max(vocab, 2)) > SIZE_BITS:
        return None
    return vocab**exponent


def _check_size(name: str, n: int | None, vocab: int, gamma: int, limit: int) -> None:
    if n is None or n > limit:
        shown = f"more than 2^{SIZE_BITS}" if n is None else str(n)
        raise SpecbatchError(
            f"{name}: instance has {shown} variables (V={vocab}, γ={gamma}), above the limit of "
            f"{limit} variables; use a smaller V or γ, or raise the limit (--max-variables)"
        )


def _f(v) -> float:
    return float(v)


def _drafts(vocab: int, gamma: int) -> list:
    return list(itertools.product(range(vocab), repeat=gamma))


def _lcp(x: tuple, y: tuple) -> int:
    n = 0
    for a, b in zip(x, y):
        if a != b:
            break
        n += 1
    return n


def lp_a_program(pair: ModelPair, gamma: int, context: Prefix = (),
                 max_variables: int = DEFAULT_MAX_VARIABLES) -> LinearProgram:
    """LP A as arrays: variable ``π[x, y]`` at index ``x_index · V^γ + y_index``."""
    require(gamma >= 1, f"gamma: expected >= 1, got {gamma}")
    _check_size("LP A", lp_a_size(pair.vocab, gamma), pair.vocab, gamma, max_variables)
    drafts = _drafts(pair.vocab, gamma)
    n = len(drafts)
    ms = np.array([_f(sequence_prob(pair.draft, x, context)) for x in drafts])
    mb = np.array([_f(sequence_prob(pair.target, x, context)) for x in drafts])
    lcp = np.array([[_lcp(x, y) for y in drafts] for x in drafts], dtype=np.float64)
    idx = np.arange(n * n).reshape(n, n)
    rows = np.concatenate([np.repeat(np.arange(n), n), n + np.tile(np.arange(n), n)])
    cols = np.concatenate([idx.ravel(), idx.ravel()])
    import scipy.sparse as sp

    a_eq = sp.csr_matrix((np.ones(2 * n * n), (rows, cols)), shape=(2 * n, n * n))
    return LinearProgram(lcp.ravel(), a_eq, np.concatenate([ms, mb]), (n, n))


def lp_b_program(pair: ModelPair, gamma: int, context: Prefix = (),
                 max_variables: int = DEFAULT_MAX_VARIABLES) -> LinearProgram:
    """LP B as arrays: variable ``P[x, k, y]`` at index ``(x_index (γ+1) + k) V + y``."""
    require(gamma >= 1, f"gamma: expected >= 1, got {gamma}")
    vocab = pair.vocab
    _check_size("LP B", lp_b_size(vocab, gamma), vocab, gamma, max_variables)
    drafts = _drafts(vocab, gamma)
    n_x = len(drafts)
    n = n_x * (gamma + 1) * vocab
    context = tuple(context)

    def var(xi: int, k: int, y: int) -> int:
        return (xi * (gamma + 1) + k) * vocab + y

    rows, cols, vals = [], [], []
    b = []
    # Σ_{k,y} P[x, k, y] = Ms(x)
    for xi, x in enumerate(drafts):
        for k in range(gamma + 1):
            for y in range(vocab):
                rows.append(xi)
                cols.append(var(xi, k, y))
                vals.append(1.0)
        b.append(_f(sequence_prob(pair.draft, x, context)))
    # validity: Σ_k Σ_{x: x^k = z^k} P[x, k, z_{k+1}] Mb(z_{k+2..} | z^{k+1}) = Mb(z)
    row = n_x
    for z in itertools.product(range(vocab), repeat=gamma + 1):
        for k in range(gamma + 1):
            coef = _f(sequence_prob(pair.target, z[k + 1:], context + z[: k + 1]))
            if coef == 0.0:
                continue
            # drafts with x^k = z^k form a contiguous block of V^(γ-k) indices
            base = 0
            for t in z[:k]:
                base = base * vocab + t
            width = vocab ** (gamma - k)
            for xi in range(base * width, (base + 1) * width):
                rows.append(row)
                cols.append(var(xi, k, z[k]))
                vals.append(coef)
        b.append(_f(sequence_prob(pair.target, z, context)))
        row += 1
    import scipy.sparse as sp

    a_eq = sp.csr_matrix((vals, (rows, cols)), shape=(row, n))
    c = np.tile(np.repeat(np.arange(gamma + 1, dtype=np.float64), vocab), n_x)
    return LinearProgram(c, a_eq, np.array(b), (n_x, gamma + 1, vocab))


def solve_program(program: LinearProgram, solver: str = DEFAULT_SOLVER,
                  options: dict | None = None) -> LPResult:
    """Maximise ``c·v`` s.t. ``A v = b``, ``v ≥ 0`` with cvxpy and the named solver.

    ``options``: extra keyword arguments for the solver (e.g. HiGHS's ``presolve``).
    """
    import cvxpy as cp

    name = solver.upper()
    require(name in cp.installed_solvers(),
            f"solver: expected one of {cp.installed_solvers()}, got {solver!r}")
    v = cp.Variable(program.c.shape[0], nonneg=True)
    problem = cp.Problem(cp.Maximize(program.c @ v), [program.a_eq @ v == program.b_eq])
    start = time.perf_counter()
    try:
        problem.solve(solver=name, **(options or {}))
    except cp.error.SolverError as exc:
        raise SpecbatchError(f"solver {name}: failed: {exc}") from None
    seconds = time.perf_counter() - start
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or v.value is None:
        raise SpecbatchError(f"solver {name}: status {problem.status}")
    return LPResult(float(problem.value), np.asarray(v.value).reshape(program.shape),
                    str(problem.status), name, int(program.c.shape[0]),
                    int(program.a_eq.shape[0]), seconds)


def solve_lp_a(pair: ModelPair, gamma: int, solver: str = DEFAULT_SOLVER, context: Prefix = (),
               max_variables: int = DEFAULT_MAX_VARIABLES) -> LPResult:
    """LP A's optimum and coupling ``π`` [V^γ, V^γ] (drafts in lexicographic order)."""
    return solve_program(lp_a_program(pair, gamma, context, max_variables), solver)


def solve_lp_b(pair: ModelPair, gamma: int, solver: str = DEFAULT_SOLVER, context: Prefix = (),
               max_variables: int = DEFAULT_MAX_VARIABLES) -> LPResult:
    """LP B's optimum (= E[τ_BV]) and verifier ``P[x, k, y]`` [V^γ, γ+1, V]."""
    return solve_program(lp_b_program(pair, gamma, context, max_variables), solver)


def verify_pair(pair, gamma: int, solver: str = "HIGHS", max_variables: int | None = None
                ) -> dict:
    """E[τ] under TV and BV (exact enumeration), LP A and LP B optima and the validity residuals of
    THEORY.md §4 for one pair at draft length γ, as floats, plus exact strings for exact pairs."""
    require(gamma >= 1, f"--gamma: expected an integer >= 1, got {gamma}")
    limit = DEFAULT_MAX_VARIABLES if max_variables is None else max_variables
    # refuse before any enumeration: the exact laws below walk all V^γ drafts, and LP A,
    # the larger program (V^{2γ} variables), bounds that work too
    _check_size("LP B", lp_b_size(pair.vocab, gamma), pair.vocab, gamma, limit)
    _check_size("LP A", lp_a_size(pair.vocab, gamma), pair.vocab, gamma, limit)
    token = exact.expected_tau(pair, gamma, "token")
    block = exact.expected_tau(pair, gamma, "block")
    res_t = exact.validity_residual(pair, gamma, "token")
    res_b = exact.validity_residual(pair, gamma, "block")
    lp_b = solve_lp_b(pair, gamma, solver=solver, max_variables=limit)
    lp_a = solve_lp_a(pair, gamma, solver=solver, max_variables=limit)
    out = {"vocab": pair.vocab, "gamma": gamma, "exact": pair.exact,
           "token": float(token), "block": float(block),
           "lp_valid": lp_b.value, "lp_joint": lp_a.value,
           "residual_token": float(res_t), "residual_block": float(res_b),
           "joint_closed_form": float(exact.lp_joint_formula(pair, gamma)),
           "solver": lp_b.solver}
    if pair.exact:
        out["fractions"] = {"token": str(Fraction(token)), "block": str(Fraction(block)),
                            "joint_closed_form": str(exact.lp_joint_formula(pair, gamma)),
                            "residual_token": str(res_t), "residual_block": str(res_b)}
    return out
