"""benchmarks/vidur_side_by_side.py's own pieces (Vidur itself never runs in the suite): the
attention file that replaces Vidur's missing profile prices hand-computed cells, the workload
reaches Vidur row for row, specbatch's command lines parse and time one simulation on the engine
asked for, and without Vidur the script says so and exits 0."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.benchmark_module import load_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vidur_side_by_side.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark(SCRIPT.name)


def cell(frame: pd.DataFrame, chunk: int, cache: int, batch: int) -> pd.Series:
    rows = frame[(frame.prefill_chunk_size == chunk) & (frame.kv_cache_size == cache)
                 & (frame.batch_size == batch)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_attention_cells_are_the_a100_roofline_of_one_llama2_7b_layer(bench, tmp_path):
    path = tmp_path / "attention.csv"
    n = bench.write_attention_csv(path)
    frame = pd.read_csv(path)
    assert n == len(frame) and frame["n_embd"].eq(4096).all() and frame["block_size"].eq(16).all()
    # decode, B = 64 at c = 1024: memory-bound, 2 (K, V) x 4096 x 2 B per token and layer
    # over B (c + 2) tokens at 2.039 TB/s x 0.8
    decode = cell(frame, 0, 1024, 64)
    assert decode["time_stats.attn_decode.median"] == pytest.approx(
        1e3 * 16384 * 64 * 1026 / (2.039e12 * 0.8), rel=1e-12)
    assert pd.isna(decode["time_stats.attn_prefill.median"]) and not decode["is_prefill"]
    # a 512-token chunk after 512 cached: compute-bound, 4 h q (c + (q + 1) / 2) FLOPs
    # at 312 TFLOP/s x 0.7
    chunk = cell(frame, 512, 512, 1)
    assert chunk["time_stats.attn_prefill.median"] == pytest.approx(
        1e3 * 4 * 4096 * 512 * (512 + 513 / 2) / (312e12 * 0.7), rel=1e-12)
    assert chunk["is_prefill"] and pd.isna(chunk["time_stats.attn_decode.median"])


def test_the_workload_reaches_vidur_row_for_row(bench, tmp_path):
    src = tmp_path / "w.csv"
    pd.DataFrame({"prompt_len": [395, 1030, 7], "output_len": [112, 403, 9],
                  "arrival": [0.1, 0.2, 0.5]}).to_csv(src, index=False)
    out = tmp_path / "trace.csv"
    assert bench.write_vidur_trace(src, 2, out) == 2
    assert pd.read_csv(out).to_dict("list") == {
        "arrived_at": [0.1, 0.2], "num_prefill_tokens": [395, 1030],
        "num_decode_tokens": [112, 403]}


def test_specbatch_runs_one_simulation_on_the_engine_asked(bench, tmp_path):
    from specbatch.cli import parse_command

    sim_bench = bench.load_sim_bench()
    workload = tmp_path / "w.csv"
    workload.write_text("prompt_len,output_len,arrival\n40,6,0.0\n25,9,0.01\n60,4,0.02\n")
    # all six pairings: vLLM's and Sarathi's settings x ar, fixed k=3, tetris k=3 e=1
    assert bench.PAIRING_POLICIES == {p: ["ar", "fixed k=3", "tetris k=3 e=1"]
                                      for p in ("vllm", "sarathi")}
    for pairing, policies in bench.PAIRING_POLICIES.items():
        for policy in policies:
            for mode in ("lean", "written"):
                argv = bench.specbatch_args(sim_bench, workload, 3, pairing, policy, mode,
                                            tmp_path, "numpy")
                _, args = parse_command(argv)  # the current CLI takes every flag
                assert args.sensitivity == "off" and args.engine == "numpy"
                assert (args.out is not None) == (mode == "written")
    argv = bench.specbatch_args(sim_bench, workload, 3, "sarathi", "tetris k=3 e=1", "written",
                                tmp_path, "numpy")
    row = bench.spec_run([sys.executable, "-m", "specbatch", *argv], tmp_path,
                         dict(os.environ), "numpy")
    assert row["rc"] == 0 and row["engine_ran"] == "numpy" and row["steps"] > 0
    assert row["cpu_s"] > 0 and row["rss_mib"] > 0
    assert (tmp_path / "specbatch-out" / "sarathi-tetris_k3_e1-numpy").is_dir()


def test_without_vidur_it_says_so_and_exits_0(bench, tmp_path, capsys):
    work, workload = tmp_path / "work", tmp_path / "w.csv"
    workload.write_text("prompt_len,output_len,arrival\n5,5,0.0\n")
    assert bench.main(["--vidur-root", str(tmp_path / "none"), "--workload", str(workload),
                       "--work", str(work)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Vidur is not installed here (no Vidur checkout at ")
    assert out.rstrip().endswith("skipped") and not work.exists()


def test_timed_processes_write_bytecode_caches(bench, monkeypatch):
    """Both tools run as a user's Python runs them: bytecode caches written, so neither pays
    for compiling its sources again in every timed round."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert "PYTHONDONTWRITEBYTECODE" not in bench.process_env()
    env = bench.vidur_env(Path("/somewhere"))
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPATH"] == "/somewhere"
