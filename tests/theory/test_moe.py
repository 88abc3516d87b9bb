"""Distinct experts a pass touches (theory.moe): THEORY.md §8's numbers, exact and Monte-Carlo
twins."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.theory.moe import (
    expected_touched,
    subset_marginals,
    touched_by_enumeration,
    touched_by_sampling,
    zipf_load,
)


def test_theory_md_section_8_numbers_for_qwen3_30b_a3b():
    # E = 128, k = 8: 8.0 at Q = 1, 29.1 at Q = 4, 82.4 at Q = 16, 125.9 at Q = 64
    got = [round(expected_touched(q, 128, 8), 1) for q in (1, 4, 16, 64)]
    assert got == [8.0, 29.1, 82.4, 125.9]
    assert expected_touched(0, 128, 8) == 0.0


def test_a_small_case_by_hand():
    # E = 4, k = 2, Q = 2: an expert escapes both tokens with (1 - 1/2)^2 = 1/4 -> 4 * 3/4 = 3
    assert expected_touched(2, 4, 2) == 3.0
    # Q = 3: 4 * (1 - 1/8) = 3.5
    assert expected_touched(3, 4, 2) == 3.5


def uniform_law(experts: int, k: int) -> dict[tuple[int, ...], Fraction]:
    subsets = list(itertools.combinations(range(experts), k))
    return {s: Fraction(1, len(subsets)) for s in subsets}


@pytest.mark.parametrize(("experts", "k", "tokens"), [(4, 2, 1), (4, 2, 2), (4, 2, 3), (5, 1, 3),
                                                      (5, 3, 2), (3, 3, 2)])
def test_uniform_formula_equals_exact_enumeration(experts, k, tokens):
    exact = touched_by_enumeration(tokens, uniform_law(experts, k))
    assert float(exact) == pytest.approx(expected_touched(tokens, experts, k), abs=1e-12)
    assert exact == experts * (1 - (1 - Fraction(k, experts)) ** tokens)


def test_skewed_law_equals_exact_enumeration_through_its_loads():
    # a non-uniform law over 2-subsets of 4 experts, correlated within a token
    law = {(0, 1): Fraction(1, 2), (0, 2): Fraction(1, 4), (1, 3): Fraction(1, 8),
           (2, 3): Fraction(1, 8)}
    load = subset_marginals(law, 4)
    assert load == [Fraction(3, 4), Fraction(5, 8), Fraction(3, 8), Fraction(1, 4)]
    for tokens in (1, 2, 3, 4):
        exact = touched_by_enumeration(tokens, law)
        assert exact == sum(1 - (1 - p) ** tokens for p in load)
        assert expected_touched(tokens, 4, 2, load=[float(p) for p in load]) == pytest.approx(
            float(exact), abs=1e-12)


@pytest.mark.parametrize("skew", [0.0, 0.5, 1.0])
def test_zipf_skew_matches_monte_carlo(skew):
    load = zipf_load(32, 4, skew)
    assert load.sum() == pytest.approx(4.0) and (np.diff(load) <= 1e-15).all()
    mean, se = touched_by_sampling(12, load, 4, samples=4000, seed=1)
    assert abs(mean - expected_touched(12, 32, 4, routing_skew=skew)) < 5 * se + 1e-9


def test_a_steep_skew_caps_the_most_popular_experts_at_every_token():
    load = zipf_load(8, 2, 3.0)  # uncapped, expert 1 would take 1.66 of 2 choices
    assert load[0] == 1.0 and load.sum() == pytest.approx(2.0) and load[1] < 1.0
    assert load[1:].tolist() == pytest.approx((np.arange(2, 9) ** -3.0 / np.sum(
        np.arange(2, 9) ** -3.0)).tolist())
    assert expected_touched(1000, 8, 2, routing_skew=50.0) == pytest.approx(2.0)


def test_skew_reads_fewer_experts_than_uniform():
    uniform = expected_touched(16, 128, 8)
    assert expected_touched(16, 128, 8, routing_skew=0.5) < uniform
    assert expected_touched(16, 128, 8, routing_skew=1.0) < expected_touched(
        16, 128, 8, routing_skew=0.5)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"routing_skew": -1.0}, "routing_skew"),
    ({"routing_skew": float("nan")}, "routing_skew"),
    ({"load": [0.5, 0.5, 0.5, 0.4]}, "summing to top_k"),
    ({"load": [1.5, 0.5, 0.0, 0.0]}, "in \\[0, 1\\]"),
    ({"load": [0.5, 0.5, 0.5, 0.5, 0.0]}, "one per expert"),
])
def test_bad_routing_is_a_one_line_error(kwargs, needle):
    with pytest.raises(SpecbatchError, match=needle):
        expected_touched(4, 4, 2, **kwargs)


def test_bad_expert_counts_are_errors():
    with pytest.raises(SpecbatchError, match="top_k"):
        expected_touched(1, 4, 5)
    with pytest.raises(SpecbatchError, match="experts"):
        expected_touched(1, 0, 1)


@settings(max_examples=40, deadline=None)
@given(experts=st.integers(1, 256), data=st.data(), tokens=st.integers(1, 4096))
def test_touched_lies_between_one_token_and_every_expert(experts, data, tokens):
    k = data.draw(st.integers(1, experts))
    got = expected_touched(tokens, experts, k)
    assert k - 1e-9 <= got <= min(experts, k * tokens) + 1e-9
    assert expected_touched(tokens + 1, experts, k) >= got - 1e-12
