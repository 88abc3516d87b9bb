"""The planner over several seeds: where acceptance came from, paired gains, the tie set, and
the break-even acceptance (analysis.plan.seeds, analysis.plan.breakeven)."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main

QUICK = ["--no-progress", "--workers", "1", "--rate", "4", "--prompt-len", "fixed:100",
         "--output-len", "fixed:64", "--requests", "48", "--slo-tpot", "0.05", "--tp", "1",
         "--max-gpus", "1", "--verify", "token"]


def plan(capsys, out, *argv) -> dict:
    assert main(["plan", "--out", str(out), *QUICK, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_borrowed_trace_says_so(capsys, tmp_path):
    report = plan(capsys, tmp_path / "p", "--target", "llama-3.1-70b", "--draft",
                  "llama-3.2-1b", "--tp", "4", "--max-gpus", "4", "--policies", "ar,fixed",
                  "--k", "1", "--seeds", "1", "--no-breakeven")
    acc = report["acceptance"]
    assert acc["pair_matches"] is False and "smollm2" in acc["source"]
    assert "uncertainty" not in report


@pytest.fixture(scope="module")
def ngram_plan(tmp_path_factory):
    """A plan on the asked pair's published profile, 3 seeds, break-even on."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("plan") / "p"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["plan", "--out", str(out), *QUICK, "--target", "llama-3.1-8b", "--draft",
                     "ngram", "--acceptance-profile", "ngram-llama3.1-8b-code-edit",
                     "--policies", "ar,fixed", "--k", "1,2,3", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_the_asked_pairs_profile_matches(ngram_plan):
    acc = ngram_plan["acceptance"]
    assert acc["pair_matches"] is True and "PR #24344" in acc["source"]


def test_every_candidate_has_a_paired_gain_and_each_seeds_best_is_tied(ngram_plan):
    unc = ngram_plan["uncertainty"]
    assert unc["seeds"] == [0, 1, 2]
    for c in unc["candidates"]:
        gain = c["gain"]
        assert gain["ci_low"] <= gain["mean"] <= gain["ci_high"]
    for i in range(3):
        top = max(c["values"][i] for c in unc["candidates"])
        best_here = [c["label"] for c in unc["candidates"] if c["values"][i] == top]
        assert set(best_here) & set(unc["tie_set"])
    choice = ngram_plan["choice"]
    assert choice["speculation"] == unc["answer"] and choice["tie_set"] == unc["tie_set"]
    assert set(choice["gain"]) >= {"mean", "ci_low", "ci_high"}


def test_break_even_brackets_a_lower_acceptance(ngram_plan):
    be = ngram_plan["breakeven"]
    assert "bisection" in be["method"] and be["settings"]
    for s in be["settings"]:
        assert 0 <= s["scale_low"] < s["scale"] <= 1
        assert s["mal_at_k"] <= s["mal_measured"]


def test_the_bundled_band_of_the_drafter_kind(ngram_plan):
    band = ngram_plan["bundled_band"]
    assert band["kind"] == "ngram"
    (end,) = band["ends"]  # one bundled n-gram profile: both ends
    assert end["profile"] == "ngram-llama3.1-8b-code-edit" and "ar" in end["compared"]
    assert end["best"] is not None
