"""Specification of ``cost show --cost calibrated``, the per-pass ``breakdown`` of every
``cost show`` row, ``cost import-vidur`` and the cost sources ``simulate`` names."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbatch.simulator.cost.report import SHOWN_PARTS
from tests.cli.oneline import run_json, run_main

SLICE = Path(__file__).parents[1] / "traces" / "data" / "vidur_slice"


@pytest.mark.parametrize("cost", ["roofline", "calibrated"])
def test_every_row_splits_each_pass_into_parts_that_sum_to_it(capsys, cost):
    code, obj = run_json(capsys, ["cost", "show", "--cost", cost, "--target", "vicuna-33b",
                                  "--tp", "4", "--batch", "1", "64", "--k", "3"])
    assert code == 0
    for row in obj["rows"]:
        split = row["breakdown"]
        assert set(split) == {"target_decode", "target_verify", "draft"}
        for name, key in (("target_decode", "target_decode_s"),
                          ("target_verify", "target_verify_s"), ("draft", "draft_s")):
            assert set(split[name]) == set(SHOWN_PARTS)  # the device's parts and the host's
            assert sum(split[name].values()) == pytest.approx(row[key], rel=1e-12)
        assert split["target_decode"]["allreduce"] > 0  # tp 4
    assert obj["sources"]["target"]["summary"]


def test_calibrated_show_names_the_profile_cell_and_prints_the_split(capsys):
    code, out, _ = run_main(capsys, ["cost", "show", "--cost", "calibrated", "--target",
                                     "vicuna-7b", "--batch", "1", "32"])
    assert code == 0
    assert "vidur h100 meta-llama/Llama-2-7b-hf tp 1 (validated MAPE" in out
    assert "where the time goes at batch 32 (ms): layers + attention + allreduce" in out
    assert "target_verify (k+1=4)" in out


@pytest.mark.slow  # fitting the profiled model's families takes ~10 s
def test_profiled_rows_have_no_split(capsys, tmp_path):
    from tests.simulator.cost.test_registry import synthetic_profile

    path = tmp_path / "p.parquet"
    synthetic_profile().to_parquet(path)
    code, obj = run_json(capsys, ["cost", "show", "--cost", "profiled", "--profile", str(path),
                                  "--batch", "1"])
    assert code == 0
    assert obj["rows"][0]["breakdown"]["target_decode"] is None
    assert obj["sources"]["target"]["summary"].startswith("user latency profile")


def test_import_vidur_then_price_from_the_user_folder(capsys, tmp_path):
    out = tmp_path / "mine"
    code, obj = run_json(capsys, ["cost", "import-vidur", str(SLICE), "--out", str(out),
                                  "--repository", "my lab"])
    assert code == 0
    assert (obj["compute_rows"], obj["network_rows"], obj["gpus"]) == (9, 3, ["h100"])
    code, obj = run_json(capsys, ["cost", "show", "--cost", "calibrated", "--profile", str(out),
                                  "--target", "vicuna-7b", "--tp", "2", "--batch", "1"])
    assert code == 0
    layers = obj["sources"]["target"]["layers"]
    assert layers["source"] == "user profile cell"
    assert f"user profile {out}: h100 meta-llama/Llama-2-7b-hf tp 2" == layers["cell"]


def test_import_vidur_of_a_bad_folder_is_one_line(capsys, tmp_path):
    code, out, err = run_main(capsys, ["cost", "import-vidur", str(tmp_path), "--out",
                                       str(tmp_path / "o")])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no compute/<gpu>" in err


def test_simulate_json_names_the_cost_source(capsys):
    code, obj = run_json(capsys, ["simulate", "--trace", "synth", "--requests", "4",
                                  "--cost", "calibrated", "--target", "vicuna-7b"])
    assert code == 0
    src = obj["cost_source"]
    assert src["target"]["summary"] == "vidur h100 meta-llama/Llama-2-7b-hf tp 1"
    assert src["draft"]["summary"].startswith("calibrated roofline")


@pytest.mark.slow  # a small plan: ~10-20 s
def test_plan_names_the_source_and_prices_a_user_profile_first(capsys, tmp_path):
    code, _ = run_json(capsys, ["cost", "import-vidur", str(SLICE), "--out", str(tmp_path / "p")])
    assert code == 0
    code, obj = run_json(capsys, [
        "plan", "--out", str(tmp_path / "plan"), "--target", "vicuna-7b", "--rate", "2",
        "--prompt-len", "fixed:50", "--output-len", "fixed:20", "--requests", "8", "--tp", "2",
        "--max-gpus", "2", "--policies", "ar", "--workers", "1", "--profile",
        str(tmp_path / "p")])
    assert code == 0
    src = obj["cost_source"]
    assert (src["cost"], src["hardware"], src["tp"]) == ("calibrated", "h100", 2)
    assert src["target"]["layers"]["source"] == "user profile cell"
    assert src["draft"]["summary"].startswith("calibrated roofline")
