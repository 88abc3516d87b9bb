"""specbatch/cli/conform.py: `specbatch conform VERIFIER` exit codes and output."""

from __future__ import annotations

import json

import torch

from specbatch.cli import main
from tests.theory.test_conform import resample_from_target  # noqa: F401 (loaded by path)


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
