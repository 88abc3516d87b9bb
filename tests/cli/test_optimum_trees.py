"""specbatch/cli/prove.py: `specbatch optimum multidraft` and `specbatch optimum tree`."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main

PAPER = {"vocab": 2, "draft": {"iid": ["2/3", "1/3"]}, "target": {"iid": ["1/3", "2/3"]}}


def exit_code(argv) -> int:
    """main's return code, or the code of the SystemExit argparse raises on a usage error."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def run_json(capsys, argv):
    code = main(argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def paper_file(tmp_path):
    path = tmp_path / "pair.json"
    path.write_text(json.dumps(PAPER))
    return str(path)


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
    code = exit_code(["optimum", argv[0], "--pair", paper_file, *argv[1:]])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err


def test_missing_pair_file(capsys, tmp_path):
    code = exit_code(["optimum", "tree", "--pair", str(tmp_path / "no.json"), "--tree", "2"])
    assert code == 2 and "not found" in capsys.readouterr().err
