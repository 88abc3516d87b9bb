"""specbatch against Vidur, side by side: wall, CPU seconds and peak RSS of whole processes.

Both simulators replay the same workload (``--workload``, default the 19,200-request
splitwise_conv file of issue 35: its prompt lengths, output lengths and arrival times) on one
A100 with a Llama-2-7B-shaped model (specbatch: ``--hardware a100 --target vicuna-7b``, paged
KV; Vidur: its defaults ``a100`` / ``meta-llama/Llama-2-7b-hf``, tp 1, one replica), under
two schedulers' settings (issue 35, item 2):

- ``vllm``: Vidur's ``vllm`` replica scheduler, batch cap 64, 4,096 tokens per step; specbatch
  ``--max-num-seqs 64 --max-num-batched-tokens 4096`` with ``ar``, ``fixed k=3`` and
  ``tetris k=3 e=1``;
- ``sarathi``: Vidur's default (Sarathi, batch cap 128, 512-token chunks); specbatch
  ``--max-num-seqs 128 --max-num-batched-tokens 512`` with the same three policies.

Every specbatch run passes ``--sensitivity off``: under ``auto`` the CLI reruns an open-loop
workload of <= 20,000 requests at step times x0.95 and x1.05 (three simulations, not one),
and Vidur runs one. ``--engines`` picks specbatch's engine per run (``auto``, the default,
runs the compiled vllm-v1 loop where it applies and numba is installed; ``numpy`` the
reference engine; ``auto,numpy`` both, in the same rounds); the table shows which engine ran
(``engine_ran`` of the ``--json`` summary) and a failed run if it was not the one asked for.

Each in two modes: ``written`` (Vidur's default metrics: CSVs, plots, Chrome trace;
specbatch ``--out DIR``) and ``lean`` (Vidur ``--no-metrics_config_write_metrics
--no-metrics_config_store_plots --no-metrics_config_enable_chrome_trace``; specbatch without
``--out``). Every run is its own process, started from this script; its wall time, CPU
seconds (user + system) and peak RSS come from ``os.wait4``. Rounds interleave the two sides
(Vidur, then each specbatch policy and engine, per pairing and mode; ``--repeat`` rounds, 3
by default) so that load drifts on a shared machine hit both alike; the table gives the median of
the rounds and the same-run ratio Vidur / specbatch of those medians.

Vidur is not a dependency of specbatch: point ``--vidur-root`` at a checkout of
github.com/microsoft/vidur (its ``data/`` included) and ``--vidur-python`` at an interpreter
with its requirements (numpy, pandas, scikit-learn, fasteners, ddsketch, plotly_express,
kaleido, wandb, matplotlib, seaborn); without them the script says what is missing and exits 0.
Never run by the test suite.

**attention.csv.** Vidur prices attention from a profiled
``data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/attention.csv``; public snapshots of
its repository lack that file (10.7 MB, over the snapshot size limit). When it is absent, this
script writes one of its own in Vidur's layout (:func:`write_attention_csv`): on a grid like
Vidur's profiler's (full and chunked prefills of 32-4,096 tokens; decode batches 1-128 at
caches of 32-4,064 tokens), one layer's attention time from specbatch's roofline terms for the
A100 preset (FLOPs 4 h Σ q (c + (q+1)/2), KV bytes Σ (c + 2q) per layer; the larger of the two
times), and passes it with
``--random_forrest_execution_time_predictor_config_attention_input_file``.
Vidur then trains its own random forests on it as it would on a measured file; the table says
which file was used. Vidur's non-attention timings (``mlp.csv``) are its own measured ones.
Vidur trains and caches its models and prediction tables on first use (``--work``/cache):
one untimed warm-up run per pairing precedes the timed rounds, so the rounds time the
simulation, not the one-off training. Likewise one untimed lean specbatch run per pairing,
policy and engine loads (on first use compiles) the numba kernel into its cache
(``SPECBATCH_CACHE``). ``--fast-training`` narrows Vidur's hyper-parameter
search (one forest setting, 2-fold) so that the warm-up takes minutes instead of the default
grid's tens of minutes on 2 cores; it changes the fitted forests, not the simulator's loop.

Usage: .venv/bin/python benchmarks/vidur_side_by_side.py [--vidur-root DIR] [--vidur-python PY]
       [--repeat 3] [--requests N] [--pairings vllm,sarathi] [--modes written,lean]
       [--engines auto,numpy] [--fast-training] [--work DIR] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

#: Where this session's Vidur lives unless told otherwise (``VIDUR_ROOT``, ``VIDUR_PYTHON``).
DEFAULT_ROOT = Path(os.environ.get("VIDUR_ROOT", "/tmp/vidur-src"))
DEFAULT_PYTHON = Path(os.environ.get("VIDUR_PYTHON", "/tmp/vidur-venv/bin/python"))
#: Vidur's profiled attention file for the A100 / Llama-2-7B pairing (relative to its root).
ATTENTION = Path("data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/attention.csv")

#: Vidur's scheduler flags per pairing (vidur/config/config.py: VllmSchedulerConfig,
#: SarathiSchedulerConfig).
VIDUR_SCHEDULERS = {
    "vllm": ["--replica_scheduler_config_type", "vllm",
             "--vllm_scheduler_config_batch_size_cap", "64",
             "--vllm_scheduler_config_max_tokens_in_batch", "4096"],
    "sarathi": ["--replica_scheduler_config_type", "sarathi",
                "--sarathi_scheduler_config_batch_size_cap", "128",
                "--sarathi_scheduler_config_chunk_size", "512"],
}
#: specbatch policies per pairing (names of sim_bench.POLICIES).
PAIRING_POLICIES = {"vllm": ["ar", "fixed k=3", "tetris k=3 e=1"],
                    "sarathi": ["ar", "fixed k=3", "tetris k=3 e=1"]}
#: specbatch's engines (``--engine``): auto = compiled where it applies, numpy the reference.
ENGINES = ("auto", "compiled", "numpy")
#: Vidur's flags that write nothing (MetricsConfig booleans, argparse BooleanOptionalAction).
VIDUR_LEAN = ["--no-metrics_config_write_metrics", "--no-metrics_config_store_plots",
              "--no-metrics_config_enable_chrome_trace"]
#: --fast-training: one random-forest setting and 2-fold CV instead of Vidur's 27 x 10-fold.
VIDUR_FAST_TRAINING = [
    "--random_forrest_execution_time_predictor_config_num_estimators", "250",
    "--random_forrest_execution_time_predictor_config_max_depth", "32",
    "--random_forrest_execution_time_predictor_config_min_samples_split", "2",
    "--random_forrest_execution_time_predictor_config_k_fold_cv_splits", "2",
]


def load_sim_bench():
    """benchmarks/sim_bench.py as a module (the workload path, specbatch flags, settings)."""
    spec = importlib.util.spec_from_file_location("sim_bench",
                                                  Path(__file__).with_name("sim_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def vidur_missing(root: Path, python: Path) -> str | None:
    """Why Vidur cannot run here (a one-line reason), or None when it can."""
    if not (root / "vidur" / "main.py").is_file():
        return f"no Vidur checkout at {root} (expected vidur/main.py; --vidur-root)"
    if not python.exists():
        return f"no interpreter at {python} (--vidur-python)"
    proc = subprocess.run([str(python), "-c", "import vidur.simulator"], cwd=root,
                          env=vidur_env(root), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return f"{python} cannot import Vidur from {root}: {last}"
    return None


def process_env(**extra: str) -> dict:
    """The environment of a timed process: this one's, with bytecode caches written as a
    user's Python writes them (``PYTHONDONTWRITEBYTECODE`` dropped: else every run of both
    tools compiles its uncached sources again, ~0.3-0.5 CPU-s of a lean specbatch run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def vidur_env(root: Path) -> dict:
    """The environment of a Vidur process: its checkout on the path, no network logging."""
    return process_env(PYTHONPATH=str(root), WANDB_MODE="disabled")


def write_vidur_trace(workload: Path, requests: int | None, out: Path) -> int:
    """The workload as Vidur's trace-replay file (``arrived_at``, ``num_prefill_tokens``,
    ``num_decode_tokens``; seconds and tokens, the same rows in the same order); its row count."""
    frame = pd.read_csv(workload)
    if requests is not None:
        frame = frame.iloc[:requests]
    pd.DataFrame({"arrived_at": frame["arrival"], "num_prefill_tokens": frame["prompt_len"],
                  "num_decode_tokens": frame["output_len"]}).to_csv(out, index=False)
    return len(frame)


def attention_grid() -> pd.DataFrame:
    """(prefill_chunk_size, kv_cache_size, batch_size) cells like Vidur's attention profiler
    grid (max length 4,096): full prefills, chunked prefills at cache offsets that are multiples
    of the chunk, decode batches at a range of caches."""
    rows = []
    for q in range(32, 4096 + 1, 32):  # full prefills
        rows.append((q, 0, 1))
    for q in (64, 128, 256, 512, 1024, 2048):  # chunked prefills
        rows.extend((q, c, 1) for c in range(q, 4096 - q + 1, q))
    batches = list(range(1, 17)) + list(range(20, 129, 4))
    caches = list(range(32, 1024, 32)) + list(range(1024, 4096, 128))
    rows.extend((0, c, b) for b in batches for c in caches)
    return pd.DataFrame(rows, columns=["prefill_chunk_size", "kv_cache_size", "batch_size"])


def attention_ms(grid: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(prefill ms [n], decode ms [n]) of one layer's attention per grid cell, from specbatch's
    roofline terms on the a100 preset and the vicuna-7b (Llama-2-7B) shape: a prefill chunk
    of q tokens on c cached ones does 4 h q (c + (q+1)/2) FLOPs and moves (c + 2q) tokens of
    one layer's KV; a decode batch of B does 4 h B (c + 1) FLOPs over B (c + 2) tokens;
    the time is the larger of FLOPs / (peak eff_c) and bytes / (bandwidth eff_m)."""
    from specbatch.simulator.cost.gpus.hardware import get_hardware
    from specbatch.traces.models.shapes import get_shape

    hw, shape = get_hardware("a100"), get_shape("vicuna-7b")
    kv_layer = shape.kv_bytes_per_token(hw.dtype_bytes) / shape.layers  # bytes per token
    q = grid["prefill_chunk_size"].to_numpy(np.float64)  # [n]
    c = grid["kv_cache_size"].to_numpy(np.float64)  # [n]
    b = grid["batch_size"].to_numpy(np.float64)  # [n]
    decode = q == 0
    tokens = np.where(decode, 1.0, q)  # query tokens per request
    flops = 4.0 * shape.q_width * b * tokens * (c + (tokens + 1.0) / 2.0)
    nbytes = kv_layer * b * (c + 2.0 * tokens)
    ms = 1e3 * np.maximum(flops / (hw.peak_flops * hw.compute_eff),
                          nbytes / (hw.mem_bw * hw.memory_eff))
    return np.where(decode, np.nan, ms), np.where(decode, ms, np.nan)


def write_attention_csv(path: Path) -> int:
    """Vidur's attention.csv layout for A100 / Llama-2-7B, tp 1, block 16 (module docstring),
    with specbatch's roofline times (:func:`attention_ms`); its row count."""
    grid = attention_grid()
    prefill, decode = attention_ms(grid)
    frame = pd.DataFrame({
        "time_stats.attn_prefill.median": prefill, "time_stats.attn_decode.median": decode,
        "n_embd": 4096, "n_q_head": 32, "n_kv_head": 32, "block_size": 16,
        "num_tensor_parallel_workers": 1, "max_model_len": 4096, **grid,
        "is_prefill": grid["prefill_chunk_size"] > 0,
        "attention_backend": "specbatch-roofline-a100"})
    frame.to_csv(path, index=False)
    return len(frame)


def vidur_args(root: Path, trace: Path, pairing: str, mode: str, work: Path,
               attention: Path | None, fast_training: bool) -> list[str]:
    """One Vidur simulation's command line (``python -m vidur.main`` flags)."""
    args = ["-m", "vidur.main", "--request_generator_config_type", "trace_replay",
            "--trace_request_generator_config_trace_file", str(trace),
            "--metrics_config_output_dir", str(work / "vidur-out"),
            "--metrics_config_cache_dir", str(work / "vidur-cache"),
            *VIDUR_SCHEDULERS[pairing]]
    if attention is not None:
        args += ["--random_forrest_execution_time_predictor_config_attention_input_file",
                 str(attention)]
    if fast_training:
        args += VIDUR_FAST_TRAINING
    return args + (VIDUR_LEAN if mode == "lean" else [])


def specbatch_args(sim_bench, workload: Path, requests: int, pairing: str, policy: str,
                   mode: str, work: Path, engine: str = "auto") -> list[str]:
    """One ``specbatch simulate`` command line (after ``python -m specbatch``): one
    simulation (``--sensitivity off``) on ``engine``."""
    setting = sim_bench.SETTINGS[pairing]
    fields = sim_bench.POLICIES[policy]
    args = ["simulate", "--workload", str(workload), "--requests", str(requests),
            *sim_bench.VIDUR_FLAGS, *sim_bench.flags(setting), *sim_bench.flags(fields),
            "--sensitivity", "off", "--engine", engine, "--json"]
    if mode == "written":
        label = f"{pairing}-{policy}-{engine}".replace(" ", "_").replace("=", "")
        args += ["--out", str(work / "specbatch-out" / label), "--force"]
    return args


def run_process(argv: list[str], cwd: Path, env: dict) -> dict:
    """Run one process to its end: rc, wall_s, cpu_s (user + system) and rss_mib (its peak,
    from ``os.wait4``), and its stdout; a failure keeps its last stderr line."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        row = {"rc": proc.returncode, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
               "rss_mib": usage.ru_maxrss / 1024.0, "stdout": out.read().decode()}
        stderr = err.read().decode()
    lines = stderr.strip().splitlines()
    ended = re.search(r"Simulation ended at: ([0-9.eE+-]+)s",  # Vidur's log line
                      row["stdout"] + stderr)
    if ended:
        row["makespan_s"] = float(ended.group(1))
    if proc.returncode == 0 and "Traceback (most recent call last)" in stderr:
        row["rc"] = 1  # Vidur writes its results in an atexit hook, whose errors exit 0
    if row["rc"] != 0:
        row["error"] = lines[-1] if lines else f"exit status {proc.returncode}"
    return row


def median_row(runs: list[dict]) -> dict:
    """The median wall, CPU and peak RSS of successful runs (and how many there were)."""
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return {"rc": runs[-1]["rc"], "error": runs[-1].get("error", "failed"), "runs": 0}
    return {"rc": 0, "runs": len(ok), **{key: statistics.median(r[key] for r in ok)
                                         for key in ("wall_s", "cpu_s", "rss_mib")}}


def measure(args, sim_bench, work: Path, trace: Path, requests: int,
            attention: Path | None) -> list[dict]:
    """The interleaved rounds (module docstring): per pairing, one untimed Vidur warm-up, then
    ``repeat`` rounds of Vidur and each specbatch policy per mode; one row per comparison."""
    vidur_env_ = vidur_env(args.vidur_root)
    spec_env = process_env(SPECBATCH_ALLOW_LARGE="1")
    spec_cmd = [sys.executable, "-m", "specbatch"]
    vidur_cmd = [str(args.vidur_python)]
    runs: dict = {}
    for pairing in args.pairings:
        warm = run_process(vidur_cmd + vidur_args(args.vidur_root, trace, pairing, "lean", work,
                                                  attention, args.fast_training),
                           args.vidur_root, vidur_env_)
        runs[(pairing, "warm-up")] = warm
        log(args, f"{pairing}: Vidur warm-up (trains and caches its models) "
            f"{warm['wall_s']:.1f} s wall, rc {warm['rc']} {warm.get('error', '')}")
        for policy in PAIRING_POLICIES[pairing]:
            for engine in args.engines:
                warm = spec_run(spec_cmd + specbatch_args(
                    sim_bench, args.workload, requests, pairing, policy, "lean", work, engine),
                    work, spec_env, engine)
                log(args, f"{pairing} {policy} {engine}: specbatch warm-up (loads the kernel) "
                    f"{brief(warm)}")
    for round_ in range(args.repeat):
        for pairing in args.pairings:
            for mode in args.modes:
                row = run_process(vidur_cmd + vidur_args(
                    args.vidur_root, trace, pairing, mode, work, attention, args.fast_training),
                    args.vidur_root, vidur_env_)
                runs.setdefault((pairing, mode, "vidur"), []).append(row)
                log(args, f"round {round_ + 1} {pairing} {mode} vidur: {brief(row)}")
                for policy in PAIRING_POLICIES[pairing]:
                    for engine in args.engines:
                        row = spec_run(spec_cmd + specbatch_args(
                            sim_bench, args.workload, requests, pairing, policy, mode, work,
                            engine), work, spec_env, engine)
                        runs.setdefault((pairing, mode, policy, engine), []).append(row)
                        log(args, f"round {round_ + 1} {pairing} {mode} {policy} {engine}: "
                            f"{brief(row)}")
    return table(args, runs)


def spec_run(argv: list[str], cwd: Path, env: dict, engine: str) -> dict:
    """One specbatch process (:func:`run_process`) with its summary's steps, tokens,
    preemptions, makespan and ``engine_ran``; a failure when ``engine`` is ``compiled`` or
    ``numpy`` and another engine ran."""
    row = run_process(argv, cwd, env)
    if row["rc"] == 0:
        summary = json.loads(row["stdout"])
        row.update(steps=summary.get("steps"), tokens=summary.get("tokens"),
                   preemptions=summary.get("preemptions"), makespan_s=summary.get("makespan"),
                   engine_ran=summary.get("engine_ran"))
        if engine != "auto" and row["engine_ran"] != engine:
            row.update(rc=1, error=f"--engine {engine} ran {row['engine_ran']}")
    return row


def table(args, runs: dict) -> list[dict]:
    """One row per (pairing, mode, policy, engine): both sides' medians and Vidur / specbatch."""
    rows = []
    for pairing in args.pairings:
        for mode in args.modes:
            vidur_runs = runs[(pairing, mode, "vidur")]
            vidur = median_row(vidur_runs)
            cases = [(p, e) for p in PAIRING_POLICIES[pairing] for e in args.engines]
            for policy, engine in cases:
                spec_runs = runs[(pairing, mode, policy, engine)]
                spec = median_row(spec_runs)
                row = {"pairing": pairing, "mode": mode, "policy": policy, "engine": engine,
                       "engine_ran": spec_runs[-1].get("engine_ran"), "vidur": vidur,
                       "specbatch": spec, "steps": spec_runs[-1].get("steps"),
                       "preemptions": spec_runs[-1].get("preemptions"),
                       "makespan_s": {"vidur": vidur_runs[-1].get("makespan_s"),
                                      "specbatch": spec_runs[-1].get("makespan_s")}}
                if vidur["rc"] == 0 and spec["rc"] == 0:
                    row["ratio"] = {key: vidur[key] / spec[key]
                                    for key in ("wall_s", "cpu_s", "rss_mib")}
                rows.append(row)
    return rows


def brief(row: dict) -> str:
    """One run as a short log line."""
    if row["rc"] != 0:
        return f"failed ({row.get('error')})"
    return f"{row['wall_s']:.2f} s wall, {row['cpu_s']:.2f} CPU s, {row['rss_mib']:.0f} MiB"


def log(args, line: str) -> None:
    """Progress on stderr (stdout stays the table, or one JSON object with --json)."""
    if not args.quiet:
        print(line, file=sys.stderr, flush=True)


def machine() -> dict:
    """The machine the numbers come from: CPUs, load, thread settings (bytecode caches are
    always written: :func:`process_env`)."""
    return {"cpus": os.cpu_count(), "load_1_5_15": list(os.getloadavg()),
            "bytecode_cache": "written (PYTHONDONTWRITEBYTECODE dropped for both tools)",
            "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                        "OPENBLAS_NUM_THREADS")}}


def print_table(out: dict) -> None:
    """The human-readable table."""
    print(f"specbatch vs Vidur, side by side: {out['workload']} ({out['requests']} requests), "
          f"A100, Llama-2-7B shape; median of {out['repeat']} interleaved rounds")
    print(f"Vidur attention profile: {out['attention']}")
    m = out["machine_before"]
    print(f"machine: {m['cpus']} CPUs, load {m['load_1_5_15'][0]:.1f} before and "
          f"{out['machine_after']['load_1_5_15'][0]:.1f} after; threads {m['threads']}")
    print(f"{'pairing':>8} {'mode':>7} {'policy':>15} {'engine':>8} | {'Vidur wall':>10} "
          f"{'CPU s':>6} {'RSS MiB':>7} | {'spec wall':>9} {'CPU s':>6} {'RSS MiB':>7} | "
          f"{'wall x':>6} {'CPU x':>6} {'RSS x':>6} | {'steps':>6} {'preempt':>7} | "
          f"simulated makespan s (Vidur / specbatch)")
    for row in out["rows"]:
        v, s = row["vidur"], row["specbatch"]
        if "ratio" not in row:
            print(f"{row['pairing']:>8} {row['mode']:>7} {row['policy']:>15} "
                  f"{row['engine']:>8} | failed: "
                  f"Vidur {v.get('error', 'ok')}; specbatch {s.get('error', 'ok')}")
            continue
        r = row["ratio"]
        print(f"{row['pairing']:>8} {row['mode']:>7} {row['policy']:>15} "
              f"{row['engine_ran']!s:>8} | {v['wall_s']:>10.2f} {v['cpu_s']:>6.2f} "
              f"{v['rss_mib']:>7.0f} | "
              f"{s['wall_s']:>9.2f} {s['cpu_s']:>6.2f} {s['rss_mib']:>7.0f} | "
              f"{r['wall_s']:>5.1f}x {r['cpu_s']:>5.1f}x {r['rss_mib']:>5.1f}x | "
              f"{row['steps']!s:>6} {row['preemptions']!s:>7} | "
              f"{fmt(row['makespan_s']['vidur'])} / {fmt(row['makespan_s']['specbatch'])}")


def fmt(seconds: float | None) -> str:
    """A simulated time in seconds, or ? when the run did not say."""
    return "?" if seconds is None else f"{seconds:.1f}"


def main(argv: list[str] | None = None) -> int:
    sim_bench = load_sim_bench()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vidur-root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--vidur-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--workload", type=Path, default=sim_bench.VIDUR_WORKLOAD)
    parser.add_argument("--requests", type=int, default=None, help="first N rows (default all)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--pairings", default="vllm,sarathi")
    parser.add_argument("--modes", default="written,lean")
    parser.add_argument("--engines", default="auto",
                        help="specbatch --engine per run, comma-separated: auto, compiled, numpy")
    parser.add_argument("--fast-training", action="store_true",
                        help="narrow Vidur's one-off forest search (module docstring)")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for Vidur's cache and both sides' outputs (default: temp)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    args.pairings = [p for p in args.pairings.split(",") if p]
    args.modes = [m for m in args.modes.split(",") if m]
    args.engines = [e for e in args.engines.split(",") if e]
    for p in args.pairings:
        if p not in VIDUR_SCHEDULERS:
            parser.error(f"--pairings {p!r}: expected vllm or sarathi")
    for m in args.modes:
        if m not in ("written", "lean"):
            parser.error(f"--modes {m!r}: expected written or lean")
    for e in args.engines:
        if e not in ENGINES:
            parser.error(f"--engines {e!r}: expected one of {', '.join(ENGINES)}")
    if not args.workload.is_file():
        print(f"workload {args.workload} not found: skipped")
        return 0
    reason = vidur_missing(args.vidur_root, args.vidur_python)
    if reason is not None:
        print(f"Vidur is not installed here ({reason}): skipped")
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="vidur_side_by_side_"))
    work.mkdir(parents=True, exist_ok=True)
    trace = work / "vidur_trace.csv"
    requests = write_vidur_trace(args.workload, args.requests, trace)
    attention = None
    if (args.vidur_root / ATTENTION).is_file():
        described = f"Vidur's own {ATTENTION}"
    else:
        attention = work / "attention_specbatch_roofline_a100_llama2_7b.csv"
        n = write_attention_csv(attention)
        described = (f"{ATTENTION} absent from the checkout; replaced by {n} rows of specbatch's "
                     f"roofline attention terms (a100, vicuna-7b shape) in its layout, {attention}")
    if args.fast_training:
        described += "; forests trained with --fast-training"
    out = {"workload": str(args.workload), "requests": requests, "repeat": args.repeat,
           "engines": args.engines,
           "attention": described, "machine_before": machine()}
    out["rows"] = measure(args, sim_bench, work, trace, requests, attention)
    out["machine_after"] = machine()
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
