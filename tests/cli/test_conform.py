"""specbatch/cli/conform.py: `specbatch conform VERIFIER` exit codes and output."""

from __future__ import annotations

import json

import pytest
import torch

from specbatch.cli import main
from tests.cli.oneline import assert_one_line_error, run_cli, run_main
from tests.theory.conform.test_check import resample_from_target  # noqa: F401 (loaded by path)


def wrong_dtype(draft_token_ids, draft_probs, target_probs, generator=None):
    """Breaks the engine contract: int32 output."""
    return torch.zeros((len(draft_token_ids), draft_token_ids.shape[1] + 1), dtype=torch.int32)


def test_a_lossless_builtin_exits_0_with_a_table_per_class(capsys):
    code = main(["conform", "vllm-block", "--samples", "2000"])
    out = capsys.readouterr().out
    assert code == 0
    for kind in ("[iid]", "[markov]", "[paper]", "[degenerate]", "[zero]", "[identical]"):
        assert kind in out
    assert "verdict: no violation detected" in out


def test_json_is_one_object(capsys):
    code = main(["conform", "bv-numpy", "--samples", "500", "--only", "paper", "--json"])
    out = capsys.readouterr().out
    obj = json.loads(out)
    assert code == 0 and obj["exit_code"] == 0 and obj["verdict"] == "no violation detected"
    case = obj["cases"][0]
    assert case["tau_token"] == 10 / 9 or abs(case["tau_token"] - 10 / 9) < 1e-12
    assert abs(case["lp_b"] - 11 / 9) < 1e-6 and case["detectable_tv"] > 0


def test_a_lossy_sampler_exits_1_with_the_pair_and_the_laws(capsys):
    code = main(["conform", "tests.cli.test_conform:resample_from_target", "--only", "paper"])
    out = capsys.readouterr().out
    assert code == 1
    assert "verdict: LOSSY" in out and "largest deviations" in out and "pair: {" in out


def test_synthetic_reports_its_distance(capsys):
    code = main(["conform", "vllm-synthetic", "--samples", "2000", "--only", "markov",
                 "--json"])
    obj = json.loads(capsys.readouterr().out)
    assert code == 1 and obj["verdict"] == "lossy (by design)" and obj["max_observed_tv"] > 0.1


def test_bad_input_exits_2_with_one_line(capsys):
    for argv in (["conform", "no.such.module:fn"], ["conform", "nonsense"],
                 ["conform", "tests.cli.test_conform:wrong_dtype", "--only", "paper"],
                 ["conform", "vllm-block", "--samples", "1"],
                 ["conform", "vllm-block", "--alpha", "2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("specbatch: error:") and err.count("\n") == 1


def exits_zero(draft_token_ids, draft_probs, target_probs, generator=None):
    """A user sampler that calls sys.exit(0) (issue 31)."""
    raise SystemExit(0)


def test_json_carries_the_power_and_detect_chooses_the_draws(tmp_path):
    result = run_cli(["conform", "vllm-block", "--detect", "0.2", "--only", "paper", "--json"],
                     tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    obj = json.loads(result.stdout)  # exactly one object on stdout
    power = obj["power"]
    assert set(power) == {"detectable_tv", "draws", "false_alarm"}
    assert power["detectable_tv"] <= 0.2 and power["draws"] == obj["samples"]
    assert power["false_alarm"] == obj["alpha"] == 1e-3


def test_text_output_states_the_power(capsys):
    code, out, _ = run_main(capsys, ["conform", "vllm-v1", "--samples", "500", "--only",
                                     "paper"])
    assert code == 0 and "power: a deviation of TV >= " in out and "interface ragged" in out


def test_the_largest_seed_runs(capsys):
    code, out, err = run_main(capsys, ["conform", "bv-numpy", "--samples", "20", "--only",
                                       "paper", "--seed", str(2**63 - 1)])
    assert code == 0, err


@pytest.mark.parametrize("argv, needle", [
    (["conform", "tests.cli.test_conform:exits_zero", "--only", "paper"], "SystemExit"),
    (["conform", "vllm-block", "--samples", "1000000000000"], "exceeds the limit"),
    (["conform", "vllm-block", "--detect", "1e-6"], "--detect"),
    (["conform", "vllm-block", "--seed", str(2**63)], "--seed"),
])
def test_issue_31_inputs_are_one_line_errors(capsys, argv, needle):
    code, out, err = run_main(capsys, argv)
    assert_one_line_error(code, err, needle)
    assert out == ""


def test_triton_on_cpu_is_refused_up_front(capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = run_main(capsys, ["conform", "tv-triton"])
    assert_one_line_error(code, err, "TRITON_INTERPRET=1")


def test_the_catalogue_command_prints_one_object(capsys):
    code, out, _ = run_main(capsys, ["conform", "catalogue", "--samples", "300", "--seeds", "1",
                                     "--alpha", "0.01", "--only", "paper", "--only", "markov",
                                     "--only", "ties", "--json"])
    obj = json.loads(out)
    assert code == 0, [r for r in obj["rows"] if not r["judged_right"]]
    assert {r["sampler"] for r in obj["rows"]} >= {"vllm-v1", "ascend-block-unfixed"}
    for row in obj["rows"]:
        if row["expected"] == "lossless":
            assert row["caught"] == 0 and row["draws_needed"] is None
        else:
            assert row["caught"] == 1 and row["draws_needed"] in (10, 20, 50, 100, 200, 300)
