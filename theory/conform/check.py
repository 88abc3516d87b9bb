"""Conformance of a rejection sampler: does it preserve the target's law, and how much of the
optimum does it accept? (THEORY.md §2-4; the engine of ``specbatch conform``.)

For every pair of :mod:`specbatch.theory.conform.pairs` the check draws drafts from the stated
draft law, calls the sampler in batches (:mod:`specbatch.theory.conform.harness`, padded or
vLLM's ragged interface) and completes each output ``O = X^τ Y`` to γ+1 tokens by ordinary
target sampling. THEORY.md §4: one iteration followed by target sampling is valid iff the law
of those γ+1 tokens is ``Mb`` exactly. The tests (:mod:`specbatch.theory.conform.power`, each
calibrated at every sample size):

- the joint law of the first m tokens, for every m = 1..γ+1, against the exact ``Mb`` prefix
  law (m = 1 sees a biased first token with V − 1 degrees of freedom; m = γ+1 sees any block-level
  bias, e.g. a wrong acceptance rule whose marginals look right);
- the mean accepted length against the best valid verifier's (Theorem 2: E[τ_BV] = LP B): a
  mean significantly above it is itself a proof of loss;
- Holm's step-down over all these tests of all pairs: family-wise false alarm ≤ α. The power
  is stated as the smallest total-variation deviation of the γ+1-token law caught with
  probability 0.95 at the draws used (``--detect δ`` chooses the draws for a given δ);
- exact checks, whose answer is deterministic: a token of target probability 0 is never
  emitted; the accepted tokens are the drafted ones; a request emits at most γ_b + 1 tokens;
  for a greedy target (temperature 0) every emitted token equals non-speculative greedy
  decoding (then the law tests are moot: the target law is a point mass).

``Ms = Mb`` with some draft rejected is reported as a *note* (a lossless sampler may reject; it
is merely not optimal), not as a loss. A sampler's output that breaks the engine contract is a
:class:`SpecbatchError` (bad input), not a verdict.
"""

from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.limits import ALLOW_ENV, allowed
from specbatch.theory.conform.harness import CaseSamples, sample_case
from specbatch.theory.conform.pairs import PairCase, draw_cases, pair_tables, tie_cases
from specbatch.theory.conform.power import (
    FitResult,
    detectable_tv_law,
    draws_for,
    holm,
    holm_threshold,
    law_test,
    mean_excess_p_value,
    noise_tv,
    total_variation,
)
from specbatch.theory.conform.samplers import Sampler
from specbatch.theory.exact import enumeration as exact
from specbatch.theory.exact import lp
from specbatch.theory.exact.small_models import ModelPair

#: Default samples per pair, family-wise level and sampler batch size.
DEFAULT_SAMPLES = 20_000
DEFAULT_ALPHA = 1e-3
DEFAULT_BATCH = 4096

#: Samples per pair above which a run is refused unless SPECBATCH_ALLOW_LARGE=1 (about an hour
#: on one CPU core for the 12 pairs; the stated power at this size is a TV of about 0.003).
MAX_SAMPLES = 5_000_000


@dataclass(frozen=True)
class LawTest:
    """The test of the joint law of the first ``m`` tokens of one pair."""

    m: int
    fit: FitResult
    rejected: bool


@dataclass(frozen=True)
class CaseResult:
    """Everything measured on one pair."""

    kind: str
    label: str
    vocab: int
    gamma: int
    samples: int
    tests: tuple  # LawTest per m = 1..γ+1 (empty for a greedy target)
    tau_p_value: float
    observed_tv: float
    noise_tv: float
    detectable_tv: float
    mean_tau: float
    tau_token: float
    tau_block: float
    lp_b: float
    violations: tuple  # one-line descriptions of failures (exact checks and rejected tests)
    notes: tuple  # one-line observations that are not a loss
    exact_tv: float | None  # exact TV from the target of a sampler whose exact law is known
    pair: dict = field(repr=False)
    observed_law: tuple = field(repr=False)  # [V^(γ+1)] frequencies
    target_law: tuple = field(repr=False)  # [V^(γ+1)] Mb(z)

    @property
    def lossy(self) -> bool:
        return bool(self.violations)

    @property
    def fit(self) -> FitResult | None:
        """The joint test of all γ+1 tokens (None for a greedy target)."""
        return self.tests[-1].fit if self.tests else None

    def worst_cells(self, k: int = 4) -> list:
        """The k output sequences with the largest |observed − exact|: (tokens, obs, exact)."""
        obs, law = np.array(self.observed_law), np.array(self.target_law)
        order = np.argsort(-np.abs(obs - law), kind="stable")[:k]
        n = self.gamma + 1
        return [(tuple(int(d) for d in np.base_repr(int(i), self.vocab).zfill(n)),
                 float(obs[i]), float(law[i])) for i in order]

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in (
            "kind", "label", "vocab", "gamma", "samples", "observed_tv", "noise_tv",
            "detectable_tv", "mean_tau", "tau_token", "tau_block", "lp_b", "lossy", "exact_tv",
            "tau_p_value")}
        fit = self.fit
        out.update(g=fit.g if fit else None, df=fit.df if fit else None,
                   p_value=fit.p_value if fit else None,
                   tests=[{"m": t.m, "g": t.fit.g, "df": t.fit.df, "p_value": t.fit.p_value,
                           "pooled_mass": t.fit.pooled_mass, "null_draws": t.fit.null_draws,
                           "rejected": t.rejected} for t in self.tests],
                   violations=list(self.violations), notes=list(self.notes), pair=self.pair,
                   worst_cells=[{"tokens": list(t), "observed": o, "exact": e}
                                for t, o, e in self.worst_cells()])
        if self.lossy:
            out["observed_law"] = list(self.observed_law)
            out["exact_law"] = list(self.target_law)
        return out


@dataclass(frozen=True)
class ConformReport:
    """The whole check: sampler, settings, one :class:`CaseResult` per pair, the verdict."""

    verifier: str
    draft: str
    interface: str
    target: str
    lossy_by_design: bool
    samples: int
    seed: int
    alpha: float
    tests: int  # size of the Holm family
    detectable_tv: float | None  # smallest TV caught with probability 0.95 (None: greedy)
    cases: tuple

    @property
    def lossy(self) -> bool:
        return any(c.lossy for c in self.cases)

    @property
    def verdict(self) -> str:
        if not self.lossy:
            return "no violation detected"
        return "lossy (by design)" if self.lossy_by_design else "LOSSY"

    @property
    def exit_code(self) -> int:
        return 1 if self.lossy else 0

    @property
    def power(self) -> dict:
        return {"detectable_tv": self.detectable_tv, "draws": self.samples,
                "false_alarm": self.alpha}

    def to_json(self) -> dict:
        return {"verifier": self.verifier, "draft": self.draft, "interface": self.interface,
                "target": self.target, "samples": self.samples, "seed": self.seed,
                "alpha": self.alpha, "tests": self.tests, "power": self.power,
                "lossy_by_design": self.lossy_by_design, "verdict": self.verdict,
                "lossy": self.lossy, "exit_code": self.exit_code,
                "max_observed_tv": (None if self.target == "greedy"
                                    else max(c.observed_tv for c in self.cases)),
                "cases": [c.to_json() for c in self.cases]}


@contextmanager
def _quiet_stdout():
    """Send file descriptor 1 to /dev/null: HiGHS prints its banner there, past sys.stdout,
    which would break ``--json``'s one object on stdout."""
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


@lru_cache(maxsize=256)
def _exact_values(pair_json: str, gamma: int) -> tuple[float, float, float]:
    """(E[τ_TV], E[τ_BV], LP B optimum) of a pair given as JSON (cached across samplers).

    LP B is NaN when HiGHS declares the instance infeasible (float rows near 0 in the
    ``degenerate`` class); E[τ_BV] equals it exactly (Theorem 2) and stands in.
    """
    from specbatch.theory.exact.small_models import pair_from_dict

    pair = pair_from_dict(json.loads(pair_json))
    if gamma == 0:
        return 0.0, 0.0, 0.0
    tv = float(exact.expected_tau_formula(pair, gamma, "token"))
    bv = float(exact.expected_tau_formula(pair, gamma, "block"))
    try:
        with _quiet_stdout():
            optimum = lp.solve_lp_b(pair, gamma).value
    except SpecbatchError:
        optimum = math.nan
    return tv, bv, optimum


def exact_values(pair: ModelPair, gamma: int) -> tuple[float, float, float]:
    """E[τ] of TV and BV by enumeration and the LP B optimum (THEORY.md §2-4)."""
    return _exact_values(json.dumps(pair.to_json(), sort_keys=True), gamma)


def best_valid(pair: ModelPair, gamma: int) -> float:
    """The largest E[τ] of any valid verifier with γ drafts (BV = LP B; the larger of the two
    computed values, so float noise in either never makes a lossless sampler look lossy)."""
    _, bv, optimum = exact_values(pair, gamma)
    return max(bv, optimum) if not math.isnan(optimum) else bv


def prefix_law(values: np.ndarray, vocab: int, gamma: int, m: int) -> np.ndarray:
    """Marginal of the first m tokens of an array over ``V^(γ+1)`` (base-V index). # [V^m]"""
    shaped = np.asarray(values).reshape((vocab,) * (gamma + 1))
    return shaped.sum(axis=tuple(range(m, gamma + 1))).ravel()


def _cases(sampler: Sampler, seed: int, kinds) -> list[PairCase]:
    cases = draw_cases(seed, sampler.draft)
    if sampler.target == "greedy":
        cases += tie_cases(seed, sampler.draft)
    return [c for c in cases if kinds is None or c.kind in kinds]


def check_settings(samples, alpha: float, batch: int, detect) -> None:
    """Refuse bad settings with a one-line error naming the argument."""
    if detect is None and (isinstance(samples, bool) or not isinstance(samples, int)
                           or samples < 2):
        raise SpecbatchError(f"--samples: expected an integer >= 2, got {samples!r}")
    if detect is None and samples > MAX_SAMPLES and not allowed():
        raise SpecbatchError(f"--samples: {samples} exceeds the limit of {MAX_SAMPLES} per pair; "
                             f"set {ALLOW_ENV}=1 to run it anyway")
    if not (isinstance(alpha, float | int) and 0.0 < alpha < 1.0):
        raise SpecbatchError(f"--alpha: expected a level in (0, 1), got {alpha}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise SpecbatchError(f"batch: expected an integer >= 1, got {batch!r}")
    if detect is not None and not (isinstance(detect, float | int) and 0.0 < detect < 1.0):
        raise SpecbatchError(f"--detect: expected a total-variation distance in (0, 1), "
                             f"got {detect}")


def _choose_draws(detect: float, laws: list, level: float) -> int:
    limit = MAX_SAMPLES if not allowed() else 10**12
    n = draws_for(detect, laws, level, limit)
    if n > limit:
        raise SpecbatchError(f"--detect: a TV of {detect:g} needs more than {limit} samples per "
                             f"pair; ask for a larger one or set {ALLOW_ENV}=1")
    return max(n, 2)


def _judge(case: PairCase, tables, raw: CaseSamples, tests: tuple, tau_p: float,
           tau_rejected: bool, sampler: Sampler, level: float) -> CaseResult:
    """One pair's :class:`CaseResult` from its raw draws and its tests' Holm decisions."""
    vocab, gamma = case.pair.vocab, case.gamma
    n = int(raw.counts.sum())
    law = tables.target_law
    violations, notes = [], []
    if raw.zero_hits:
        violations.append(f"{raw.zero_hits} emitted tokens have target probability 0")
    if raw.mismatched:
        violations.append(f"{raw.mismatched} outputs' accepted tokens differ from the draft")
    if raw.greedy_mismatched:
        d, e, g = raw.greedy_example
        violations.append(f"{raw.greedy_mismatched} of {n} outputs differ from non-speculative "
                          f"greedy decoding (e.g. draft {d}: emitted {e}, greedy {g[:len(e)]})")
    for t in tests:
        if t.rejected:
            violations.append(f"law of the first {t.m} tokens differs from the target's "
                              f"(G = {t.fit.g:.1f}, df {t.fit.df}, p = {t.fit.p_value:.2g})")
    mean = float(raw.tau.mean())
    tv_tau, bv_tau, lp_b = (exact_values(case.pair, gamma) if sampler.target == "sample"
                            else (math.nan,) * 3)
    if tau_rejected:
        violations.append(f"mean accepted length {mean:.4f} exceeds the best valid verifier's "
                          f"{bv_tau:.4f} (BV = LP B; p = {tau_p:.2g})")
    if case.kind == "identical" and (raw.tau < raw.gammas).any():
        notes.append(f"Ms = Mb but {int((raw.tau < raw.gammas).sum())} of {n} drafts were "
                     "not fully accepted (lossless, not optimal)")
    exact_tv = None
    if sampler.exact_law is not None and sampler.interface == "padded":
        exact_law = sampler.exact_law(case, tables, sampler.draft == "greedy")
        exact_tv = float(0.5 * np.abs(exact_law - law).sum())
    detectable = (detectable_tv_law(n, law, level) if sampler.target == "sample"
                  else math.nan)
    sampled = sampler.target == "sample"  # a greedy target's law is a point mass: no TV
    return CaseResult(case.kind, case.label, vocab, gamma, n, tests, tau_p,
                      total_variation(raw.counts, law) if sampled else math.nan,
                      noise_tv(n, law) if sampled else math.nan, detectable, mean,
                      tv_tau, bv_tau, lp_b, tuple(violations), tuple(notes), exact_tv,
                      case.pair.to_json(), tuple((raw.counts / n).tolist()), tuple(law.tolist()))


def _tau_p_value(case: PairCase, raw: CaseSamples) -> float:
    """p-value of ``E[τ] ≤ E[best valid(γ_b)]`` (γ_b drafts per request; finite-sample)."""
    gamma = case.gamma
    best = np.array([best_valid(case.pair, g) for g in range(gamma + 1)]) + 1e-9
    excess = raw.tau - best[raw.gammas] + gamma  # [N] in [0, 2γ]
    return mean_excess_p_value(excess, float(gamma), 2.0 * gamma)


def conform(sampler: Sampler, samples: int = DEFAULT_SAMPLES, seed: int = 0,
            alpha: float = DEFAULT_ALPHA, batch: int = DEFAULT_BATCH,
            kinds: tuple | None = None, detect: float | None = None,
            progress=None) -> ConformReport:
    """Check ``sampler`` on every pair (or the classes in ``kinds``); see the module docstring.

    ``detect``: choose the samples per pair so that a TV deviation of ``detect`` is caught with
    probability 0.95 (``samples`` is then ignored). ``progress(text)`` is told how far a long
    run has got.
    """
    check_settings(samples, alpha, batch, detect)
    cases = _cases(sampler, seed, kinds)
    if not cases:
        raise SpecbatchError(f"--only: no pair class of {list(kinds)} applies to this sampler")
    tables = [pair_tables(c) for c in cases]
    greedy = sampler.target == "greedy"
    n_tests = 0 if greedy else sum(c.gamma + 2 for c in cases)
    level = holm_threshold(n_tests, alpha)
    if detect is not None and greedy:
        raise SpecbatchError("--detect: a greedy target (temperature 0) is checked token for "
                             "token, not by a law test; give --samples instead")
    if detect is not None:
        samples = _choose_draws(detect, [t.target_law for t in tables], level)
    raws = []
    for i, (case, table) in enumerate(zip(cases, tables)):
        def told(done, i=i, label=case.label):
            if progress is not None:
                progress(f"pair {i + 1}/{len(cases)} ({label}): {done}/{samples} samples")
        raws.append(sample_case(sampler, case, table, samples, batch,
                                (seed * 1009 + i) % 2**63, progress=told))
    p_values, law_fits = [], []
    for i, (case, table, raw) in enumerate(zip(cases, tables, raws)):
        fits = []
        if not greedy:
            rng = np.random.default_rng([seed, i])
            for m in range(1, case.gamma + 2):
                v, g = case.pair.vocab, case.gamma
                fits.append(law_test(prefix_law(raw.counts, v, g, m),
                                     prefix_law(table.target_law, v, g, m), level, rng))
            fits.append(_tau_p_value(case, raw))
        law_fits.append(fits)
        p_values += [f.p_value if isinstance(f, FitResult) else f for f in fits]
    rejected = iter(holm(p_values, alpha)) if p_values else iter(())
    results = []
    for case, table, raw, fits in zip(cases, tables, raws, law_fits):
        decisions = [bool(next(rejected)) for _ in fits]
        tests = tuple(LawTest(m + 1, f, r) for m, (f, r) in enumerate(zip(fits[:-1],
                                                                          decisions[:-1])))
        tau_p, tau_rej = (fits[-1], decisions[-1]) if fits else (math.nan, False)
        results.append(_judge(case, table, raw, tests, tau_p, tau_rej, sampler, level))
    detectable = None if greedy else max(c.detectable_tv for c in results)
    return ConformReport(sampler.name, sampler.draft, sampler.interface, sampler.target,
                         sampler.lossy_by_design, samples, seed, alpha, n_tests, detectable,
                         tuple(results))
