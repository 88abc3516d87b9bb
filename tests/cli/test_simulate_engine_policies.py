"""`specbatch simulate` with the engines' policies: their knobs as flags, one JSON object, and
one-line errors (exit code 2) for a bad table, a missing calibration split or a knob the
policy would ignore."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main

BASE = ["simulate", "--trace", "synth", "--requests", "8"]


@pytest.mark.parametrize("argv", [
    ["--policy", "vllm-dynamic", "--k", "4", "--calibration-split", "0.25"],
    ["--policy", "batch-schedule", "--k", "3", "--num-speculative-tokens-per-batch-size",
     "1-4:3,5-64:1"],
    ["--policy", "batch-schedule", "--k", "3", "--draft-len-schedule", "4:3,8:1"],
    ["--policy", "ema-adaptive", "--speculative-adaptive-config",
     '{"1": {"candidate_steps": [1, 2, 3]}}'],
    ["--policy", "specdec++", "--k", "6", "--calibration-split", "0.25",
     "--specdec-threshold", "0.7"],
    ["--policy", "entropy-stop", "--k", "6", "--entropy-threshold", "3"],
    ["--policy", "fixed", "--cuda-graph-sizes", "512"],
])
def test_each_engine_policy_runs_from_its_flags(argv, capsys):
    assert main(BASE + argv + ["--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["policy"] == argv[1] and summary["tokens"] > 0


@pytest.mark.parametrize("argv, needle", [
    (["--policy", "batch-schedule", "--num-speculative-tokens-per-batch-size", "2-4:1"],
     "field num_speculative_tokens_per_batch_size: expected ranges"),
    (["--policy", "fixed", "--draft-len-schedule", "4:2"],
     "field draft_len_schedule: expected no draft_len_schedule for policy fixed"),
    (["--policy", "tetris", "--specdec-threshold", "0.5"], "only specdec++ reads it"),
    (["--policy", "fixed", "--cuda-graph-sizes", "0"], "field cuda_graph_sizes: expected"),
    (["--policy", "ema-adaptive", "--speculative-adaptive-config", "{"],
     "field speculative_adaptive_config: expected a JSON object"),
    (["--policy", "fixed", "--calibration-split", "0.999"], "field calibration_split"),
])
def test_bad_engine_settings_are_one_line_errors(argv, needle, capsys):
    assert main(BASE + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("specbatch: error: ") and needle in err and err.count("\n") == 1
