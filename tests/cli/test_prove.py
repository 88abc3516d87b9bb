"""specbatch/cli/prove.py: `specbatch prove` and `specbatch optimum verify|allocate`."""

from __future__ import annotations

import json

import numpy as np
import pytest

import specbatch.theory.theorems as catalogue
from specbatch.cli import main
from specbatch.theory.theorems import CheckResult, Theorem
from tests.cli.conftest import PAPER
from tests.cli.oneline import run_json


def test_optimum_verify_paper_example(capsys, paper_file):
    code, out = run_json(capsys, ["optimum", "verify", "--pair", paper_file, "--gamma", "2"])
    assert code == 0
    for key in ("token", "block", "lp_valid", "lp_joint", "residual_token", "residual_block"):
        assert isinstance(out[key], float)
    assert out["token"] == pytest.approx(10 / 9) and out["block"] == pytest.approx(11 / 9)
    assert out["lp_valid"] == pytest.approx(11 / 9, abs=1e-9)
    assert out["lp_joint"] == pytest.approx(12 / 9, abs=1e-9)
    assert out["residual_token"] == 0.0 and out["residual_block"] == 0.0
    assert out["fractions"]["token"] == "10/9" and out["fractions"]["block"] == "11/9"


def test_optimum_verify_text(capsys, paper_file):
    assert main(["optimum", "verify", "--pair", paper_file, "--gamma", "2"]) == 0
    text = capsys.readouterr().out
    assert "(= 11/9)" in text and "LP B" in text


@pytest.mark.parametrize(
    "content, gamma, message",
    [(json.dumps({"vocab": 2, "draft": {"iid": [0.5, 0.6]}, "target": {"iid": [1, 0]}}), "2",
      "model 'draft' (iid): row: row must sum to 1"),
     (json.dumps(PAPER), "0", "--gamma: expected an integer >= 1"),
     (json.dumps({"vocab": 4, "draft": {"iid": [0.25] * 4}, "target": {"iid": [0.25] * 4}}),
      "4", "LP B: instance has 5120 variables (V=4, γ=4), above the limit of 1000"),
     ("{", "2", "invalid JSON")],
)
def test_optimum_verify_errors_are_one_line_exit_2(capsys, tmp_path, content, gamma, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code = main(["optimum", "verify", "--pair", str(path), "--gamma", gamma,
                 "--max-variables", "1000"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_optimum_verify_refuses_a_huge_gamma_before_enumerating(capsys, tmp_path):
    """γ = 30 on the paper's pair is 2^30 drafts: refused from V^γ alone, in milliseconds."""
    import time

    path = tmp_path / "paper.json"
    path.write_text(json.dumps(PAPER))
    start = time.perf_counter()
    code = main(["optimum", "verify", "--pair", str(path), "--gamma", "30"])
    err = capsys.readouterr().err
    assert code == 2 and "--max-variables" in err and err.count("\n") == 1
    assert time.perf_counter() - start < 2.0


def test_optimum_allocate_npy_and_csv(capsys, tmp_path):
    values = np.array([[0.24, 0.0], [0.21, 0.54]])
    npy, csv = tmp_path / "v.npy", tmp_path / "v.csv"
    np.save(npy, values)
    np.savetxt(csv, values, delimiter=",")
    for path in (npy, csv):
        code, out = run_json(capsys, ["optimum", "allocate", "--values", str(path),
                                      "--budget", "2", "--milp"])
        assert code == 0
        assert out["greedy"] == [1, 1] and out["optimal"] == [0, 2]
        assert out["greedy_value"] == pytest.approx(0.45)
        assert out["optimal_value"] == pytest.approx(0.75) == out["milp_value"]
        assert out["gap"] == pytest.approx(0.30)


def test_optimum_allocate_errors(capsys, tmp_path):
    bad = tmp_path / "neg.csv"
    bad.write_text("0.5,-1\n")
    assert main(["optimum", "allocate", "--values", str(bad), "--budget", "1"]) == 2
    assert f"file {bad}:" in capsys.readouterr().err
    assert main(["optimum", "allocate", "--values", str(tmp_path / "no.npy"),
                 "--budget", "1"]) == 2
    assert "got no such file" in capsys.readouterr().err


def test_prove_json_subset(capsys):
    code, out = run_json(capsys, ["prove", "--instances", "2", "--seed", "4",
                                  "--only", "bv_lossless", "--only", "dp_equals_milp"])
    assert code == 0 and out["passed"] is True
    assert [t["name"] for t in out["theorems"]] == ["bv_lossless", "dp_equals_milp"]
    row = out["theorems"][0]
    assert set(row) >= {"statement", "source", "instances", "margin", "verdict"}
    assert row["verdict"] == "pass" and row["margin"] == 0.0


def test_prove_exits_1_when_a_theorem_fails(capsys, monkeypatch):
    broken = Theorem("broken", "False things hold.", "nowhere", "error", 0.0,
                     lambda rng, n, t: CheckResult(n, 0.5, False))
    monkeypatch.setattr(catalogue, "CATALOGUE", catalogue.CATALOGUE + (broken,))
    assert main(["prove", "--instances", "1", "--only", "broken"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and "0/1 theorems pass" in text


def test_prove_rejects_unknown_theorem(capsys):
    assert main(["prove", "--only", "nonsense"]) == 2
    assert "--only: expected one of" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["prove"], ["optimum"], ["optimum", "verify"],
                                  ["optimum", "allocate"]])
def test_help_has_an_example(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv + ["--help"])
    assert info.value.code == 0
    assert "example:" in capsys.readouterr().out


@pytest.mark.slow
def test_prove_default_passes_within_a_minute(capsys):
    import time

    start = time.perf_counter()
    assert main(["prove"]) == 0
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize("argv, needle", [
    (["--gamma", "1000000"], "LP B: instance has more than 2^100 variables (V=2, γ=1000000)"),
    (["--gamma", "9223372036854775807"], "more than 2^100 variables"),
    (["--gamma", "8", "--max-variables", "100000000000"],
     "--max-variables: 100000000000 exceeds the limit of 200000"),
])
def test_optimum_verify_sizes_are_refused_in_one_line(capsys, tmp_path, argv, needle,
                                                      monkeypatch):
    """γ = 10^6 was a 4300-digit ValueError traceback; --max-variables 1e11 ran for hours."""
    monkeypatch.delenv("SPECBATCH_ALLOW_LARGE", raising=False)
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(PAPER))
    from tests.cli.oneline import run_main

    code, _, err = run_main(capsys, ["optimum", "verify", "--pair", str(path), *argv])
    assert code == 2 and needle in err and err.count("\n") == 1, err
