"""`specbatch plan`: the capacity planner's answer, its reasons, and its reproducibility.

Small searches (tens of requests, one or two settings) keep every test a few seconds.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from specbatch.cli import main
from specbatch.simulator.cost.analytic.memory import kv_capacity_tokens
from tests.cli.oneline import assert_one_line_error, run_cli

QUICK = ["--no-progress", "--workers", "1"]


def plan(capsys, out, *argv) -> dict:
    assert main(["plan", "--out", str(out), *QUICK, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_issue_question_does_not_choose_one_h100_and_says_why(capsys, tmp_path):
    # Vicuna-33B + 68M draft on H100s, Poisson 4 req/s, prompts 500, outputs 200, p99 TPOT
    # <= 0.1 s. One H100 holds the 65 GB of weights but only 4,244 KV tokens next to them,
    # while each request needs ~704: memory, not speed, rules the single GPU out.
    report = plan(capsys, tmp_path / "p", "--target", "vicuna-33b", "--draft", "vicuna-68m",
                  "--hardware", "h100", "--rate", "4", "--prompt-len", "fixed:500",
                  "--output-len", "fixed:200", "--slo-tpot", "0.1", "--requests", "48",
                  "--tp", "1,2", "--max-gpus", "2", "--policies", "ar,fixed", "--k", "3",
                  "--verify", "token")
    choice = report["choice"]
    assert choice is not None and choice["gpus"] > 1
    one = [r for r in report["rejected"] if r["gpus"] == 1]
    assert len(one) == 1 and one[0]["limits"][0].startswith("memory: KV cache ran out")
    assert one[0]["memory"]["kv_available_tokens"] == 4244
    assert one[0]["memory"]["kv_needed_tokens"] > 4244
    assert choice["latency"]["tpot"] <= 0.1 and choice["memory"]["preemptions"] == 0


def test_a_kv_need_of_between_one_and_two_pools_forces_exactly_two_replicas(capsys, tmp_path):
    # 64 requests at once, prompt 60 + output 20, fixed k = 3: each grows to
    # ceil((60 + 20 + 3 + 1) / 16) = 6 blocks of 16 tokens. One H100 next to Vicuna-33B holds
    # 4,244 tokens = 265 blocks: 64 requests pass 265 blocks as soon as they hold 5 blocks
    # each (320), so one replica must preempt; two replicas of 32 need 32 x 6 = 192 <= 265.
    pool = kv_capacity_tokens("h100", "vicuna-33b", "vicuna-68m", 1, 0.9) // 16
    assert 32 * 6 <= pool < 64 * 5
    report = plan(capsys, tmp_path / "p", "--arrival", "burst", "--prompt-len", "fixed:60",
                  "--output-len", "fixed:20", "--requests", "64", "--max-num-seqs", "64",
                  "--tp", "1", "--max-gpus", "3", "--policies", "fixed", "--k", "3",
                  "--verify", "token", "--levels-after", "0")
    choice = report["choice"]
    assert (choice["tp"], choice["replicas"], choice["gpus"]) == (1, 2, 2)
    assert choice["memory"]["preemptions"] == 0
    assert (
        choice["memory"]["kv_needed_tokens"] == 32 * 84 <= choice["memory"]["kv_available_tokens"]
    )
    (one,) = report["rejected"]
    assert one["gpus"] == 1 and one["limits"][0].startswith("memory:")
    assert one["memory"]["kv_needed_tokens"] == 64 * 84
    assert report["searched"]["levels"] == 2  # stopped at the first level that fits
    assert [(c["cost"], c["passed"]) for c in report["configurations"]] == [(1, False),
                                                                          (2, True)]


def test_the_printed_config_resimulates_to_the_same_numbers_within_the_slos(capsys, tmp_path):
    report = plan(capsys, tmp_path / "p", "--rate", "3", "--prompt-len", "uniform:100,300",
                  "--output-len", "lognormal:60,0.5", "--requests", "40", "--slo-e2e", "8",
                  "--slo-tpot", "0.08", "--tp", "2", "--max-gpus", "2", "--policies",
                  "ar,tetris", "--k", "2", "--extra", "1", "--verify", "block")
    choice = report["choice"]
    assert choice is not None and choice["simulate"].endswith("plan.toml")
    out = tmp_path / "sim"
    assert main(["simulate", "--config", choice["config"], "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["policy"] == choice["policy"] and summary["preemptions"] == 0
    assert summary["e2e_p99"] == pytest.approx(choice["latency"]["e2e"], abs=1e-6)
    assert summary["e2e_p99"] <= 8
    requests = pd.read_parquet(out / "requests.parquet")
    multi = requests[requests.tokens > 1]
    tpot = ((multi.finish - multi.first_token) / (multi.tokens - 1)).quantile(0.99)
    assert tpot <= 0.08


def test_a_rerun_reuses_every_stored_run(capsys, tmp_path):
    argv = ["--rate", "2", "--prompt-len", "fixed:100", "--output-len", "fixed:30",
            "--requests", "16", "--tp", "2", "--max-gpus", "2", "--policies", "ar"]
    first = plan(capsys, tmp_path / "p", *argv)
    again = plan(capsys, tmp_path / "p", *argv)
    assert first["searched"]["computed"] > 0 and again["searched"]["computed"] == 0
    assert again["searched"]["reused"] == first["searched"]["runs"]
    assert again["choice"] == first["choice"]


def test_text_output_answers_in_a_few_lines_and_names_the_acceptance_source(capsys, tmp_path):
    argv = ["plan", "--out", str(tmp_path / "p"), *QUICK, "--rate", "2", "--prompt-len",
            "fixed:100", "--output-len", "fixed:300", "--requests", "16", "--tp", "2",
            "--max-gpus", "2", "--policies", "ar,fixed", "--k", "2", "--verify", "token"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("question: vicuna-33b + draft vicuna-68m, Poisson 2")
    assert "acceptance: trace " in text and "output positions wrapped" in text
    assert "answer: 2 x h100 (tp 2, 1 replica)" in text and "specbatch simulate --config" in text
    assert (tmp_path / "p" / "frontier.png").stat().st_size > 0


def test_a_config_json_target_and_an_acceptance_band(capsys, tmp_path):
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"hidden_size": 4096, "intermediate_size": 11008,
                                  "num_attention_heads": 32, "num_hidden_layers": 32,
                                  "vocab_size": 32000, "torch_dtype": "bfloat16"}))
    report = plan(capsys, tmp_path / "p", "--target", str(config), "--rate", "2",
                  "--prompt-len", "fixed:100", "--output-len", "fixed:40", "--requests", "16",
                  "--tp", "1", "--max-gpus", "1", "--policies", "fixed", "--k", "2",
                  "--verify", "token", "--acceptance-band", "0.5,0.9")
    assert report["choice"]["gpus"] == 1  # a 7B shape fits one H100 with room for KV
    assert report["acceptance"]["wrapped_positions"] >= 0
    assert [b["alpha"] for b in report["acceptance_band"]] == [0.5, 0.9]
    low, high = report["acceptance_band"]
    assert low["choice"] and high["choice"]
    # the same requests, more of each draft accepted: fewer steps per output token
    assert high["latency"]["tpot"] < low["latency"]["tpot"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--prompt-len", "fixed:100"], "--rate"),
    (["--rate", "0"], "--rate"),
    (["--rate", "1", "--prompt-len", "gauss:3"], "--prompt-len"),
    (["--rate", "1", "--workload", "example", "--output-len", "fixed:3"], "--output-len"),
    (["--arrival", "burst", "--rate", "2"], "--rate"),
    (["--rate", "1", "--price", "h100=free"], "--price"),
    (["--rate", "1", "--hardware", "tpu"], "hardware"),
    (["--rate", "1", "--policies", "ar,magic"], "--policies"),
    (["--rate", "1", "--slo-tpot", "-1"], "--slo-tpot"),
    (["--rate", "1", "--acceptance-band", "0.9,0.5"], "--acceptance-band"),
    (["--rate", "1", "--target", "missing/config.json"], "config.json"),
    (["--rate", "1", "--target", "no-such-model"], "model shape 'no-such-model'"),
    (["--rate", "1", "--draft", "no-such-draft"], "model shape 'no-such-draft'"),
    (["--rate", "1", "--hardware", "l40s", "--max-gpus", "1"], "weights"),
    (["--rate", "1", "--policies", "tetris", "--k", "7", "--extra", "2"], "draft depth K = 8"),
    (["--rate", "1", "--max-gpus", "1000000000"], "--max-gpus"),
    (["--rate", "1", "--max-gpus", "1024", "--requests", "4096"], "--max-gpus"),
    (["--rate", "1", "--tp", "3", "--max-gpus", "2"], "--tp"),
    (["--rate", "1", "--price", "h100=1e308"], "--price"),
    (["--rate", "1", "--price", "h100=1e-300"], "--price"),
    (["--rate", "1", "--price", "h100=inf"], "--price"),
])
def test_bad_input_is_one_line_error(capsys, tmp_path, argv, needle):
    code = main(["plan", "--out", str(tmp_path / "p"), *QUICK, *argv])
    assert_one_line_error(code, capsys.readouterr().err, needle)
    if needle.startswith("--"):  # a bad flag is refused before the directory is made
        assert not (tmp_path / "p").exists()


def test_a_directory_of_other_files_is_refused_and_kept(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    code = main(["plan", "--out", str(tmp_path), *QUICK, "--rate", "1"])
    assert_one_line_error(code, capsys.readouterr().err, "not a plan's")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_offered_rate_beyond_the_deployment_is_not_sustained(capsys, tmp_path):
    # 8 running requests of ~100 tokens at ~10 ms a step serve < 10 req/s; 50 req/s arrive.
    report = plan(capsys, tmp_path / "p", "--target", "vicuna-7b", "--rate", "50",
                  "--prompt-len", "fixed:100", "--output-len", "fixed:100", "--requests", "64",
                  "--max-num-seqs", "8", "--tp", "1", "--max-gpus", "1", "--policies", "ar")
    assert report["choice"] is None and report["pareto"] == []
    (one,) = report["rejected"]
    assert one["limits"][0].startswith("rate not sustained")
    assert one["memory"]["preemptions"] == 0  # plenty of KV: the queue, not memory, limits it


PLAN = ["plan", "--no-progress", "--workers", "1", "--rate", "4", "--prompt-len", "fixed:100",
        "--output-len", "fixed:20", "--slo-tpot", "0.1", "--requests", "8", "--tp", "2",
        "--max-gpus", "2", "--policies", "ar,fixed", "--k", "2", "--verify", "token"]


def snapshot(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file()}


def test_a_folder_of_the_users_plan_named_files_is_refused_byte_for_byte(tmp_path):
    # issue 31: workload.csv, plan.toml, frontier.png of the user's, no plan.json
    out = tmp_path / "D"
    out.mkdir()
    for name, data in (("workload.csv", b"prompt_len,output_len\n1,2\n"),
                       ("plan.toml", b"policy = 'ar'\n"), ("frontier.png", b"\x89PNG mine")):
        (out / name).write_bytes(data)
    before = snapshot(out)
    proc = run_cli([*PLAN, "--out", str(out)], tmp_path)
    assert_one_line_error(proc.returncode, proc.stderr, "not a plan's")
    assert snapshot(out) == before and sorted(p.name for p in out.iterdir()) == sorted(before)


def test_a_second_plan_with_other_lengths_is_refused_before_it_rewrites_anything(capsys,
                                                                                 tmp_path):
    out = tmp_path / "p"
    assert main([*PLAN, "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    before = snapshot(out)
    other = [a if a != "fixed:20" else "fixed:200" for a in PLAN]
    code = main([*other, "--out", str(out)])
    assert_one_line_error(code, capsys.readouterr().err, "another question")
    assert snapshot(out) == before  # workload.csv, plan.toml, plan.json, runs: every byte


def test_a_failing_figure_costs_only_the_figure(capsys, tmp_path, monkeypatch):
    import specbatch.analysis.plan.figure as figure

    def broken(*args, **kwargs):
        raise OverflowError("cost 1e308 x 2 GPUs")

    monkeypatch.setattr(figure, "frontier_figure", broken)
    report = plan(capsys, tmp_path / "p", *PLAN[1:])
    assert report["figure"] is None and report["choice"] is not None
    written = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert written["choice"] == report["choice"] and written["figure"] is None
    assert not (tmp_path / "p" / "frontier.png").exists()


def test_json_without_out_answers_from_a_cache_folder(capsys, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    proc = run_cli([*PLAN, "--json"], tmp_path, SPECBATCH_CACHE=str(cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)  # stdout is exactly one JSON object
    assert report["out"].startswith(str(cache / "plan")) and report["choice"] is not None
    monkeypatch.setenv("SPECBATCH_CACHE", str(cache))
    assert main([*PLAN, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["out"] == report["out"] and again["searched"]["computed"] == 0  # reused


def test_a_sliding_window_target_with_the_default_draft_plans_and_reruns(tmp_path):
    """Issue 46: plan on Mistral-7B-v0.1 with the default draft used to fail naming
    disable_hybrid_kv_cache_manager, a flag plan lacked: it now sets it (a note on stderr),
    writes it into plan.toml, and the printed config re-runs."""
    out = tmp_path / "p"
    proc = run_cli(["plan", "--out", str(out), *QUICK, "--target", "mistral-7b-v0.1",
                    "--hardware", "h100", "--tp", "1", "--policies", "ar", "--rate", "1",
                    "--requests", "8", "--slo-tpot", "0.5", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # one JSON object
    assert report["choice"] is not None
    assert "note: disable_hybrid_kv_cache_manager set" in proc.stderr
    assert "disable_hybrid_kv_cache_manager = true" in (out / "plan.toml").read_text()
    rerun = run_cli(["simulate", "--config", str(out / "plan.toml"), "--json"], tmp_path)
    assert rerun.returncode == 0, rerun.stderr


def test_the_progress_bar_has_a_total_and_an_eta(tmp_path):
    """Issue 46: the bar counted runs with no total. It now names the cost level it is in
    (of how many) and counts that level's candidates (shrinking as bounds skip some), so
    tqdm shows n/total and a remaining time."""
    proc = run_cli(["plan", "--out", str(tmp_path / "p"), "--workers", "1", "--target",
                    "vicuna-7b", "--draft", "vicuna-68m", "--hardware", "h100", "--tp", "1,2",
                    "--max-gpus", "2", "--policies", "ar,fixed", "--k", "2", "--rate", "2",
                    "--requests", "8", "--slo-tpot", "0.5"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    frames = [f for f in proc.stderr.replace("\r", "\n").splitlines()
              if f.startswith("plan: cost level ")]
    assert frames, proc.stderr
    eta = re.compile(r"^plan: cost level (\d+)/(\d+): .* (\d+)/(\d+) \[\d\d:\d\d<\d\d:\d\d")
    timed = [m for m in map(eta.match, frames) if m]
    assert timed, frames  # n/total with a remaining time, not "?"
    assert {m.group(1) for m in timed} >= {"1"}
    assert all(int(m.group(3)) <= int(m.group(4)) for m in timed)


def test_a_bad_async_scheduling_is_one_line_error(capsys, tmp_path):
    from tests.cli.oneline import run_main

    code, _, err = run_main(capsys, ["plan", "--out", str(tmp_path / "p"), *QUICK, "--rate", "1",
                                     "--async-scheduling", "maybe"])
    assert_one_line_error(code, err, "--async-scheduling: expected auto, true or false")
    assert not (tmp_path / "p").exists()


def test_async_scheduling_is_in_the_question_only_when_given():
    """--async-scheduling auto (the default) leaves the question as it was (each run resolves
    vLLM's default: SimConfig.async_setting); true / false go into every run's config."""
    from specbatch.cli import parse_command
    from specbatch.cli.plan import build_question

    argv = ["plan", "--out", "x", "--rate", "1"]
    assert "async_scheduling" not in build_question(parse_command(argv)[1]).base
    for text, value in (("false", False), ("true", True), ("auto", None)):
        base = build_question(parse_command([*argv, "--async-scheduling", text])[1]).base
        assert base.get("async_scheduling") is value, text
