"""Request-length distributions (simulator.workload.lengths): parsing, drawing, the workload
table."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.workload.lengths import Lengths, draw_lengths, length_table, parse_lengths

TRACE = (np.array([100, 200, 300]), np.array([10, 20, 30]), np.array(["a", "b", "c"], object))


def test_each_form_parses_and_describes_itself():
    assert parse_lengths("fixed:500", "--p") == Lengths("fixed", (500.0,))
    assert parse_lengths("uniform:10,20", "--p").describe() == "uniform:10,20"
    assert parse_lengths("LogNormal:400,0.8", "--p").describe() == "lognormal:400,0.8"
    assert parse_lengths("trace", "--p") == Lengths("trace")


@pytest.mark.parametrize("text", ["fixed", "fixed:0", "fixed:2.5", "uniform:5", "uniform:9,3",
                                  "lognormal:0,1", "lognormal:100,-1", "normal:5", "trace:3",
                                  "fixed:nan", "uniform:a,b"])
def test_bad_forms_are_one_line_errors_naming_the_flag(text):
    with pytest.raises(SpecbatchError, match="^--prompt-len: expected"):
        parse_lengths(text, "--prompt-len")


def test_draws_stay_in_range_and_follow_their_law():
    rng = np.random.default_rng(0)
    assert draw_lengths(Lengths("fixed", (7,)), 5, rng).tolist() == [7] * 5
    uni = draw_lengths(Lengths("uniform", (3, 5)), 2000, rng)
    assert set(uni.tolist()) == {3, 4, 5}
    logn = draw_lengths(Lengths("lognormal", (400, 0.5)), 20000, rng)
    assert logn.min() >= 1 and abs(np.median(logn) - 400) < 10
    assert Lengths("lognormal", (400, 0.5)).mean() == pytest.approx(400 * np.exp(0.125))


def test_the_table_is_seeded_and_pairs_trace_lengths_of_one_request():
    a = length_table(parse_lengths("trace", ""), parse_lengths("trace", ""), 50, 3, *TRACE)
    b = length_table(parse_lengths("trace", ""), parse_lengths("trace", ""), 50, 3, *TRACE)
    assert a.equals(b)
    assert (a.prompt_len == 10 * a.output_len).all()  # the same trace request on both sides
    assert set(a.category) <= {"a", "b", "c"}


def test_a_table_of_distributions_has_no_category():
    t = length_table(parse_lengths("fixed:500", ""), parse_lengths("uniform:1,9", ""), 20, 0,
                     *TRACE)
    assert list(t.columns) == ["prompt_len", "output_len"]
    assert (t.prompt_len == 500).all() and t.output_len.between(1, 9).all()
