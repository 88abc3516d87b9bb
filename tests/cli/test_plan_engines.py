"""`specbatch plan` for what engines run: a head drafter (--draft eagle3) on a Hugging Face id
offline, the engine lines of its answer accepted by the parser twins (block verification
named as vLLM's rejection_sample_method), and --max-rate's capacity search."""

from __future__ import annotations

import json
import shlex

from specbatch.analysis.engines import vllm
from tests.cli.oneline import assert_one_line_error, run_json, run_main

BASE = ["--target", "meta-llama/Llama-3.1-8B-Instruct", "--draft", "eagle3",
        "--prompt-len", "fixed:64", "--output-len", "fixed:32", "--requests", "16",
        "--slo-tpot", "0.05", "--tp", "1", "--k", "2", "--policies", "fixed",
        "--workers", "1", "--no-progress"]


def test_plan_with_an_eagle3_head_names_the_engine_settings(tmp_path, capsys):
    code, report = run_json(capsys, ["plan", "--out", str(tmp_path / "p"), "--rate", "2",
                                     "--verify", "block", "--max-gpus", "1", *BASE])
    assert code == 0 and report["choice"] is not None
    line = report["choice"]["engines"]["vllm"]
    config = vllm.check_speculative_config(shlex.split(line)[1])
    assert config["method"] == "eagle3" and config["rejection_sample_method"] == "block"
    assert config["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert report["choice"]["engines"]["tensorrt-llm"].startswith("none:")


def test_max_rate_finds_a_bracketed_capacity(tmp_path, capsys):
    code, report = run_json(capsys, ["plan", "--max-rate", "--out", str(tmp_path / "m"),
                                     "--verify", "token", "--rate-tolerance", "0.1", *BASE])
    assert code == 0 and report["bounded"] and report["max_rate"] > 0
    assert report["first_failing"] / report["max_rate"] <= 1.1
    assert json.loads((tmp_path / "m" / "max_rate.json").read_text()) == report


def test_max_rate_needs_one_deployment(tmp_path, capsys):
    code, _, err = run_main(capsys, ["plan", "--max-rate", "--out", str(tmp_path / "m"),
                                     *BASE, "--tp", "1,2"])
    assert_one_line_error(code, err, "--tp")


def test_a_draft_head_needs_an_eagle_draft(tmp_path, capsys):
    code, _, err = run_main(capsys, ["plan", "--out", str(tmp_path / "x"), "--rate", "1",
                                     "--draft", "vicuna-68m", "--draft-head", "h.json"])
    assert_one_line_error(code, err, "--draft-head")


def test_max_rate_of_a_dp_ep_moe_deployment(tmp_path, capsys):
    code, report = run_json(capsys, [
        "plan", "--max-rate", "--out", str(tmp_path / "m"), "--target", "Qwen/Qwen3-30B-A3B",
        "--draft", "ngram", "--cost", "roofline", "--data-parallel-size", "2",
        "--enable-expert-parallel", "--prompt-len", "fixed:64", "--output-len", "fixed:32",
        "--requests", "16", "--slo-tpot", "0.05", "--tp", "1", "--k", "2", "--policies",
        "fixed", "--verify", "token", "--rate-tolerance", "0.2"])
    assert code == 0 and report["max_rate"] > 0
    assert report["question"]["data_parallel_size"] == 2
    assert report["question"]["enable_expert_parallel"] is True
    assert "DP 2 + EP" in report["deployment"]
    code, _, err = run_main(capsys, ["plan", "--out", str(tmp_path / "s"), "--rate", "1",
                                     "--data-parallel-size", "2"])
    assert_one_line_error(code, err, "--max-rate only")


def test_the_vllm_line_carries_the_plans_precision():
    from specbatch.analysis.plan.engine_advice import engine_lines

    lines = engine_lines({"draft": "eagle3", "target": "meta-llama/Llama-3.1-8B-Instruct",
                          "quantization": "fp8", "kv_cache_dtype": "fp8"}, "fixed", 3,
                         "token", 64)
    words = shlex.split(lines["vllm"])
    assert words[:4] == ["--quantization", "fp8", "--kv-cache-dtype", "fp8"]
    assert vllm.check_speculative_config(words[5])["num_speculative_tokens"] == 3
    assert engine_lines({}, "ar", None, "token", 8)["vllm"].startswith("no speculative")


def test_the_vllm_line_carries_an_async_scheduling_the_plan_set():
    """auto is vLLM's default (no flag); false is --no-async-scheduling; true is
    --async-scheduling where vLLM takes it (not with the CPU n-gram proposer, where it is a
    ValueError and the simulator dropped it: simulator.cost.features.async_overhead)."""
    from specbatch.analysis.plan.engine_advice import vllm_serve_flags

    for draft in ("vicuna-68m", "eagle3", "ngram"):
        assert vllm_serve_flags({"draft": draft}, True) == ""
        assert vllm_serve_flags({"draft": draft, "async_scheduling": "auto"}, True) == ""
        assert vllm_serve_flags({"draft": draft, "async_scheduling": False},
                                True) == "--no-async-scheduling"
    assert vllm_serve_flags({"draft": "vicuna-68m", "async_scheduling": True},
                            True) == "--async-scheduling"
    assert vllm_serve_flags({"draft": "ngram", "async_scheduling": True}, True) == ""
    assert vllm_serve_flags({"draft": "ngram", "async_scheduling": True},
                            False) == "--async-scheduling"  # ar: no speculative config
