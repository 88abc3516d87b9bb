"""Paired intervals and tie sets (THEORY.md §14, worked numbers)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.analysis.report.ties import (
    interval,
    paired,
    t_interval,
    tie_set,
    tie_text,
    wins,
)


def test_worked_example_of_theory_section_14():
    # gains of a schedule over fixed K on three seeds +1.2 %, -0.4 %, +0.9 %:
    # mean 0.567 %, s_d 0.850 %, half-width 4.303 x 0.850 / sqrt(3) = 2.113 %,
    # interval (-1.55 %, +2.68 %): a tie, so the answer is the fixed K
    d = interval([1.2, -0.4, 0.9])
    assert d.mean == pytest.approx(0.5667, abs=1e-4)
    assert (d.mean - d.ci_low) == pytest.approx(2.113, abs=1e-3)
    assert (d.ci_low, d.ci_high) == pytest.approx((-1.546, 2.680), abs=1e-3)
    won, _ = wins([101.2, 99.6, 100.9], [100.0, 100.0, 100.0])
    assert not won
    best, ties = tie_set({"fixed K": [0.0, 0.0, 0.0], "schedule": [1.2, -0.4, 0.9]})
    assert best == "schedule" and ties == ["fixed K", "schedule"]


def test_a_resolved_difference_is_not_a_tie():
    best, ties = tie_set({"a": [10.0, 11.0, 10.5], "b": [1.0, 1.2, 0.9], "c": [10.2, 10.9, 10.4]})
    assert best == "a" and ties == ["a", "c"]
    assert tie_text(ties) == "a ≈ c"
    won, d = wins([10.0, 11.0, 10.5], [1.0, 1.2, 0.9])
    assert won and d.ci_low > 0


def test_one_seed_has_no_interval():
    d = paired([1.0], [0.5])
    assert d.mean == 0.5 and math.isnan(d.ci_low)
    assert "one seed" in d.text()
    assert tie_set({"a": [1.0], "b": [0.5], "c": [1.0]}) == ("a", ["a", "c"])


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 4).flatmap(lambda r: st.lists(
    st.lists(st.floats(-50, 50, allow_nan=False), min_size=r, max_size=r),
    min_size=2, max_size=6)))
def test_every_seeds_best_is_in_the_tie_set_for_up_to_four_seeds(rows):
    values = {f"s{i}": row for i, row in enumerate(rows)}
    _, ties = tie_set(values)
    for r in range(len(rows[0])):
        top = max(v[r] for v in values.values())
        assert any(values[name][r] == top for name in ties)


@pytest.mark.parametrize("q", [0.9, 0.95, 0.975, 0.995])
def test_the_t_quantile_is_scipy_stats_own_float(q):
    from scipy import stats

    from specbatch.analysis.report.ties import t_quantile

    for df in range(1, 41):
        assert t_quantile(q, df) == float(stats.t.ppf(q, df))
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-6)  # the tables' t_{2,0.975}


def test_the_tie_set_does_not_import_scipy_stats():
    import subprocess
    import sys

    code = ("import sys; from specbatch.analysis.report.ties import interval; "
            "interval([1.0, 2.0, 4.0]); print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_tiny_spread_keeps_a_positive_interval_instead_of_underflowing():
    # differences of ~1e-173: their squares underflow to 0 in a plain variance, which gave a
    # zero-width interval and dropped a seed's best from the tie set (hypothesis found it)
    mean, low, high = t_interval([-2.5528930424261377e-173, 1.7241857081040383e-264])
    assert low < 0 < high
    assert mean == pytest.approx(-1.2764465212130689e-173, rel=1e-12)
    # same spread as the values scaled by 1e170, scaled back
    _, low_big, _ = t_interval([-2.5528930424261377e-3, 1.7241857081040383e-94])
    assert low == pytest.approx(low_big * 1e-170, rel=1e-12)


def test_a_95_percent_interval_of_a_few_seeds_imports_no_scipy_special():
    import subprocess
    import sys

    from specbatch.analysis.report.ties import T_975

    code = ("import sys; from specbatch.analysis.report.ties import interval; "
            "interval([1.0, 2.0, 4.0]); print('scipy.special' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert len(T_975) == 32  # df 1..32, each pinned to scipy's float above
