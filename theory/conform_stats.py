"""Goodness of fit with a stated power, for ``specbatch conform`` (THEORY.md §4).

The emitted law is tested against the exact target law by a G-test (likelihood ratio), cells
of expected count below :data:`MIN_EXPECTED` pooled into one cell (and that cell merged into
the smallest kept one when it is itself too small).

Power: under an alternative law ``p1`` the statistic is approximately noncentral chi-square
with noncentrality ``λ = N Σ (p1 − p0)² / p0`` over the pooled cells. For any alternative at
total-variation distance δ from ``p0``, ``Σ d² / p0 ≥ δ² (1/P_A + 1/(1 − P_A)) ≥ 4 δ²`` (A the
cells where ``p1 > p0``, Cauchy-Schwarz on each side), so ``λ ≥ 4 N δ²`` whatever the shape of
the bias. The *detectable TV* is the smallest δ whose worst-case ``λ = 4 N δ²`` gives the test
power :data:`POWER` at level α: every bias of at least that TV (on the pooled cells) is caught
with probability at least :data:`POWER`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

#: Cells with a smaller expected count are pooled (the chi-square approximation's rule).
MIN_EXPECTED = 5.0

#: Power at which the detectable TV is stated.
POWER = 0.9


@dataclass(frozen=True)
class FitResult:
    """One G-test: statistic, degrees of freedom, p-value, pooled cells' mass, detectable TV."""

    g: float
    df: int
    p_value: float
    pooled_mass: float
    detectable_tv: float


def pool_cells(counts: np.ndarray, law: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Counts and probabilities on cells of expected count ≥ :data:`MIN_EXPECTED`, plus one
    pooled cell for the rest.  returns (counts, probabilities, mass of the pooled cells)"""
    n = counts.sum()
    big = law * n >= MIN_EXPECTED
    kept_c, kept_p = list(counts[big]), list(law[big])
    rest_c, rest_p = counts[~big].sum(), law[~big].sum()
    if rest_p > 0 or rest_c > 0:
        if rest_p * n >= MIN_EXPECTED or not kept_p:
            kept_c.append(rest_c)
            kept_p.append(rest_p)
        else:  # too small to stand alone: merge into the smallest kept cell
            j = int(np.argmin(kept_p))
            kept_c[j] += rest_c
            kept_p[j] += rest_p
    return np.array(kept_c, dtype=np.float64), np.array(kept_p), float(rest_p)


def detectable_tv(n: int, df: int, alpha: float, power: float = POWER) -> float:
    """Smallest TV distance detected with probability ``power`` (module docstring)."""
    if df < 1 or n < 1:
        return math.nan
    critical = stats.chi2.isf(alpha, df)
    lam = optimize.brentq(lambda x: stats.ncx2.sf(critical, df, x) - power, 1e-9, 1e7)
    return math.sqrt(lam / (4.0 * n))


def g_test(counts: np.ndarray, law: np.ndarray, alpha: float) -> FitResult:
    """G-test of observed ``counts`` # [C] against the probabilities ``law`` # [C] at level α.

    Cells of probability 0 are left out (a count there is an exact violation, checked by the
    caller).
    """
    counts = np.asarray(counts, dtype=np.float64)
    law = np.asarray(law, dtype=np.float64)
    positive = law > 0
    c, p, pooled = pool_cells(counts[positive], law[positive] / law[positive].sum())
    n = int(c.sum())
    df = len(c) - 1
    if df < 1:
        return FitResult(0.0, 0, 1.0, pooled, math.nan)
    expected = n * p
    seen = c > 0
    g = float(2.0 * np.sum(c[seen] * np.log(c[seen] / expected[seen])))
    return FitResult(g, df, float(stats.chi2.sf(g, df)), pooled, detectable_tv(n, df, alpha))


def total_variation(counts: np.ndarray, law: np.ndarray) -> float:
    """``½ Σ |counts/N − law|``: the observed TV distance (includes sampling noise)."""
    counts = np.asarray(counts, dtype=np.float64)
    return float(0.5 * np.abs(counts / counts.sum() - law).sum())


def noise_tv(n: int, law: np.ndarray) -> float:
    """Expected observed TV of an exact sampler, ``½ Σ sqrt(2 p (1 − p) / (π N))`` (normal
    approximation): the floor under :func:`total_variation` at sample size N."""
    law = np.asarray(law, dtype=np.float64)
    return float(0.5 * np.sum(np.sqrt(2.0 * law * (1.0 - law) / (math.pi * n))))
