"""benchmarks/sim_bench.py stays runnable (slow: a few seconds of simulation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_module import load_benchmark

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_bench.py"


@pytest.mark.slow
def test_sim_bench_quick_json(capsys):
    module = load_benchmark(BENCH.name)
    assert module.main(["--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["headline"]["tokens_per_s"] > 0 and out["reference"]["ratio"] > 1
    assert out["headline_v0"]["v1_over_v0"] > 0  # the same workload under vllm-v0
    assert [row["max_num_seqs"] for row in out["curve"]] == [8, 16, 32, 64, 128, 256, 512]
    assert out["paged"][0]["preemptions"] == 0 and out["paged"][1]["kv_capacity"] == 4244
    if "paths" in out:  # Vidur's workload is next to the repository
        assert [(r["policy"], r["setting"]) for r in out["paths"][:3]] == [
            ("ar", "vllm"), ("ar", "sarathi"), ("ar", "unchunked")]
        assert all(r["cpu_per_step_us"] > 0 and r["reference"]["ratio"] > 0
                   for r in out["paths"])
        assert [r["setting"] for r in out["vidur"]][-1] == "sarathi"
        assert not any("vidur" in key for row in out["vidur"] for key in row)  # no constant
