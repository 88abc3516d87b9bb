"""`specbatch simulate` with a learned predictor, a calibration split and acceptance models."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main
from tests.cli.oneline import assert_one_line_error


@pytest.mark.parametrize("argv, needle", [
    (["--policy", "fixed", "--predictor", "logistic", "--calibration-split", "0.5"],
     "field predictor"),
    (["--calibration-split", "1"], "field calibration_split"),
    (["--acceptance", "geometric"], "field acceptance"),
])
def test_bad_settings_are_one_line_errors(argv, needle, capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8", *argv])
    assert_one_line_error(code, capsys.readouterr().err, needle)


def test_learned_and_vllm_dynamic_run_without_a_split_and_say_what_they_held_out(capsys):
    base = ["simulate", "--trace", "synth", "--requests", "16"]
    for argv in (["--policy", "tetris", "--predictor", "learned"],
                 ["--policy", "vllm-dynamic"]):
        assert main([*base, *argv, "--json"]) == 0
        out, err = capsys.readouterr()
        summary = json.loads(out)
        assert summary["calibration_split"] == 0.25 and summary["held_out_requests"] == 16
        assert "16 of the trace's 64 requests (calibration_split 0.25, the default" in err
        assert main([*base, *argv]) == 0
        assert "held_out_requests" in capsys.readouterr().out


def test_a_calibrated_run_and_a_model_run_print_one_json_object(capsys):
    base = ["simulate", "--trace", "synth", "--requests", "16", "--json"]
    assert main([*base, "--policy", "tetris", "--k", "2", "--extra", "1", "--calibration-split",
                 "0.5", "--predictor", "logistic"]) == 0
    learned = json.loads(capsys.readouterr().out)
    assert learned["policy"] == "tetris" and learned["requests"] == 16
    assert main([*base, "--acceptance", "per-position"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 16
