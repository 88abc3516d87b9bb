"""Calibrated tests with a stated power, for ``specbatch conform`` (THEORY.md §4).

Every test here has a false-alarm rate that holds at **every** sample size, not only
asymptotically (issue 31: a standard error of 0 or a chi-square tail at 20 samples is no
guarantee):

- **Law tests.** The observed counts of a law over a small alphabet are compared with the exact
  law ``p0`` by the G statistic ``G = 2 Σ c log(c / N p0)`` on *pooled* cells (cells of expected
  count below :data:`MIN_EXPECTED` pooled into one, merged into the smallest kept cell when
  itself too small; pooling depends on N and ``p0`` only, so it is part of the statistic). Its
  p-value is ``2 min(p_types, p_mc)``, the Bonferroni pair of two valid p-values:
  ``p_types = C(N+C−1, C−1) e^{−G/2}`` (the method of types: ``P(KL(p̂‖p0) ≥ t) ≤
  C(N+C−1, C−1) e^{−N t}`` and ``G = 2 N KL``), exact at any N; and Besag & Clifford's (1991)
  sequential Monte Carlo p-value: draw multinomial(N, p0) samples until :data:`MC_EXCEEDANCES`
  of them reach the observed G (p = h / l at the l-th draw) or ``draws`` are spent
  (p = (g + 1) / (draws + 1)); it is super-uniform under the null by construction. A lossless
  sampler stops after a few dozen draws; only a deviating one spends the full budget, which is
  sized so that a p-value below the smallest Holm threshold is reachable.
- **Mean accepted length.** ``H0: E[τ] ≤ LP B`` with τ ∈ [0, γ]: Hoeffding's bound and the
  empirical Bernstein bound (Maurer & Pontil 2009, Thm 4), each a finite-sample p-value, paired
  by Bonferroni. Neither divides by a sample standard error, so a batch in which every draft
  was accepted (SE 0) is no evidence at all.
- **Family.** Holm's step-down procedure over every test of every pair at the family-wise level
  α (:func:`holm`): family-wise false-alarm rate ≤ α, uniformly more powerful than Bonferroni.

**Power.** Under an alternative ``p1`` the G statistic is approximately noncentral chi-square
with noncentrality ``λ = N Σ (p1 − p0)² / p0`` over the pooled cells. For an alternative at total
variation δ from ``p0`` on the pooled cells, ``Σ d²/p0 ≥ δ² (1/P_A + 1/(1 − P_A)) ≥ 4 δ²`` (A the
cells where ``p1 > p0``; Cauchy-Schwarz on each side; equality for ``P_A = ½`` and ``d ∝ p0`` on
each side, the least favourable direction), so ``λ ≥ 4 N δ²`` whatever the shape of the bias.
Pooling can hide at most the pooled mass: ``TV_raw ≤ TV_pooled + P0(pooled)``. The *detectable
TV* (:func:`detectable_tv_law`) is the smallest δ with ``ncx2(df, 4 N δ²)`` power
:data:`POWER` at the smallest Holm threshold (halved for the Bonferroni pair), plus the pooled
mass: every deviation of at least that TV is caught with probability ≥ :data:`POWER` (to the
noncentral approximation; checked by simulation in tests/theory/conform/test_power.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

#: Cells with a smaller expected count are pooled.
MIN_EXPECTED = 5.0

#: Power at which the detectable TV is stated.
POWER = 0.95

#: Besag-Clifford stopping rule: stop once this many null statistics reach the observed one.
MC_EXCEEDANCES = 10

#: First chunk of null draws (chunks double up to the budget).
MC_FIRST_CHUNK = 64


@dataclass(frozen=True)
class FitResult:
    """One law test: G on ``df + 1`` pooled cells, its p-value, the pooled mass, null draws."""

    g: float
    df: int
    p_value: float
    pooled_mass: float
    null_draws: int


def pool_mask(law: np.ndarray, n: int) -> np.ndarray:
    """Group of every cell # [C]: kept cells get their own index, the rest one pooled index
    (merged into the smallest kept cell when the pooled expected count is below the rule)."""
    big = law * n >= MIN_EXPECTED
    group = np.full(law.shape, -1, dtype=np.int64)
    group[big] = np.arange(int(big.sum()))
    rest = law[~big].sum()
    if (~big).any():
        if rest * n >= MIN_EXPECTED or not big.any():
            group[~big] = int(big.sum())
        else:
            kept = np.flatnonzero(big)
            group[~big] = group[kept[np.argmin(law[kept])]]
    return group


def pool(counts: np.ndarray, law: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(pooled counts # [..., G], pooled probabilities # [G], pooled mass) of cells # [..., C]."""
    group = pool_mask(law, n)
    size = int(group.max()) + 1
    p = np.bincount(group, weights=law, minlength=size)
    c = np.stack([counts[..., group == j].sum(axis=-1) for j in range(size)], axis=-1)
    return c.astype(np.float64), p, float(law[law * n < MIN_EXPECTED].sum())


def g_statistic(counts: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``2 Σ c log(c / e)`` over the last axis (0 log 0 = 0).  counts # [..., G] -> [...]"""
    safe = np.where(counts > 0, counts, 1.0)
    return 2.0 * np.sum(np.where(counts > 0, counts * np.log(safe / expected), 0.0), axis=-1)


def types_p_value(g: float, n: int, cells: int) -> float:
    """An upper bound on ``P(G ≥ g)`` under the null, valid at every N (module doc): the
    smaller of the method-of-types bound ``C(N+C−1, C−1) e^{−G/2}`` and Agrawal's (2020, IEEE
    Trans. IT, Thm 1.2) ``e^{−N t} (e N t / (C−1))^{C−1}`` for ``t = G / 2N > (C−1)/N``."""
    log_count = (special.gammaln(n + cells) - special.gammaln(n + 1)
                 - special.gammaln(cells))
    log_bound = log_count - g / 2.0
    k = cells - 1
    if k >= 1 and g / 2.0 > k:
        log_bound = min(log_bound, -g / 2.0 + k * (1.0 + math.log(g / (2.0 * k))))
    return float(math.exp(min(0.0, log_bound)))


def mc_p_value(g_obs: float, n: int, p: np.ndarray, draws: int,
               rng: np.random.Generator) -> tuple[float, int]:
    """Besag-Clifford sequential Monte Carlo p-value of ``G ≥ g_obs`` under multinomial(n, p).

    returns (p-value, null draws spent)
    """
    expected = n * p
    spent, hits, chunk = 0, 0, MC_FIRST_CHUNK
    tol = 1e-9 * max(1.0, abs(g_obs))  # ties (a discrete statistic) count as exceedances
    while spent < draws:
        m = min(chunk, draws - spent)
        null = g_statistic(rng.multinomial(n, p, size=m).astype(np.float64), expected)  # [m]
        reach = np.cumsum(null >= g_obs - tol)
        if reach[-1] + hits >= MC_EXCEEDANCES:
            at = int(np.argmax(reach + hits >= MC_EXCEEDANCES))
            return MC_EXCEEDANCES / (spent + at + 1), spent + at + 1
        hits += int(reach[-1])
        spent += m
        chunk *= 2
    return (hits + 1) / (draws + 1), spent


def mc_budget(level: float) -> int:
    """Null draws needed for ``2 (g + 1) / (draws + 1)`` to fall below ``level`` at g = 0,
    with a factor 2 to spare (so the Monte Carlo resolution costs little power)."""
    return int(math.ceil(4.0 / level))


def law_test(counts: np.ndarray, law: np.ndarray, level: float,
             rng: np.random.Generator) -> FitResult:
    """Test counts # [C] against the exact law # [C]; ``level`` sizes the Monte Carlo budget.

    Cells of probability 0 are left out (a count there is an exact violation, checked by the
    caller).
    """
    counts = np.asarray(counts, dtype=np.float64)
    law = np.asarray(law, dtype=np.float64)
    positive = law > 0
    n = int(counts[positive].sum())
    if n < 1:
        return FitResult(0.0, 0, 1.0, 0.0, 0)
    p0 = law[positive] / law[positive].sum()
    c, p, pooled = pool(counts[positive], p0, n)
    df = len(p) - 1
    if df < 1:
        return FitResult(0.0, 0, 1.0, pooled, 0)
    g = float(g_statistic(c, n * p))
    p_types = types_p_value(g, n, len(p))
    if 2.0 * p_types <= level:  # decided by the exact bound alone: no draws needed
        return FitResult(g, df, 2.0 * p_types, pooled, 0)
    p_mc, spent = mc_p_value(g, n, p, mc_budget(level), rng)
    return FitResult(g, df, min(1.0, 2.0 * min(p_types, p_mc)), pooled, spent)


def detectable_tv(n: int, df: int, level: float, power: float = POWER) -> float:
    """Smallest TV on the pooled cells detected with probability ``power`` (module doc)."""
    if df < 1 or n < 1:
        return math.nan
    critical = stats.chi2.isf(level, df)
    lam = optimize.brentq(lambda x: stats.ncx2.sf(critical, df, x) - power, 1e-9, 1e9)
    return math.sqrt(lam / (4.0 * n))


def detectable_tv_law(n: int, law: np.ndarray, level: float, power: float = POWER) -> float:
    """Smallest TV from ``law`` caught with probability ``power`` by :func:`law_test` at a
    threshold ``level`` (the p-value is a Bonferroni pair: the G-test runs at ``level / 2``);
    the pooled mass is added (module doc). For a point mass every deviation emits a
    zero-probability token, caught exactly once it occurs: δ with ``1 − (1 − δ)^N = power``."""
    law = np.asarray(law, dtype=np.float64)
    p0 = law[law > 0] / law[law > 0].sum()
    group = pool_mask(p0, n)
    df = int(group.max())
    pooled = float(p0[p0 * n < MIN_EXPECTED].sum())
    if len(p0) == 1:  # a point mass: any deviation emits a token of probability 0
        return 1.0 - (1.0 - power) ** (1.0 / n)
    if df < 1:  # everything pooled: nothing is testable at this N
        return 1.0
    return min(1.0, detectable_tv(n, df, level / 2.0, power) + pooled)


def draws_for(detect: float, laws: list, level: float, limit: int,
              power: float = POWER) -> int:
    """Smallest N ≤ ``limit`` (bisection on a doubling bracket) whose detectable TV is at most
    ``detect`` for every law; ``limit + 1`` when none is."""
    def ok(n: int) -> bool:
        return all(detectable_tv_law(n, law, level, power) <= detect for law in laws)

    hi = 16
    while not ok(hi):
        if hi > limit:
            return limit + 1
        hi *= 2
    lo = hi // 2
    while hi - lo > max(1, lo // 100):  # 1 % resolution is plenty for a sample size
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi if hi <= limit else limit + 1


def holm(p_values, alpha: float) -> np.ndarray:
    """Holm's step-down rejections # [M] at family-wise level α (ties keep input order)."""
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    rejected = np.zeros(len(p), dtype=bool)
    for rank, i in enumerate(order):
        if p[i] > alpha / (len(p) - rank):
            break
        rejected[i] = True
    return rejected


def holm_threshold(m: int, alpha: float) -> float:
    """The smallest Holm threshold ``α / M``: the level power is stated at (conservative)."""
    return alpha / max(m, 1)


def mean_excess_p_value(x: np.ndarray, bound: float, upper: float) -> float:
    """p-value of ``H0: E[X] ≤ bound`` for X ∈ [0, upper] (module doc; finite-sample)."""
    x = np.asarray(x, dtype=np.float64) / upper
    n, t = len(x), float(x.mean()) - bound / upper
    if t <= 0.0 or n < 2:
        return 1.0
    hoeffding = math.exp(-2.0 * n * t * t)
    a = math.sqrt(2.0 * float(x.var(ddof=1)) / n)  # t = a √L + b L, L = ln(2/δ)
    b = 7.0 / (3.0 * (n - 1))
    root = (-a + math.sqrt(a * a + 4.0 * b * t)) / (2.0 * b)
    bernstein = min(1.0, 2.0 * math.exp(-root * root))
    return min(1.0, 2.0 * min(hoeffding, bernstein))


def total_variation(counts: np.ndarray, law: np.ndarray) -> float:
    """``½ Σ |counts/N − law|``: the observed TV distance (includes sampling noise)."""
    counts = np.asarray(counts, dtype=np.float64)
    return float(0.5 * np.abs(counts / counts.sum() - law).sum())


def noise_tv(n: int, law: np.ndarray) -> float:
    """Expected observed TV of an exact sampler, ``½ Σ sqrt(2 p (1 − p) / (π N))`` (normal
    approximation): the floor under :func:`total_variation` at sample size N."""
    law = np.asarray(law, dtype=np.float64)
    return float(0.5 * np.sum(np.sqrt(2.0 * law * (1.0 - law) / (math.pi * n))))
