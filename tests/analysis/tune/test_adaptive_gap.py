"""analysis.tune.adaptive_gap: every arm of a cell replays the same paired requests, and the
attribution is the chain of differences between the arms."""

from __future__ import annotations

import pytest

from specbatch.analysis.tune.adaptive_gap import (
    CHAIN,
    Cell,
    attribution,
    runs_of_cell,
    table,
)
from specbatch.simulator.config.sim_config import check_settings_apply, load_config


def test_every_arm_of_a_cell_shares_the_replay_set_and_builds_a_valid_config():
    arms = runs_of_cell(Cell("smollm2", 16, "poisson"), 3.5)
    shared = {(s["trace"], s["seed"], s["calibration_split"], s["requests"], s["rate"],
               s["max_num_seqs"]) for _, s in arms}
    assert len(shared) == 1  # paired: same requests, split, seed and load for every arm
    for _, settings in arms:
        fields = {k: v for k, v in settings.items()}
        config = load_config(None, **fields)
        check_settings_apply(config, set(fields) - {"calibration_split"})
    labels = [a for a, _ in arms]
    assert labels[: len(CHAIN)] == [a for a, _ in CHAIN] and "dsd" in labels


def test_attribution_is_the_chain_of_differences():
    row = {"vllm-adaptive": -30.0, "+ fresh": -28.0, "+ exact cost": -15.0,
           "+ calibrated": -1.0, "optimum": 2.0, "tetris": -5.0, "tetris learned": -4.0,
           "dsd": -3.0, "trace": "t", "max_num_seqs": 4, "load": "burst",
           "best_fixed": "fixed k=3"}
    parts = attribution(row)
    assert parts == {"staleness": 2.0, "stepped cost": 13.0, "calibration": 14.0,
                     "estimates": 3.0, "B rule vs fixed C": -25.0}
    assert sum(v for k, v in parts.items() if k != "B rule vs fixed C") == pytest.approx(
        row["optimum"] - row["vllm-adaptive"])
    assert "| t | 4 | burst | 3 | -30.0 |" in table([row])
