"""specbatch/cli/prove.py: `specbatch optimum multidraft` and `specbatch optimum tree`."""

from __future__ import annotations

import pytest

from specbatch.cli import main
from tests.cli.oneline import run_json, run_main


def test_multidraft_paper_pair(capsys, paper_file):
    code, out = run_json(capsys, ["optimum", "multidraft", "--pair", paper_file, "--drafts", "2"])
    assert code == 0
    assert out["optimal_acceptance"] == pytest.approx(8 / 9)
    assert out["lp"] == pytest.approx(8 / 9, abs=1e-9)
    assert out["fractions"]["optimal_acceptance"] == "8/9"
    assert out["fractions"]["specinfer"] == "7/9"
    for row in out["verifiers"].values():
        assert row["residual"] == 0.0 and row["gap_to_optimum"] >= -1e-9
    assert set(out["verifiers"]) == {"specinfer", "specinfer_without_replacement", "spectr"}


def test_multidraft_text(capsys, paper_file):
    assert main(["optimum", "multidraft", "--pair", paper_file, "--drafts", "2"]) == 0
    text = capsys.readouterr().out
    assert "(= 8/9)" in text and "(= 7/9)" in text and "SpecTr ρ" in text


def test_tree_depth_one_matches_multidraft(capsys, paper_file):
    code, out = run_json(capsys, ["optimum", "tree", "--pair", paper_file, "--tree", "2"])
    assert code == 0
    assert out["lp_valid"] == pytest.approx(8 / 9, abs=1e-9)
    assert out["fractions"]["specinfer"] == "7/9"
    assert set(out["verifiers"]) == {"specinfer", "traversal"}


def test_tree_paths_adds_gbv_and_text_lists_every_verifier(capsys, paper_file):
    code, out = run_json(capsys, ["optimum", "tree", "--pair", paper_file, "--tree", "3x2"])
    assert code == 0 and set(out["verifiers"]) == {"specinfer", "traversal", "gbv"}
    for row in out["verifiers"].values():
        assert row["residual"] == 0.0 and len(row["depth_acceptance"]) == 2
        assert row["expected_accepted"] <= out["lp_valid"] + 1e-7
    assert main(["optimum", "tree", "--pair", paper_file, "--tree", "2,1",
                 "--sampling", "distinct"]) == 0
    text = capsys.readouterr().out
    assert "traversal" in text and "best valid" in text and "without" not in text


@pytest.mark.parametrize("argv, needle", [
    (["tree", "--tree", "2,x"], "--tree: expected"),
    (["tree", "--tree", "8,8,8"], "exact-enumeration limit"),
    (["multidraft", "--drafts", "30"], "LP variables"),
    (["multidraft", "--drafts", "0"], "--drafts"),
])
def test_errors_are_one_line_exit_2(capsys, paper_file, argv, needle):
    code, _, err = run_main(capsys, ["optimum", argv[0], "--pair", paper_file, *argv[1:]])
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err


def test_missing_pair_file(capsys, tmp_path):
    code, _, err = run_main(capsys, ["optimum", "tree", "--pair", str(tmp_path / "no.json"),
                                     "--tree", "2"])
    assert code == 2 and "not found" in err
