"""Conformance of a rejection sampler: does it preserve the target's law, and how much of the
optimum does it accept? (THEORY.md §2-4; the engine of ``specbatch conform``.)

For every pair of :mod:`specbatch.theory.conform_pairs` the check draws drafts from the stated
draft law (``X^γ ~ Ms``, or the draft's argmax chain for greedy drafting), calls the sampler
in batches with the exact rows, and completes each output ``O = X^τ Y`` to γ+1 tokens by
ordinary target sampling. THEORY.md §4: one iteration followed by target sampling is valid iff
the law of those γ+1 tokens is ``Mb`` exactly, so the observed counts over ``V^(γ+1)`` are
tested against the exact ``Mb(z)``:

- a G-test at level α / (number of pairs) (Bonferroni; family-wise false alarm ≤ α) whose
  power is stated as the smallest total-variation bias it detects with probability 0.9
  (:mod:`specbatch.theory.conform_stats`);
- exact checks, whose answer is deterministic: a token of target probability 0 is never
  emitted; the accepted tokens are the drafted ones; when ``Ms = Mb`` every draft is accepted;
- the mean accepted length ``E[τ]`` against TV's exact value, BV's (Theorem 2: the best valid
  verifier's, LP B) and LP B solved: a mean above LP B by more than the one-sided
  α / (number of pairs) normal quantile of its standard error is itself a proof of loss.

A sampler's output that breaks the engine contract (type, dtype, shape, placeholder layout,
token ids) is a :class:`SpecbatchError` (bad input), not a verdict.
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
import torch
from scipy import stats as sstats

from specbatch.errors import SpecbatchError
from specbatch.theory import exact, lp
from specbatch.theory.conform_pairs import PairCase, PairTables, draw_cases, pair_tables
from specbatch.theory.conform_samplers import Sampler
from specbatch.theory.conform_stats import FitResult, g_test, noise_tv, total_variation
from specbatch.theory.models import ModelPair
from specbatch.theory.verify import sample_rows

#: Default samples per pair, family-wise level and sampler batch size.
DEFAULT_SAMPLES = 20_000
DEFAULT_ALPHA = 1e-3
DEFAULT_BATCH = 4096


@dataclass(frozen=True)
class CaseResult:
    """Everything measured on one pair."""

    kind: str
    label: str
    vocab: int
    gamma: int
    samples: int
    fit: FitResult
    observed_tv: float
    noise_tv: float
    mean_tau: float
    se_tau: float
    tau_token: float
    tau_block: float
    lp_b: float
    violations: tuple  # one-line descriptions of exact-check failures
    lossy: bool
    exact_tv: float | None  # exact TV from the target of a sampler whose exact law is known
    pair: dict = field(repr=False)
    observed_law: tuple = field(repr=False)  # [V^(γ+1)] frequencies
    target_law: tuple = field(repr=False)  # [V^(γ+1)] Mb(z)

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
            "mean_tau", "se_tau", "tau_token", "tau_block", "lp_b", "lossy", "exact_tv")}
        out.update(g=self.fit.g, df=self.fit.df, p_value=self.fit.p_value,
                   detectable_tv=self.fit.detectable_tv, pooled_mass=self.fit.pooled_mass,
                   violations=list(self.violations), pair=self.pair,
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
    lossy_by_design: bool
    samples: int
    seed: int
    alpha: float
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

    def to_json(self) -> dict:
        return {"verifier": self.verifier, "draft": self.draft, "samples": self.samples,
                "seed": self.seed, "alpha": self.alpha, "lossy_by_design": self.lossy_by_design,
                "verdict": self.verdict, "lossy": self.lossy, "exit_code": self.exit_code,
                "max_observed_tv": max(c.observed_tv for c in self.cases),
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
    from specbatch.theory.models import pair_from_dict

    pair = pair_from_dict(json.loads(pair_json))
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


def check_output(out, batch: int, gamma: int, vocab: int, name: str) -> np.ndarray:
    """Validate the engine contract; return the emitted lengths ``τ + 1`` # [batch]."""
    shape = (batch, gamma + 1)
    if not isinstance(out, torch.Tensor):
        raise SpecbatchError(f"VERIFIER {name}: returned {type(out).__name__}, expected a "
                             f"torch.int64 tensor of shape [B, γ+1] = {list(shape)}")
    if out.dtype != torch.int64 or tuple(out.shape) != shape:
        raise SpecbatchError(f"VERIFIER {name}: returned {out.dtype} of shape {list(out.shape)}, "
                             f"expected torch.int64 of shape [B, γ+1] = {list(shape)}")
    arr = out.detach().cpu().numpy()
    placeholder = arr == -1
    length = np.where(placeholder.any(axis=1), placeholder.argmax(axis=1), gamma + 1)
    after = np.arange(gamma + 1)[None, :] >= length[:, None]
    if (after != placeholder).any() or (length == 0).any():
        raise SpecbatchError(f"VERIFIER {name}: output rows must hold 1..γ+1 tokens followed "
                             "only by -1 placeholders")
    if ((arr < 0) & ~placeholder).any() or (arr >= vocab).any():
        raise SpecbatchError(f"VERIFIER {name}: token ids outside 0..{vocab - 1}")
    return length


def _complete(out: np.ndarray, length: np.ndarray, tables: PairTables, vocab: int,
              rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Complete every output to γ+1 tokens from ``Mb``; count emitted zero-probability tokens.

    returns (sequence index in base V # [batch], emitted tokens of target probability 0)
    """
    batch, n = out.shape
    code = np.zeros(batch, dtype=np.int64)
    zero_hits = 0
    rows = np.arange(batch)
    for k in range(n):
        row = tables.prefix_rows[k][code]  # [batch, V] Mb(·|prefix)
        drawn = sample_rows(row, rng)
        emitted = k < length
        token = np.where(emitted, out[:, k], drawn)
        zero_hits += int((emitted & (row[rows, token] <= 0.0)).sum())
        code = code * vocab + token
    return code, zero_hits


def run_case(sampler: Sampler, case: PairCase, samples: int, batch: int, alpha_case: float,
             seed: int, dtype=torch.float32) -> CaseResult:
    """Sample ``samples`` outputs of one pair through ``sampler`` and test them (module doc)."""
    tables = pair_tables(case)
    vocab, gamma = case.pair.vocab, case.gamma
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    counts = np.zeros(vocab ** (gamma + 1), dtype=np.int64)
    taus, zero_hits, mismatched = [], 0, 0
    for start in range(0, samples, batch):
        m = min(batch, samples - start)
        pick = rng.choice(len(tables.drafts), size=m, p=tables.draft_prob)
        tokens = torch.from_numpy(tables.drafts[pick])
        draft_rows = None if sampler.draft == "greedy" else torch.from_numpy(
            tables.draft_rows[pick]).to(dtype)
        target_rows = torch.from_numpy(tables.target_rows[pick]).to(dtype)
        try:
            out = sampler.fn(tokens, draft_rows, target_rows, generator)
        except Exception as exc:  # the sampler's own failure is bad input, told in one line
            message = " ".join(str(exc).split())[:300]
            raise SpecbatchError(f"VERIFIER {sampler.name}: raised {type(exc).__name__}: "
                                 f"{message}") from None
        length = check_output(out, m, gamma, vocab, sampler.name)
        arr = out.detach().cpu().numpy()
        accepted = np.arange(gamma)[None, :] < (length - 1)[:, None]
        mismatched += int((accepted & (arr[:, :gamma] != tables.drafts[pick])).any(axis=1).sum())
        code, hits = _complete(arr, length, tables, vocab, rng)
        zero_hits += hits
        counts += np.bincount(code, minlength=counts.size)
        taus.append(length - 1)
    exact_tv = None
    if sampler.exact_law is not None:
        law = sampler.exact_law(case, tables, sampler.draft == "greedy")
        exact_tv = float(0.5 * np.abs(law - tables.target_law).sum())
    return _judge(case, tables, counts, np.concatenate(taus), zero_hits, mismatched, alpha_case,
                  exact_tv)


def _judge(case, tables, counts, tau, zero_hits, mismatched, alpha_case,
           exact_tv=None) -> CaseResult:
    """Turn one pair's counts and τ into a :class:`CaseResult` with its violations."""
    n = int(counts.sum())
    law = tables.target_law
    fit = g_test(counts, law, alpha_case)
    tv_tau, bv_tau, lp_b = exact_values(case.pair, case.gamma)
    mean, se = float(tau.mean()), float(tau.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    violations = []
    if zero_hits:
        violations.append(f"{zero_hits} emitted tokens have target probability 0")
    if mismatched:
        violations.append(f"{mismatched} outputs' accepted tokens differ from the draft")
    if case.kind == "identical" and (tau < case.gamma).any():
        violations.append(f"Ms = Mb but {int((tau < case.gamma).sum())} of {n} drafts were "
                          "not fully accepted")
    if fit.p_value < alpha_case:
        violations.append(f"law of the first {case.gamma + 1} tokens differs from the target's "
                          f"(G = {fit.g:.1f}, df {fit.df}, p = {fit.p_value:.2g})")
    z = sstats.norm.isf(alpha_case)
    best = bv_tau if math.isnan(lp_b) else lp_b
    if mean > best + max(z * se, 1e-9):
        violations.append(f"mean accepted length {mean:.4f} exceeds the best valid verifier's "
                          f"{best:.4f} (LP B) by {(mean - best) / max(se, 1e-12):.1f} SE")
    return CaseResult(case.kind, case.label, case.pair.vocab, case.gamma, n, fit,
                      total_variation(counts, law), noise_tv(n, law), mean, se, tv_tau, bv_tau,
                      lp_b, tuple(violations), bool(violations), exact_tv, case.pair.to_json(),
                      tuple((counts / n).tolist()), tuple(law.tolist()))


def conform(sampler: Sampler, samples: int = DEFAULT_SAMPLES, seed: int = 0,
            alpha: float = DEFAULT_ALPHA, batch: int = DEFAULT_BATCH,
            kinds: tuple | None = None) -> ConformReport:
    """Check ``sampler`` on every pair (or the classes in ``kinds``); see the module docstring."""
    if samples < 2:
        raise SpecbatchError(f"--samples: expected an integer >= 2, got {samples}")
    if batch < 1:
        raise SpecbatchError(f"batch: expected >= 1, got {batch}")
    cases = [c for c in draw_cases(seed, sampler.draft) if kinds is None or c.kind in kinds]
    alpha_case = alpha / len(cases)
    results = tuple(run_case(sampler, case, samples, batch, alpha_case, seed * 1009 + i)
                    for i, case in enumerate(cases))
    return ConformReport(sampler.name, sampler.draft, sampler.lossy_by_design, samples, seed,
                         alpha, results)
