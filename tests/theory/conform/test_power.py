"""theory/conform/power.py: every test is calibrated at every sample size, and the stated
power is met (the planted deviation of the stated TV is caught >= 95 % of the time)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from specbatch.theory.conform.power import (
    POWER,
    detectable_tv_law,
    draws_for,
    g_statistic,
    holm,
    law_test,
    mean_excess_p_value,
    types_p_value,
)


@pytest.mark.parametrize("n, p", [(7, [0.3, 0.7]), (10, [0.2, 0.3, 0.5]),
                                  (25, [0.05, 0.15, 0.8]), (12, [0.1, 0.2, 0.3, 0.4]),
                                  (40, [0.02, 0.98])])
def test_the_exact_tail_bound_holds_by_enumeration(n, p):
    """``P(G ≥ g) ≤ bound(g)`` for every attainable g, the null law enumerated exactly."""
    p = np.array(p)
    counts = np.array([c for c in itertools.product(range(n + 1), repeat=len(p))
                       if sum(c) == n], dtype=float)  # [compositions, C]
    mass = stats.multinomial.pmf(counts, n, p)
    g = g_statistic(counts, n * p)
    for value in np.unique(g):
        tail = mass[g >= value - 1e-9].sum()
        assert tail <= types_p_value(float(value), n, len(p)) * (1 + 1e-9)


@pytest.mark.parametrize("n", [2, 5, 20, 200])
def test_law_test_p_values_are_super_uniform_at_small_sizes(n):
    """Under the null ``P(p ≤ a) ≤ a`` at a = 0.05 and 0.2, within 3 binomial SE (the chi-square
    approximation this replaced is anti-conservative at such sizes)."""
    rng = np.random.default_rng(n)
    law = np.array([0.05, 0.1, 0.15, 0.3, 0.4])
    p = np.array([law_test(rng.multinomial(n, law), law, 0.01, rng).p_value
                  for _ in range(400)])
    for a in (0.05, 0.2):
        assert np.mean(p <= a) <= a + 3 * math.sqrt(a * (1 - a) / len(p))


def test_a_gross_deviation_is_decided_by_the_bound_without_draws():
    law = np.full(4, 0.25)
    fit = law_test(np.array([1000, 0, 0, 0]), law, 1e-4, np.random.default_rng(0))
    assert fit.p_value < 1e-100 and fit.null_draws == 0


def least_favourable(law: np.ndarray, delta: float) -> np.ndarray:
    """Move TV δ between two halves of equal mass, proportionally to ``law`` (λ = 4 N δ²)."""
    order = np.argsort(law)
    half = np.zeros(len(law), dtype=bool)
    half[order[::2]] = True  # two halves of (nearly) equal mass
    up = law[half].sum()
    alt = law.copy()
    alt[half] += delta * law[half] / up
    alt[~half] -= delta * law[~half] / (1 - up)
    return alt


@pytest.mark.parametrize("n, level", [(2000, 0.05), (4000, 0.01)])
def test_the_detectable_tv_is_caught_with_the_stated_power(n, level):
    """A least-favourable deviation of exactly the stated TV is rejected in >= 95 % of
    multinomial draws (less 3 binomial SE for the finite number of trials)."""
    law = np.full(20, 0.05)
    delta = detectable_tv_law(n, law, level)
    alt = least_favourable(law, delta)
    assert 0.5 * np.abs(alt - law).sum() == pytest.approx(delta)
    rng = np.random.default_rng(1)
    trials = 300
    caught = np.mean([law_test(rng.multinomial(n, alt), law, level, rng).p_value <= level
                      for _ in range(trials)])
    assert caught >= POWER - 3 * math.sqrt(POWER * (1 - POWER) / trials)


@pytest.mark.slow
@pytest.mark.parametrize("n, level, trials", [(3_000, 1e-2 / 45, 100)])
def test_the_detectable_tv_is_caught_with_the_stated_power_at_conform_levels(n, level, trials):
    """The same at the levels ``conform`` uses (α / tests) and an uneven law of 81 cells (each
    trial near the critical value spends the full Monte Carlo budget, 4 / level draws)."""
    law = np.random.default_rng(3).dirichlet(np.ones(81))
    delta = detectable_tv_law(n, law, level)
    rng = np.random.default_rng(2)
    alt = least_favourable(law, delta)
    caught = np.mean([law_test(rng.multinomial(n, alt), law, level, rng).p_value <= level
                      for _ in range(trials)])
    assert caught >= POWER - 3 * math.sqrt(POWER * (1 - POWER) / trials)


def test_draws_for_reaches_the_requested_tv_with_the_fewest_draws():
    law = np.full(27, 1 / 27)
    n = draws_for(0.05, [law], 1e-3, 10**9)
    assert detectable_tv_law(n, law, 1e-3) <= 0.05
    assert detectable_tv_law(int(n * 0.98), law, 1e-3) > 0.05
    assert draws_for(1e-6, [law], 1e-3, 10**6) == 10**6 + 1  # unreachable under the limit


def test_holm_step_down_by_hand():
    # thresholds 0.05/4, 0.05/3, 0.05/2, 0.05/1 against the sorted p-values
    assert holm([0.01, 0.04, 0.012, 0.02], 0.05).tolist() == [True, True, True, True]
    assert holm([0.01, 0.04, 0.012, 0.03], 0.05).tolist() == [True, False, True, False]
    assert holm([0.01, 0.04, 0.02, 0.03], 0.05).tolist() == [True, False, False, False]
    assert holm([0.02, 0.001], 0.05).tolist() == [True, True]
    assert not holm([0.2, 0.3], 0.05).any()


def test_mean_excess_has_no_zero_standard_error_trap():
    """Every draft accepted (SE 0) and the mean a little above the bound: no evidence at
    n = 50, overwhelming at n = 50,000 (Hoeffding / empirical Bernstein, not a z-score)."""
    assert mean_excess_p_value(np.full(50, 3.0), 2.9645, 3.0) > 0.01
    assert mean_excess_p_value(np.full(50_000, 3.0), 2.9645, 3.0) < 1e-20
    assert mean_excess_p_value(np.full(10, 1.0), 2.0, 3.0) == 1.0  # below the bound


def test_mean_excess_is_calibrated_at_the_boundary():
    """At E[X] = bound exactly, ``P(p ≤ a) ≤ a`` over many small samples."""
    rng = np.random.default_rng(5)
    p = np.array([mean_excess_p_value(rng.binomial(3, 0.9, size=20).astype(float), 2.7, 3.0)
                  for _ in range(2000)])
    assert np.mean(p <= 0.05) <= 0.05
