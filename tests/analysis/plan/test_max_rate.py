"""analysis.plan.max_rate: bracketing and geometric bisection find the largest passing rate
within the stated tolerance, report every probe, and flag non-monotone ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.analysis.plan.max_rate import Probe, search
from specbatch.errors import SpecbatchError


def threshold(limit: float):
    return lambda r: Probe(r, r <= limit, () if r <= limit else (f"over {limit}",))


@settings(max_examples=80, deadline=None)
@given(st.floats(0.01, 5000), st.floats(0.05, 100), st.sampled_from([0.01, 0.02, 0.1]))
def test_the_answer_passes_and_the_first_failure_is_within_tolerance(limit, start, tol):
    out = search(threshold(limit), start=start, tolerance=tol)
    assert out["bounded"] and out["max_rate"] <= limit < out["first_failing"]
    assert out["first_failing"] / out["max_rate"] <= 1 + tol
    assert out["non_monotone"] == [] and out["limits_above"] == [f"over {limit}"]


def test_by_hand_from_one_request_per_second():
    """limit 5, tolerance 0.1: 1, 2, 4 pass, 8 fails; sqrt(4 * 8) = 5.657 fails,
    sqrt(4 * 5.657) = 4.757 passes, sqrt(4.757 * 5.657) = 5.187 fails: 5.187 / 4.757 =
    1.0905 <= 1.1, stop; then 0.9 and 0.95 of 4.757 are probed again (both pass)."""
    out = search(threshold(5.0), start=1.0, tolerance=0.1)
    assert out["max_rate"] == pytest.approx(4.756828, abs=1e-6)
    assert out["first_failing"] == pytest.approx(5.187358, abs=1e-6)
    assert len(out["probes"]) == 9 and out["non_monotone"] == []


def test_nothing_passes_and_nothing_fails_are_said():
    never = search(lambda r: Probe(r, False, ("x",)), start=1.0)
    assert never["max_rate"] is None and not never["bounded"]
    always = search(lambda r: Probe(r, True, ()), start=1.0)
    assert not always["bounded"] and always["max_rate"] == 2.0 ** 24


def test_a_failure_just_below_the_answer_is_flagged():
    """Passes up to 10 except in (8.6, 9.3): the bisection lands near 10 and the re-probe at
    0.9 of it (about 9.0) fails."""
    out = search(lambda r: Probe(r, r <= 10 and not 8.6 < r < 9.3, ()), start=1.0,
                 tolerance=0.02)
    assert 9.8 <= out["max_rate"] <= 10 and len(out["non_monotone"]) == 1


@pytest.mark.parametrize("start, tol", [(0.0, 0.02), (1.0, 0.0), (1.0, 1.5)])
def test_bad_arguments_name_the_flag(start, tol):
    with pytest.raises(SpecbatchError, match="--rate"):
        search(threshold(3.0), start=start, tolerance=tol)
