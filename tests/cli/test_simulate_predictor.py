"""`specbatch simulate` with a learned predictor, a calibration split and acceptance models."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main
from tests.cli.oneline import assert_one_line_error


@pytest.mark.parametrize("argv, needle", [
    (["--policy", "tetris", "--predictor", "learned"], "field calibration_split"),
    (["--policy", "fixed", "--predictor", "logistic", "--calibration-split", "0.5"],
     "field predictor"),
    (["--calibration-split", "1"], "field calibration_split"),
    (["--acceptance", "geometric"], "field acceptance"),
])
def test_bad_settings_are_one_line_errors(argv, needle, capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8", *argv])
    assert_one_line_error(code, capsys.readouterr().err, needle)


def test_a_calibrated_run_and_a_model_run_print_one_json_object(capsys):
    base = ["simulate", "--trace", "synth", "--requests", "16", "--json"]
    assert main([*base, "--policy", "tetris", "--k", "2", "--extra", "1", "--calibration-split",
                 "0.5", "--predictor", "logistic"]) == 0
    learned = json.loads(capsys.readouterr().out)
    assert learned["policy"] == "tetris" and learned["requests"] == 16
    assert main([*base, "--acceptance", "per-position"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 16
