"""Judging the learned acceptance predictor (analysis.report.predictor_quality), as
specifications."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbatch.analysis.report.predictor_quality import (
    predictor_quality,
    predictor_table,
    quality_summary,
    reliability,
)
from tests.simulator.helpers import signal_trace


def runs(rows: list[tuple]) -> pd.DataFrame:
    """A sweep table: (policy, predictor, k, e, seed, throughput, e2e) per run."""
    frame = pd.DataFrame(rows, columns=["policy", "predictor", "num_speculative_tokens",
                                        "extra", "seed", "throughput", "e2e_mean"])
    frame["verify"] = "token"
    frame["trace"] = "t"
    frame["setting"] = (frame.policy + frame.predictor + frame.num_speculative_tokens.astype(str)
                        + frame.extra.astype(str))
    return frame


def test_reliability_bins_by_the_estimate():
    table = reliability(np.array([0.05, 0.15, 0.15]), np.array([0.0, 0.5, 0.1]))
    assert table["low"].tolist() == [0.0, 0.1]
    assert table["share"].tolist() == pytest.approx([1 / 3, 2 / 3])
    assert table["gap"].tolist() == pytest.approx([0.05, 0.15])


def test_quality_is_out_of_sample_and_beats_a_blind_surrogate():
    rng = np.random.default_rng(1)
    rows, depth = 1200, 3
    entropy = rng.uniform(0.0, 3.0, (rows, depth))
    conf = rng.uniform(0.05, 1.0, (rows, depth))
    accept = 1.0 / (1.0 + np.exp(2.0 * (entropy - 1.5)))
    trace = signal_trace(accept, conf, entropy, np.maximum(conf, 0.5), n_requests=30)
    quality = predictor_quality(trace, 0.5, seeds=(0, 1), kinds=("logistic",))
    assert quality[["predictor", "seed"]].values.tolist() == [
        ["confidence", 0], ["logistic", 0], ["confidence", 1], ["logistic", 1]]
    by = quality.groupby("predictor")[["token AUC", "Brier", "ECE"]].mean()
    assert by.loc["logistic", "token AUC"] > by.loc["confidence", "token AUC"] + 0.2
    assert by.loc["logistic", "Brier"] < by.loc["confidence", "Brier"]
    assert by.loc["logistic", "ECE"] < 0.1
    summary = quality_summary(quality).set_index("predictor")
    assert summary.loc["logistic", "token AUC"] == pytest.approx(by.loc["logistic", "token AUC"])
    assert summary.loc["logistic", "seeds"] == 2


def test_the_table_picks_each_best_setting_and_pairs_it_with_the_best_fixed_window():
    df = runs([("fixed", "confidence", 1, 0, s, 100.0 + s, 2.0) for s in (0, 1)]
              + [("fixed", "confidence", 2, 0, s, 110.0 + s, 2.0) for s in (0, 1)]
              + [("tetris", "confidence", 2, 1, s, 99.0 + 11 * s, 2.0) for s in (0, 1)]
              + [("tetris", "learned", 2, 1, s, 121.0 + 12 * s, 1.0) for s in (0, 1)]
              + [("oracle", "confidence", 2, 1, s, 132.0 + 13 * s, 1.0) for s in (0, 1)])
    table = predictor_table(df).set_index("policy")
    assert (
        table.loc["fixed", "k"] == 2 and table.loc["fixed", "throughput vs best fixed (%)"] == "-"
    )
    # learned: 121/110 and 133/111, a +10 % and +19.8 % paired change
    assert table.loc["tetris (learned)", "throughput"] == pytest.approx(127.0)
    assert table.loc["tetris (learned)", "throughput vs best fixed (%)"].startswith("+14.91%")
    assert table.loc["tetris (learned)", "e2e vs best fixed (%)"].startswith("-50.00%")
    # against the surrogate: 121/99 and 133/110, mean +21.57 %
    assert table.loc["tetris (learned)", "throughput vs tetris (confidence) (%)"].startswith(
        "+21.57%")
    assert table.loc["oracle", "throughput vs tetris (confidence) (%)"] == "-"


def test_the_engines_spec_runs_tetris_with_both_predictors():
    from specbatch.analysis.specs import spec_path
    from specbatch.analysis.sweep.spec import expand, load_spec
    from specbatch.simulator.config.sim_config import SimConfig

    grid = expand(load_spec(spec_path("engines"), SimConfig), SimConfig)
    assert {r.get("predictor", "confidence") for r in grid if r["policy"] == "tetris"} == {
        "confidence", "learned"}
