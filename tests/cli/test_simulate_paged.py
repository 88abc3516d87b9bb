"""`specbatch simulate --kv-mode paged`: preemptions and the capacity used are reported; bad
KV settings are one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main
from tests.simulator.cost.test_registry import synthetic_profile

BASE = ["simulate", "--trace", "synth", "--requests", "24", "--policy", "fixed", "--k", "3"]


def test_a_small_paged_cache_preempts_and_reports_it(capsys):
    code = main([*BASE, "--kv-mode", "paged", "--kv-capacity", "800", "--block-size", "8",
                 "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["kv_mode"] == "paged" and summary["kv_capacity"] == 800
    assert summary["preemptions"] > 0 and summary["recomputed_tokens"] > 0
    assert summary["requests"] == 24


def test_paged_capacity_defaults_to_the_cost_models_memory(capsys):
    code = main([*BASE, "--kv-mode", "paged", "--gpu-memory-utilization", "0.9", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["kv_capacity"] == 4244  # Vicuna-33B + 68M on one H100 (roofline memory)


def test_reserve_mode_reports_no_preemption_and_an_unlimited_capacity(capsys):
    assert main([*BASE, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["kv_mode"], summary["kv_capacity"]) == ("reserve", None)
    assert summary["preemptions"] == 0 and summary["recomputed_tokens"] == 0


def test_text_output_names_the_kv_mode_and_preemptions(capsys):
    assert main([*BASE, "--kv-mode", "paged", "--kv-capacity", "800", "--block-size", "8"]) == 0
    lines = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()}
    assert lines["kv_mode"] == ["paged"] and lines["kv_capacity"] == ["800", "tokens"]
    assert int(lines["preemptions"][0]) > 0


@pytest.mark.parametrize("argv, field", [
    (["--kv-mode", "vllm"], "kv_mode"),
    (["--block-size", "0"], "block_size"),
    (["--gpu-memory-utilization", "1.2"], "gpu_memory_utilization"),
    (["--max-model-len", "5"], "max_model_len"),
    (["--kv-mode", "paged", "--kv-capacity", "300"], "kv_capacity"),
    (["--kv-mode", "paged", "--hardware", "l40s"], "gpu_memory_utilization"),
])
def test_bad_kv_settings_exit_2_with_one_line(argv, field, capsys):
    code = main([*BASE, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("specbatch: error:") and field in err


def test_a_profiled_cost_model_needs_an_explicit_paged_capacity(tmp_path, capsys):
    path = tmp_path / "profile.csv"
    synthetic_profile().to_csv(path, index=False)
    code = main([*BASE, "--cost", "profiled", "--profile", str(path), "--kv-mode", "paged"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "field kv_capacity" in err and "no memory information" in err
    code = main([*BASE, "--cost", "profiled", "--profile", str(path), "--kv-mode", "paged",
                 "--kv-capacity", "2000", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["kv_capacity"] == 2000


def test_help_documents_the_kv_flags(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "one of reserve, paged (default: reserve)" in text
    for flag in ("--block-size", "--gpu-memory-utilization", "--max-model-len"):
        assert flag in text


def test_the_demo_says_which_kv_mode_and_capacity_it_uses():
    from specbatch.analysis.report.demo import kv_description, plan_demo

    line = kv_description(plan_demo("default", quick=True).base)
    assert line.startswith("KV cache: kv_mode reserve, capacity unlimited (one h100 holds 4244")
    assert "\n" not in line
    assert "capacity 999 tokens per replica" in kv_description(
        {"hardware": "h100", "target": "vicuna-33b", "draft": "vicuna-68m", "kv_capacity": 999})
