"""Acceptance models against trace replay (analysis.report.acceptance_vs_replay), as
specifications."""

from __future__ import annotations

import pandas as pd
import pytest

from specbatch.analysis.report.acceptance_vs_replay import formula_table, model_shift, ranking_shift
from tests.simulator.helpers import const_trace


def runs(rows: list[tuple]) -> pd.DataFrame:
    """A sweep table: (acceptance, policy, k, seed, throughput, e2e) per run, one trace."""
    frame = pd.DataFrame(rows, columns=["acceptance", "policy", "num_speculative_tokens",
                                        "seed", "throughput", "e2e_mean"])
    frame["extra"] = 0
    frame["verify"] = "token"
    frame["trace"] = "t"
    frame["setting"] = (frame.acceptance + frame.policy
                        + frame.num_speculative_tokens.astype(str))
    return frame


def test_where_acceptance_is_iid_every_model_and_the_iid_formula_agree():
    table = formula_table(const_trace(alpha=0.5, depth=4)).set_index("gamma")
    assert table.index.tolist() == [1, 2, 4]  # gamma <= K
    for gamma, row in table.iterrows():
        expected = (1 - 0.5 ** (gamma + 1)) / 0.5
        assert row["replay"] == pytest.approx(expected)
        assert row["constant"] == pytest.approx(expected)
        assert row["per-position"] == pytest.approx(expected)
        assert row["(1 - a^(g+1))/(1 - a)"] == pytest.approx(expected)
        assert row["1 + a*g"] == pytest.approx(1 + 0.5 * gamma)  # above it from gamma = 2


SWEEP = runs(
    [("trace", "fixed", k, s, 100.0 + 10 * k + s, 2.0) for k in (1, 2) for s in (0, 1)]
    + [("trace", "tetris", 2, s, 125.0 + s, 1.5) for s in (0, 1)]
    + [("constant", "fixed", k, s, 130.0 - 10 * k + s, 2.0) for k in (1, 2) for s in (0, 1)]
    + [("constant", "tetris", 2, s, 100.0 + s, 3.0) for s in (0, 1)])


def test_each_best_trace_setting_is_replayed_under_the_model():
    shift = model_shift(SWEEP).set_index("policy")
    assert shift.loc["fixed", "k"] == 2  # best under trace replay (120 + s)
    # fixed k = 2: 110/120 and 111/121 under the model
    assert shift.loc["fixed", "throughput change (%)"].startswith("-8.30%")
    assert shift.loc["tetris", "e2e change (%)"].startswith("+100.00%")
    assert set(shift.model) == {"constant"}


def test_a_model_that_reverses_the_order_has_kendall_tau_minus_one():
    ranks = ranking_shift(SWEEP).set_index("model")
    assert ranks.loc["trace", "Kendall tau vs trace"] == pytest.approx(1.0)
    assert ranks.loc["constant", "Kendall tau vs trace"] == pytest.approx(-1.0)
    assert ranks.loc["trace", "best setting"] == "tetris 2,0"
    assert ranks.loc["constant", "policy order"] == "fixed > tetris"


def test_without_trace_replay_there_is_nothing_to_compare():
    only = SWEEP[SWEEP.acceptance == "constant"]
    assert model_shift(only).empty and ranking_shift(only).empty
