"""`specbatch simulate` warns when a vLLM batch-size schedule's K switches at its thresholds on
at least 1 % of steps (vLLM #49548), and stays silent when it does not."""

from __future__ import annotations

from specbatch.cli import main

#: priced by the datasheet roofline, which no measured table moves: at rate 3 the batch sits
#: on the 5 / 6 cut (K switches on 1.5 % of steps), at rate 1 it never reaches it
BASE = ["simulate", "--trace", "synth", "--synth-alpha", "0.8", "--requests", "64",
        "--arrival", "poisson", "--policy", "batch-schedule", "--num-speculative-tokens", "3",
        "--cost", "roofline"]


def test_a_schedule_on_its_threshold_is_warned_about(capsys):
    assert main([*BASE, "--rate", "3", "--num-speculative-tokens-per-batch-size",
                 "1-5:3,6-64:0", "--json"]) == 0
    err = capsys.readouterr().err
    assert "warning: vLLM schedule sits on a threshold" in err and "#49548" in err


def test_a_schedule_far_from_its_threshold_is_not(capsys):
    assert main([*BASE, "--rate", "1", "--num-speculative-tokens-per-batch-size",
                 "1-5:3,6-64:0", "--json"]) == 0
    assert "warning" not in capsys.readouterr().err
