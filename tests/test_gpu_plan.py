"""The GPU plan's pieces stay runnable on CPU (issue 7): benchmarks/verify_gpu_bench.py --quick
writes rows with the documented fields and positive bandwidths, and benchmarks/gpu/run_h200.sh
knows its steps."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "verify_gpu_bench.py"
PLAN = ROOT / "benchmarks" / "gpu" / "run_h200.sh"


def load_bench():
    spec = importlib.util.spec_from_file_location("verify_gpu_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_cpu_run_writes_documented_rows(tmp_path):
    bench = load_bench()
    path = tmp_path / "verify.json"
    bench.main(["--device", "cpu", "--quick", "--batch", "4", "--gamma", "3", "--vocab", "512",
                "--repeats", "2", "--copy-mib", "8", "--json", str(path)])
    report = json.loads(path.read_text())
    assert report["device"] == "cpu" and report["quick"] is True
    assert report["copy_gbps"] > 0
    rows = report["rows"]
    assert [r["dtype"] for r in rows] == ["float32", "bfloat16"]
    for row in rows:
        assert set(bench.ROW_FIELDS) <= set(row)
        assert row["tv_gbps"] > 0 and row["bv_gbps"] > 0
        assert row["tv_ms"] > 0 and row["bv_ms"] > 0
        assert row["bv_over_tv"] == row["bv_ms"] / row["tv_ms"]
        assert row["bv_frac_copy"] == row["bv_gbps"] / report["copy_gbps"]
        assert 0 <= row["mean_tau_tv"] <= 3 and 0 <= row["mean_tau_bv"] <= 3
    f32, bf16 = rows
    assert f32["bytes"] == (2 * 3 + 1) * 4 * 512 * 4 and not f32["upcast"]
    assert bf16["bytes"] == f32["bytes"] // 2 and bf16["upcast"]


def test_bytes_formula_counts_both_rows_per_position_and_the_bonus_row():
    bench = load_bench()
    assert bench.verify_bytes(batch=64, gamma=8, vocab=128256, itemsize=2) == (
        2 * 64 * 8 * 128256 * 2 + 64 * 128256 * 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only default")
def test_quick_is_the_default_without_cuda(capsys):
    bench = load_bench()
    report = bench.main(["--batch", "2", "--gamma", "2", "--vocab", "256", "--warmup", "0",
                         "--repeats", "1", "--copy-mib", "4"])
    assert report["device"] == "cpu" and report["quick"] is True
    assert report["repeats"] == 1 and len(report["rows"]) == len(bench.QUICK_GRID["dtype"])
    assert "BV/TV" in capsys.readouterr().out


def test_plan_lists_its_steps():
    out = subprocess.run(["bash", str(PLAN), "list"], capture_output=True, text=True, check=True)
    steps = out.stdout.split()
    assert steps == ["setup", "verify", "profile", "zoo", "live"]
