"""`specbatch tune` says where acceptance came from and carries its intervals."""

from __future__ import annotations

from tests.cli.oneline import assert_one_line_error, run_json, run_main

TINY = ["--max-num-seqs", "2", "--requests", "4", "--rates", "0.5", "--prompt-len", "fixed:8",
        "--output-len", "fixed:8", "--workers", "1"]


def test_profile_source_pair_and_intervals(tmp_path, capsys):
    code, report = run_json(capsys, ["tune", "--out", str(tmp_path / "t"), *TINY,
                                     "--target", "llama-3.1-8b", "--draft", "ngram",
                                     "--acceptance-profile", "mtp-deepseek-v3-k1"])
    assert code == 0
    acc = report["acceptance"]
    assert acc["pair_matches"] is False and "DeepSeek-V3" in acc["source"]
    assert report["question"]["k_max"] == 1  # the profile's K
    assert report["seeds"] == [0, 1, 2]
    for v in report["engines_verdict"].values():
        assert set(v["gain"]) >= {"mean", "ci_low", "ci_high"}
        assert not v["wins"] or v["gain"]["ci_low"] > 0
    assert report["fixed_tie_set"] and report["best_fixed_k"] in report["fixed_tie_set"]


def test_k_max_past_the_profile_is_refused(tmp_path, capsys):
    code, _, err = run_main(capsys, ["tune", "--out", str(tmp_path / "t"), *TINY, "--k-max",
                                     "3", "--acceptance-profile", "mtp-deepseek-v3-k1"])
    assert_one_line_error(code, err, "--k-max")
