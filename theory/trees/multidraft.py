"""Several drafts of one token: the verifiers, their exact laws, and the optimum (docs/trees.md).

Setting: target row ``p`` and draft row ``q`` over V tokens (one context), ``n`` drafts
``X_1..X_n``. A verifier outputs one token ``Y``; it *accepts* when ``Y`` is one of the drafts.
It is lossless iff ``Y ~ p`` exactly. Rows are tuples of ``Fraction`` (exact) or ``float``.

Draft laws (:func:`draft_law`): i.i.d. from q ("with replacement", SpecInfer, SpecTr), or
sequentially without replacement (each draft from q restricted to the tokens not drawn yet,
renormalised; Jeon et al. 2024, *Recursive Speculative Decoding*).

Verifiers (each returns, for one draft tuple, the accepted and the fallback mass per token):

- :func:`rrs`: recursive rejection sampling (SpecInfer, Miao et al. 2024). Walk the drafts;
  accept ``X_i`` with ``min(1, p_i(X_i)/q_i(X_i))``; on rejection ``p_{i+1} ∝ max(p_i − q_i, 0)``.
  ``q_i = q`` for i.i.d. drafts; without replacement ``q_i`` is q without the earlier drafts.
- :func:`spectr`: SpecTr's k-sequential selection (Sun et al. 2023): accept ``X_i`` with
  ``min(1, p(X_i)/(ρ q(X_i)))``; if none, ``Y ~ p_res`` with
  ``p_res = (p − min(q, p/ρ)·(1 − (1 − β)^n)/β) / (1 − β)^n``, ``β = Σ min(q, p/ρ)``. Valid iff
  ``p_res ≥ 0``, which holds for ``ρ ≥ ρ*``; :func:`spectr_rho` finds the smallest such ρ
  (``ρβ(ρ) − 1 + (1 − β(ρ))^n`` is non-decreasing in ρ) by bisection on exact rationals.

Optimum (Khisti et al., ICLR 2025; Hu et al., ICLR 2025): the best acceptance over all valid
verifiers is the optimal-transport LP (:func:`ot_program`: couplings of the draft tuple and Y
with marginals ``Q`` and ``p``, maximise ``P(Y ∈ {X_i})``). For i.i.d. drafts its value is
``α* = min over token sets H of [p(H) + 1 − q(H)^n]`` (a min-cut: all drafts in H and Y ∉ H
cannot accept), and the minimum is reached on a prefix of the tokens sorted by ``p/q``
ascending (:func:`alpha_star`, O(V log V)); :func:`alpha_star_bruteforce` checks it over all
2^V sets.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.limits import ALLOW_ENV, allowed
from specbatch.theory.exact.lp import LinearProgram, solve_program

Probs = tuple
SAMPLINGS = ("iid", "distinct")

#: Largest OT LP (V^n draft tuples times V outputs) an exact comparison may build: HiGHS
#: takes seconds at 2 x 10^4 variables and minutes beyond 5 x 10^4 (3^10: over 40 s for V = 3,
#: n = 9; n = 10 did not finish in minutes); SPECBATCH_ALLOW_LARGE=1 lifts it.
MAX_LP_VARIABLES = 20_000

#: Bisection steps for SpecTr's ρ: ρ lands within (n − 1)·2^-48 above the smallest valid ρ.
RHO_STEPS = 48


@dataclass(frozen=True)
class DraftOutcome:
    """One draft tuple's verifier outcome: mass per token reached by acceptance / by fallback."""

    accepted: Probs  # [V] P(Y = y, Y accepted as a draft | drafts)
    fallback: Probs  # [V] P(Y = y, all drafts rejected | drafts)

    def acceptance(self):
        return sum(self.accepted, self.accepted[0] * 0)


def _zero(row: Probs):
    return row[0] * 0


def _normalise(row: Probs) -> Probs:
    total = sum(row, _zero(row))
    return tuple(v / total for v in row)


def residual(target: Probs, draft: Probs) -> Probs:
    """``max(target − draft, 0)`` normalised; ``target`` itself when the residual has no mass."""
    res = tuple(max(t - d, _zero(target)) for t, d in zip(target, draft))
    return _normalise(res) if sum(res, _zero(target)) > 0 else target


def without(row: Probs, token: int) -> Probs:
    """``row`` with ``token`` removed and renormalised (the next draw without replacement)."""
    out = tuple(_zero(row) if i == token else v for i, v in enumerate(row))
    return _normalise(out) if sum(out, _zero(row)) > 0 else out


# --------------------------------------------------------------------------- draft laws


def draft_law(q: Probs, n: int, sampling: str = "iid") -> dict:
    """``{drafts tuple: probability}`` of n drafts from q, i.i.d. or without replacement.

    Without replacement the tuple stops early when q has fewer than n tokens of positive mass.
    """
    require(sampling in SAMPLINGS, f"sampling: expected one of {list(SAMPLINGS)}, got {sampling!r}")
    require(n >= 1, f"drafts: expected >= 1, got {n}")
    law: dict = {(): q[0] * 0 + 1}
    for _ in range(n):
        nxt: dict = {}
        for drafts, mass in law.items():
            row = q
            if sampling == "distinct":
                for t in drafts:
                    row = without(row, t)
            if not sum(row, _zero(q)) > 0:
                nxt[drafts] = nxt.get(drafts, 0) + mass
                continue
            for x, qx in enumerate(row):
                if qx > 0:
                    nxt[drafts + (x,)] = nxt.get(drafts + (x,), 0) + mass * qx
        law = nxt
    return law


# --------------------------------------------------------------------------- verifiers


def rrs(p: Probs, q: Probs, drafts: tuple, sampling: str = "iid") -> DraftOutcome:
    """SpecInfer's recursive rejection sampling on one draft tuple (module docstring)."""
    zero = _zero(p)
    accepted = [zero] * len(p)
    target, proposal, reach = p, q, zero + 1
    for i, x in enumerate(drafts):
        a = min(zero + 1, target[x] / proposal[x])
        accepted[x] += reach * a
        reach = reach * (1 - a)
        if not reach > 0:
            break
        target = residual(target, proposal)
        if sampling == "distinct" and i + 1 < len(drafts):
            proposal = without(proposal, x)
    return DraftOutcome(tuple(accepted), tuple(reach * t for t in target))


def _beta(p: Probs, q: Probs, rho) -> object:
    return sum((min(qx, px / rho) for px, qx in zip(p, q)), _zero(p))


def spectr_rho(p: Probs, q: Probs, n: int):
    """Smallest ρ in [1, n] with ``ρβ(ρ) ≥ 1 − (1 − β(ρ))^n`` (SpecTr's valid ρ), by bisection.

    The left side minus the right is non-decreasing in ρ and non-negative at ρ = n (Bernoulli's
    inequality), so bisection keeps a valid upper end. Exact rows give an exact rational ρ.
    """
    one = _zero(p) + 1

    def valid(rho) -> bool:
        beta = _beta(p, q, rho)
        return rho * beta >= 1 - (1 - beta) ** n

    if valid(one):
        return one
    lo, hi = one, one * n
    for _ in range(RHO_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if valid(mid) else (mid, hi)
    return hi


def spectr(p: Probs, q: Probs, drafts: tuple, rho=None) -> DraftOutcome:
    """SpecTr's k-sequential selection on one i.i.d. draft tuple (module docstring)."""
    n = len(drafts)
    rho = spectr_rho(p, q, n) if rho is None else rho
    zero = _zero(p)
    accepted = [zero] * len(p)
    reach = zero + 1
    for x in drafts:
        a = min(zero + 1, p[x] / (rho * q[x]))
        accepted[x] += reach * a
        reach = reach * (1 - a)
    beta = _beta(p, q, rho)
    miss = (1 - beta) ** n
    if not miss > 0:
        return DraftOutcome(tuple(accepted), tuple(zero for _ in p))
    scale = sum(((1 - beta) ** j for j in range(n)), zero)  # (1 − (1 − β)^n) / β
    p_res = tuple((px - min(qx, px / rho) * scale) / miss for px, qx in zip(p, q))
    return DraftOutcome(tuple(accepted), tuple(reach * v for v in p_res))


#: Verifier name -> (function of (p, q, drafts), draft sampling it needs).
VERIFIERS: dict[str, tuple[Callable, str]] = {
    "specinfer": (lambda p, q, d: rrs(p, q, d, "iid"), "iid"),
    "specinfer_without_replacement": (lambda p, q, d: rrs(p, q, d, "distinct"), "distinct"),
    "spectr": (spectr, "iid"),
}


def verifier_law(p: Probs, q: Probs, n: int, name: str) -> tuple:
    """Exact ``(acceptance probability, law of Y)`` of a named verifier over all draft tuples."""
    require(name in VERIFIERS, f"verifier: expected one of {list(VERIFIERS)}, got {name!r}")
    fn, sampling = VERIFIERS[name]
    zero = _zero(p)
    if name == "spectr":
        rho = spectr_rho(p, q, n)
        fn = lambda p_, q_, d: spectr(p_, q_, d, rho)  # noqa: E731  one ρ for every tuple
    law = [zero] * len(p)
    accept = zero
    for drafts, mass in draft_law(q, n, sampling).items():
        out = fn(p, q, drafts)
        accept += mass * out.acceptance()
        for y in range(len(p)):
            law[y] += mass * (out.accepted[y] + out.fallback[y])
    return accept, tuple(law)


def law_residual(law: Probs, p: Probs):
    """``max_y |P(Y = y) − p(y)|``: exactly 0 for a lossless verifier on exact rows."""
    return max(abs(a - b) for a, b in zip(law, p))


# --------------------------------------------------------------------------- the optimum


def alpha_star(p: Probs, q: Probs, n: int):
    """``α* = min_H [p(H) + 1 − q(H)^n]`` over prefixes of the tokens sorted by p/q ascending.

    Tokens with q = 0 sort last (ratio ∞). O(V log V): one sort, then running sums.
    """
    require(n >= 1, f"drafts: expected >= 1, got {n}")
    order = sorted(range(len(p)), key=lambda x: (q[x] == 0, p[x] / q[x] if q[x] > 0 else 0))
    zero = _zero(p)
    best = zero + 1  # H = ∅
    ph, qh = zero, zero
    for x in order:
        ph, qh = ph + p[x], qh + q[x]
        best = min(best, ph + 1 - qh ** n)
    return best


def alpha_star_bruteforce(p: Probs, q: Probs, n: int):
    """The same minimum over all 2^V token sets (a check of :func:`alpha_star`, small V only)."""
    zero = _zero(p)
    best = zero + 1
    for size in range(1, len(p) + 1):
        for h in itertools.combinations(range(len(p)), size):
            best = min(best, sum((p[x] for x in h), zero) + 1 - sum((q[x] for x in h), zero) ** n)
    return best


def ot_program(p: Probs, drafts: dict) -> LinearProgram:
    """The optimal-transport LP over a draft law ``{tuple: probability}``.

    Variables ``π[d, y] ≥ 0`` (draft tuple d, output y) at index ``d_index · V + y``;
    ``Σ_y π[d, y] = Q(d)``, ``Σ_d π[d, y] = p(y)``; maximise ``Σ π[d, y]·[y ∈ d]``. The last
    output's equation is implied by the others (both marginals sum to 1) and left out, so float
    marginals whose sums differ in the last bit do not make the program infeasible.
    """
    vocab = len(p)
    keys = list(drafts)
    n = len(keys) * vocab
    rows = np.concatenate([np.repeat(np.arange(len(keys)), vocab),
                           len(keys) + np.tile(np.arange(vocab), len(keys))])
    cols = np.concatenate([np.arange(n), np.arange(n)])
    keep = rows < len(keys) + vocab - 1
    import scipy.sparse as sp  # here, not at import: start-up cost of every simulate

    a_eq = sp.csr_matrix((np.ones(2 * n)[keep], (rows[keep], cols[keep])),
                         shape=(len(keys) + vocab - 1, n))
    b_eq = np.array([float(drafts[k]) for k in keys] + [float(v) for v in p[:-1]])
    c = np.array([1.0 if y in d else 0.0 for d in keys for y in range(vocab)])
    return LinearProgram(c, a_eq, b_eq, (len(keys), vocab))


def solver_options(solver: str) -> dict:
    """HiGHS without presolve: its presolve calls some feasible transport LPs with draft-tuple
    masses near 1e-15 or below infeasible; the programs here are small."""
    return {"presolve": "off"} if solver.upper() == "HIGHS" else {}


def optimal_acceptance_lp(p: Probs, q: Probs, n: int, sampling: str = "iid",
                          solver: str = "HIGHS") -> float:
    """The OT LP's optimum (the best valid verifier's acceptance) for the given draft law."""
    return solve_program(ot_program(p, draft_law(q, n, sampling)), solver,
                         solver_options(solver)).value


def compare(p: Probs, q: Probs, n: int, solver: str = "HIGHS") -> dict:
    """α*, the LPs and every verifier's acceptance and losslessness residual, for one pair."""
    require(n >= 1, f"--drafts: expected an integer >= 1, got {n}")
    if len(p) ** min(n + 1, 64) > MAX_LP_VARIABLES and not allowed():
        raise SpecbatchError(
            f"--drafts: {len(p)}^{n} draft tuples x {len(p)} outputs at V={len(p)}, above the "
            f"limit of {MAX_LP_VARIABLES} LP variables; use fewer drafts or a smaller "
            f"vocabulary, or set {ALLOW_ENV}=1 to run it anyway")
    exact = isinstance(p[0], Fraction)
    out: dict = {"vocab": len(p), "drafts": n, "exact": exact,
                 "optimal_acceptance": float(alpha_star(p, q, n)),
                 "lp": optimal_acceptance_lp(p, q, n, "iid", solver),
                 "lp_without_replacement": optimal_acceptance_lp(p, q, n, "distinct", solver),
                 "single_draft": float(sum(min(a, b) for a, b in zip(p, q))),
                 "spectr_rho": float(spectr_rho(p, q, n)), "verifiers": {}, "solver": solver}
    fractions = {"optimal_acceptance": str(alpha_star(p, q, n))}
    for name in VERIFIERS:
        accept, law = verifier_law(p, q, n, name)
        res = law_residual(law, p)
        optimum = out["optimal_acceptance"] if VERIFIERS[name][1] == "iid" \
            else out["lp_without_replacement"]
        out["verifiers"][name] = {"acceptance": float(accept), "residual": float(res),
                                  "draws": VERIFIERS[name][1],
                                  "gap_to_optimum": optimum - float(accept)}
        fractions[name] = str(accept)
    if exact:
        out["fractions"] = fractions
    return out
