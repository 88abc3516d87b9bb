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


PAIR3 = {"vocab": 3, "draft": {"iid": ["1/2", "1/3", "1/6"]},
         "target": {"iid": ["1/6", "1/3", "1/2"]}}


@pytest.mark.parametrize("argv, needle", [
    (["multidraft", "--drafts", "10"], "3^10 draft tuples x 3 outputs at V=3, above the limit "
     "of 20000 LP variables"),
    (["tree", "--tree", "1,1,1,1,1,1"], "tree LP: 2.41e6 constraint coefficients"),
])
def test_work_past_the_limits_is_refused_up_front_not_left_to_hang(capsys, tmp_path, argv,
                                                                   needle, monkeypatch):
    """Within the old limits (V^(n+1) <= 200,000; 50,000 realised trees) these ran for
    minutes to hours: the LP's size, estimated first, now refuses them in one line."""
    import json
    import time

    monkeypatch.delenv("SPECBATCH_ALLOW_LARGE", raising=False)
    path = tmp_path / "pair3.json"
    path.write_text(json.dumps(PAIR3))
    start = time.perf_counter()
    code, _, err = run_main(capsys, ["optimum", argv[0], "--pair", str(path), *argv[1:]])
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert "SPECBATCH_ALLOW_LARGE=1" in err
    assert time.perf_counter() - start < 10.0


def test_the_tree_lp_estimate_counts_its_coefficients_exactly_on_a_chain():
    """lp_nonzeros is the count the build makes (a float pair: no zero coefficient)."""
    from specbatch.theory.exact.small_models import pair_from_dict
    from specbatch.theory.trees.lp import lp_nonzeros, node_set_law, tree_program
    from specbatch.theory.trees.tree_shapes import parse_shape, tree_law

    pair = pair_from_dict({"vocab": 3, "draft": {"iid": [0.5, 0.3, 0.2]},
                           "target": {"iid": [0.2, 0.3, 0.5]}})
    for text in ("1,1,1", "2,1", "2x2"):
        shape = parse_shape(text, "iid")
        sets = list(node_set_law(tree_law(pair, shape)))
        built = tree_program(pair, shape.depth, dict.fromkeys(sets, 0.0)).a_eq.nnz
        # every coefficient but the dropped last validity equation's: one per (N, s ∈ N)
        # whose path is a prefix of that z (the z of all-last tokens)
        last = pair.vocab - 1
        dropped = sum(all(t == last for t in s) for key in sets for s in key)
        assert lp_nonzeros(pair.vocab, shape.depth, sets) - built == dropped, text


def test_missing_pair_file(capsys, tmp_path):
    code, _, err = run_main(capsys, ["optimum", "tree", "--pair", str(tmp_path / "no.json"),
                                     "--tree", "2"])
    assert code == 2 and "not found" in err
