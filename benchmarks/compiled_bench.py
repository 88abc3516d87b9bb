"""The compiled vllm-v1 loop against the numpy engine, same workload, same process, same run.

On Vidur's workload (the 19,200 splitwise_conv requests of issue 26, ``--workload`` FILE;
sim_bench.VIDUR_WORKLOAD by default), A100 / Llama-2-7B shape, paged KV with the prefix cache
(sim_bench.VIDUR_FLAGS), the six pairings of issue 45: vLLM's setting (cap 64, 4,096 batched
tokens) and Sarathi's (cap 128, 512-token chunks, preempting) x ``ar``, ``fixed k=3`` and
``tetris k=3 e=1``. Each pairing runs ``simulate()`` with ``engine = "numpy"`` and
``engine = "compiled"`` alternately (``--repeat`` rounds, best CPU of each: the machine may be
shared), after one small compiled run that loads the cached kernel, and checks that both
engines' request and step tables are bit-identical. Printed per pairing: steps, CPU seconds
and CPU µs per step of each engine (whole simulate() calls: workload, engine, tables and
summary) and their same-run ratio numpy / compiled.

Then the start-up of a 10-request ``specbatch simulate --json`` process (CPU seconds, best of
``--repeat``), under ``--engine numpy``, ``auto`` (numpy at this size) and ``compiled`` (the
kernel loaded from its cache).

With ``--processes``, whole ``specbatch simulate`` processes as
benchmarks/vidur_side_by_side.py runs them (Vidur's flags; one simulation each,
``--sensitivity off``; lean ``--json`` and written ``--out DIR``), ``--engine numpy`` against
``--engine auto``, CPU seconds from ``os.wait4``: the specbatch side of the Vidur pairings under
both engines, in the same run.

``--policies`` may also name the engines' chain policies of :data:`POLICIES`: vLLM's and
TensorRT-LLM's batch-size tables (``vllm-schedule``, ``trt-schedule``: K = 3 / 2 / 1 as the
batch grows), ``vllm-dynamic``, ``ema-adaptive`` (SGLang's default slots) and ``vllm-adaptive``
(profiled tables, stale confidences), each at k = 3, and the row-wise ``threshold``,
``specdec++`` and ``entropy-stop`` and the bounds ``hindsight`` and ``oracle`` (TV) (k = 3,
e = 1).

``--policies eagle3,ngram``: ``fixed`` k = 3 with an EAGLE-3 head or vLLM's n-gram proposer
as the drafter (:data:`POLICIES`).

``--cost calibrated`` prices the pairings with the calibrated model (on the A100 / Llama-2-7B
shape: Vidur's table cell; the kernel evaluates its PassTables, simulator.cost.tabulated).
``--hardware`` / ``--target`` move the pairings to another deployment (e.g. ``rtxpro6000`` /
``llama-3.1-8b``: the calibrated model's LLMServingSim pricer, its regime law and sampler in
the kernel, simulator.cost.measured.lss_table).

Usage: .venv/bin/python benchmarks/compiled_bench.py [--requests N] [--repeat R] [--json]
       [--pairings vllm,sarathi] [--policies ar,fixed,tetris] [--cost C] [--processes]
       [--hardware H --target T]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.run import build_cost, load_trace, simulate

POLICIES = {"ar": {"policy": "ar"},
            "fixed": {"policy": "fixed", "num_speculative_tokens": 3},
            "tetris": {"policy": "tetris", "num_speculative_tokens": 3, "extra": 1},
            # the engines' chain policies (``--policies`` names them; not in the default set)
            "vllm-schedule": {"policy": "batch-schedule", "num_speculative_tokens": 3,
                              "num_speculative_tokens_per_batch_size": "1-16:3,17-48:2,49-4096:1"},
            "trt-schedule": {"policy": "batch-schedule", "num_speculative_tokens": 3,
                             "draft_len_schedule": "16:3,48:2,256:1"},
            "vllm-dynamic": {"policy": "vllm-dynamic", "num_speculative_tokens": 3},
            "ema-adaptive": {"policy": "ema-adaptive", "num_speculative_tokens": 3},
            "vllm-adaptive": {"policy": "vllm-adaptive", "num_speculative_tokens": 3},
            # the row-wise policies: each request's lengths a table of its trace row
            "threshold": {"policy": "threshold", "num_speculative_tokens": 3, "extra": 1},
            "specdec++": {"policy": "specdec++", "num_speculative_tokens": 3, "extra": 1},
            "entropy-stop": {"policy": "entropy-stop", "num_speculative_tokens": 3, "extra": 1},
            # the bounds (TV)
            "hindsight": {"policy": "hindsight", "num_speculative_tokens": 3, "extra": 1},
            "oracle": {"policy": "oracle", "num_speculative_tokens": 3, "extra": 1},
            # drafters other than a draft model (``fixed`` k = 3): an EAGLE-3 head derived
            # from the target (pass 1 over the target's pass), vLLM's n-gram proposer (its host
            # seconds once per step; the default trace's acceptance, not an n-gram trace's)
            "eagle3": {"policy": "fixed", "num_speculative_tokens": 3, "draft": "eagle3"},
            "ngram": {"policy": "fixed", "num_speculative_tokens": 3, "draft": "ngram"}}


def load_sim_bench():
    spec = importlib.util.spec_from_file_location(
        "sim_bench", Path(__file__).resolve().parent / "sim_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def identical(a, b) -> bool:
    """Same columns and values, floats compared as their bits."""
    if list(a.columns) != list(b.columns):
        return False
    for name in a.columns:
        x, y = a[name].to_numpy(), b[name].to_numpy()
        if x.dtype != y.dtype:
            return False
        if x.dtype.kind == "f":
            x, y = x.view(np.int64), y.view(np.int64)
        if not np.array_equal(x, y):
            return False
    return True


def one_run(config, trace, cost) -> tuple[float, object]:
    cpu = time.process_time()
    result = simulate(config, trace, cost_model=cost)
    return time.process_time() - cpu, result


def pairing_row(fields: dict, trace, repeat: int) -> dict:
    best: dict = {}
    results: dict = {}
    for _ in range(repeat):
        for engine in ("numpy", "compiled"):
            config = load_config(None, engine=engine, **fields)
            cpu, result = one_run(config, trace, build_cost(config))
            assert result.summary["engine_ran"] == engine, result.summary["engine_ran"]
            if engine not in best or cpu < best[engine]:
                best[engine] = cpu
            results[engine] = result
    a, b = results["numpy"], results["compiled"]
    steps = int(a.summary["steps"])
    row = {"steps": steps, "preemptions": int(a.summary["preemptions"]),
           "identical": identical(a.requests, b.requests) and identical(a.steps, b.steps)}
    for engine in ("numpy", "compiled"):
        row[f"{engine}_cpu_s"] = best[engine]
        row[f"{engine}_us_per_step"] = 1e6 * best[engine] / steps
    row["ratio"] = best["numpy"] / best["compiled"]
    return row


def startup_cpu(engine: str, repeat: int) -> float:
    """Best CPU seconds (user + system, os.wait4) of a 10-request ``simulate --json``."""
    best = None
    for _ in range(repeat):
        proc = subprocess.Popen([sys.executable, "-m", "specbatch", "simulate", "--requests",
                                 "10", "--engine", engine, "--json"],
                                cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        if status:
            raise RuntimeError(f"simulate --engine {engine} failed ({status})")
        cpu = usage.ru_utime + usage.ru_stime
        best = cpu if best is None else min(best, cpu)
    return best


def process_cpu(argv: list[str]) -> float:
    """CPU seconds (user + system, os.wait4) of one ``specbatch`` process."""
    proc = subprocess.Popen([sys.executable, "-m", "specbatch", *argv],
                            cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise RuntimeError(f"specbatch {' '.join(argv)} failed ({status})")
    return usage.ru_utime + usage.ru_stime


def process_rows(sim_bench, workload: Path, requests: int, pairings: list[str],
                 policies: list[str], repeat: int) -> list[dict]:
    """Whole ``specbatch simulate`` processes as vidur_side_by_side.py runs them (Vidur's
    flags, one simulation, each pairing and policy, lean: ``--json``; written: ``--out DIR``),
    under ``--engine numpy`` and ``--engine auto`` alternately; best CPU of ``repeat`` each."""
    rows = []
    out = Path(tempfile.mkdtemp(prefix="compiled_bench_"))
    for pairing in pairings:
        for policy in policies:
            for mode in ("lean", "written"):
                best: dict = {}
                for _ in range(repeat):
                    for engine in ("numpy", "auto"):
                        argv = ["simulate", "--workload", str(workload), "--requests",
                                str(requests), *sim_bench.VIDUR_FLAGS,
                                *sim_bench.flags(sim_bench.SETTINGS[pairing]),
                                *sim_bench.flags(POLICIES[policy]), "--sensitivity", "off",
                                "--engine", engine, "--json"]
                        if mode == "written":
                            argv += ["--out", str(out / f"{pairing}-{policy}-{engine}"),
                                     "--force"]
                        cpu = process_cpu(argv)
                        best[engine] = min(cpu, best.get(engine, cpu))
                rows.append({"pairing": pairing, "policy": policy, "mode": mode,
                             "numpy_cpu_s": best["numpy"], "compiled_cpu_s": best["auto"],
                             "ratio": best["numpy"] / best["auto"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sim_bench = load_sim_bench()
    parser.add_argument("--workload", type=Path, default=sim_bench.VIDUR_WORKLOAD)
    parser.add_argument("--requests", type=int, default=19200)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--pairings", default="vllm,sarathi")
    parser.add_argument("--policies", default="ar,fixed,tetris")
    parser.add_argument("--processes", action="store_true",
                        help="also time whole simulate processes, lean and written")
    parser.add_argument("--cost", default="roofline",
                        help="cost model of the pairings: roofline (default) or calibrated "
                             "(its PassTables in the kernel)")
    parser.add_argument("--hardware", default="a100", help="GPU of the pairings (default a100)")
    parser.add_argument("--target", default="vicuna-7b",
                        help="target model of the pairings (default vicuna-7b)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.workload.exists():
        print(f"compiled_bench: no workload at {args.workload}; nothing measured")
        return 0
    trace = load_trace(load_config(None))
    warm = load_config(None, engine="compiled", requests=10)
    simulate(warm, trace)  # loads (or compiles) the kernel outside the timed runs
    rows = []
    for pairing in args.pairings.split(","):
        for policy in args.policies.split(","):
            fields = dict(workload=str(args.workload), requests=args.requests,
                          arrival="trace", kv_mode="paged", hardware=args.hardware,
                          target=args.target, cost=args.cost, **sim_bench.SETTINGS[pairing],
                          **POLICIES[policy])
            row = {"pairing": pairing, "policy": policy, **pairing_row(fields, trace, args.repeat)}
            rows.append(row)
            if not args.json:
                print(f"{pairing:>8} {policy:>7} steps {row['steps']:>7} preempt "
                      f"{row['preemptions']:>5} numpy {row['numpy_cpu_s']:7.2f} s "
                      f"{row['numpy_us_per_step']:6.1f} us/step  compiled "
                      f"{row['compiled_cpu_s']:6.2f} s {row['compiled_us_per_step']:5.1f} "
                      f"us/step  ratio {row['ratio']:5.1f}x  identical {row['identical']}",
                      flush=True)
    startup = {engine: startup_cpu(engine, args.repeat)
               for engine in ("numpy", "auto", "compiled")}
    processes = []
    if args.processes:
        processes = process_rows(sim_bench, args.workload, args.requests,
                                 args.pairings.split(","), args.policies.split(","),
                                 args.repeat)
        if not args.json:
            for row in processes:
                print(f"process {row['pairing']:>8} {row['policy']:>7} {row['mode']:>7}: "
                      f"numpy {row['numpy_cpu_s']:6.2f} CPU s, auto (compiled) "
                      f"{row['compiled_cpu_s']:5.2f} CPU s, ratio {row['ratio']:5.1f}x",
                      flush=True)
    out = {"requests": args.requests, "repeat": args.repeat, "rows": rows,
           "startup_cpu_s": startup, "processes": processes}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"10-request simulate --json, CPU s: numpy {startup['numpy']:.2f}, auto "
              f"{startup['auto']:.2f} (numpy below 2,000 requests), compiled (warm cache) "
              f"{startup['compiled']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
