"""``specbatch plan`` with and without the lower-bound skipping, same run, same machine.

The README's question (Vicuna-33B + 68M draft on H100s, Poisson 4 req/s, prompts 500,
outputs 200, p99 TPOT <= 0.1 s) searched twice, each in a fresh process and folder:
``--exhaustive`` (every setting of every searched level, what the planner did before the
bounds) and the default (skip what the bounds prove cannot pass or cannot matter). Prints
the simulations each ran, CPU seconds (the process and its pool workers) and wall seconds,
the load average, and whether both chose the same configuration and frontier.

    .venv/bin/python benchmarks/plan_bench.py [--requests 256] [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTION = ["--target", "vicuna-33b", "--draft", "vicuna-68m", "--hardware", "h100", "--rate",
            "4", "--prompt-len", "fixed:500", "--output-len", "fixed:200", "--slo-tpot", "0.1"]


def run(extra: list[str], out: Path, workers: int, requests: int) -> dict:
    """One plan in a fresh process: its report, CPU-s (with children) and wall-s."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "specbatch", "plan", *QUESTION, *extra,
                           "--requests", str(requests), "--workers", str(workers), "--out",
                           str(out), "--json"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"report": json.loads(proc.stdout), "cpu_s": cpu, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("exhaustive", ["--exhaustive"]), ("pruned", [])):
            load = os.getloadavg()[0]
            got = run(extra, Path(tmp) / name, args.workers, args.requests)
            report = got.pop("report")
            rows[name] = {**got, "load": load, "runs": report["searched"]["runs"],
                          "choice": report["choice"] and report["choice"]["label"],
                          "pareto": [p["label"] for p in report["pareto"]]}
    same = all(rows["pruned"][k] == rows["exhaustive"][k] for k in ("choice", "pareto"))
    if args.json:
        print(json.dumps({"rows": rows, "same_answer": same}))
        return
    for name, r in rows.items():
        print(f"{name:>10}: {r['runs']:>4} simulations, {r['cpu_s']:7.1f} CPU-s, "
              f"{r['wall_s']:7.1f} s wall (load {r['load']:.1f}); {r['choice']}")
    ratio = rows["exhaustive"]["cpu_s"] / rows["pruned"]["cpu_s"]
    print(f"same choice and frontier: {same}; CPU {ratio:.2f}x less")


if __name__ == "__main__":
    main()
