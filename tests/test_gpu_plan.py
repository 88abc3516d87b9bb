"""The GPU plan's pieces stay runnable on CPU (issues 7 and 16): benchmarks/verify_gpu_bench.py
--quick writes rows with the documented fields and positive bandwidths, benchmarks/gpu/run_h200.sh
knows its steps, and the SmolLM2 helper's model-free pieces (GGUF row permutation, layer
choices, speed-up estimate) do what they say."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "verify_gpu_bench.py"
PLAN = ROOT / "benchmarks" / "gpu" / "run_h200.sh"


def load_bench():
    return load_benchmark(BENCH.name)


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
    # the simulator's sampler floors of the float32 cell (simulator.cost.verify_cost)
    assert set(report["sampler_floors"]) == {"torch"}
    assert set(report["sampler_floors"]["torch"]) == {"tv_s", "bv_per_position_s"}


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
    assert steps == ["setup", "verify", "profile", "smollm2", "zoo", "live"]


@pytest.mark.slow
def test_cpu_smoke_run_of_every_step_fits_the_device_return_limits(tmp_path):
    """SMOKE=1 ... all (about 2 minutes on 2 cores): each device call's files stay within what
    the device returns (<= 8 files, <= 2 folders down, plain names)."""
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "SMOKE": "1", "OUT": str(out), "WORK": str(work),
           "SMOL_PARTS": str(tmp_path / "parts")}  # no GGUF parts: the smollm2 step skips
    subprocess.run(["bash", str(PLAN), "all"], env=env, check=True, timeout=600,
                   capture_output=True)
    files = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
    assert all(len(p.parts) <= 3 and all(re.fullmatch(r"[A-Za-z0-9._-]+", part)
                                         for part in p.parts) for p in files)
    calls = {"A": ("env.txt", "verify", "profiles"), "B": ("zoo",), "C": ("live",),
             "D": ("smollm2",)}
    for call, tops in calls.items():
        assert 1 <= sum(p.parts[0] in tops for p in files) <= 8, call
    fits = [json.loads(line) for line in (out / "profiles" / "fits.jsonl").read_text().splitlines()]
    assert len(fits) == 3 and all(v > 0 for f in fits for v in f["cv_mape"].values())
    rows = json.loads((out / "verify" / "verify_gpu.json").read_text())["rows"]
    assert rows and all(r["bv_gbps"] > 0 for r in rows)
    for name in ("trace-t1.tar.gz", "trace-t0.tar.gz", "live-zoo.tar.gz", "zoo.json"):
        assert (out / "zoo" / name).stat().st_size > 0
    zoo = json.loads((out / "zoo" / "zoo.json").read_text())  # the 2 s budget ended training
    assert zoo["max_seconds"] == 2 and zoo["stopped_early"] is True
    assert 1 <= zoo["steps_done"] <= zoo["steps"] < zoo["steps_requested"]
    import pandas as pd

    target = pd.read_parquet(out / "profiles" / "llama-3.1-8b.parquet")
    assert len(target) == 7 and target.attrs["skipped_cells"] == [[2, 2, 16]]
    for name in ("validate-fixed-token.json", "validate-tetris-block.json"):
        report = json.loads((out / "live" / name).read_text())
        assert report["measured"]["throughput"] > 0 and report["simulated"]["throughput"] > 0


def load_smollm2():
    return load_benchmark("gpu/smollm2.py")


def test_smollm2_shape_matches_the_converted_model():
    from specbatch.traces.models.shapes import get_shape

    shape = get_shape("smollm2-135m")
    # the parameter count of the float32 model converted from the GGUF (embedding tied)
    assert shape.params == 134_515_008 and shape.head_dim == 64 and shape.tie_embeddings


def test_gguf_reverse_permute_undoes_llama_cpp_permute():
    import numpy as np

    load_smollm2()  # puts benchmarks/gpu on sys.path for its sibling module
    import smollm2_models as smol

    rng = np.random.default_rng(0)
    for n_head in (9, 3):
        w = rng.standard_normal((n_head * 64, 576)).astype(np.float32)
        # llama.cpp's convert_hf_to_gguf permutation of q_proj / k_proj rows
        permuted = w.reshape(n_head, 2, 32, 576).swapaxes(1, 2).reshape(w.shape)
        assert np.array_equal(smol.reverse_permute(permuted, n_head), w)


def test_smollm2_layer_choices_and_speedup():
    smol = load_smollm2()
    assert smol.middle_drop(30, 2) == [i for i in range(30) if i not in (14, 15)]
    assert smol.middle_drop(30, 4) == [i for i in range(30) if i not in (13, 14, 15, 16)]
    assert smol.init_layers(30, 2, "spread") == [0, 29]
    assert smol.init_layers(30, 4, "spread") == [0, 10, 19, 29]
    assert smol.init_layers(30, 4, "ends") == [0, 1, 28, 29]
    # α = 0: one token per step of k draft passes + one verify pass
    assert smol.speedup(0.0, 3, 1.0, 10.0, 10.0) == pytest.approx(10.0 / 13.0)
    assert smol.speedup(1.0, 3, 0.0, 10.0, 10.0) == pytest.approx(4.0)
