"""``specbatch plan`` exhaustive and pruned, same run, same machine.

The README's question (Vicuna-33B + 68M draft on H100s, Poisson 4 req/s, prompts 500,
outputs 200, p99 TPOT <= 0.1 s) searched twice, each in a fresh process and folder:
``--exhaustive`` (every setting of every searched level simulated whole: the reference
path) and the default (skip what the lower bounds prove cannot pass or cannot matter, and
stop a run as soon as what it simulated proves it fails or cannot beat the frontier).
Prints the simulations each ran (and how many stopped early), the engine steps they
simulated, CPU seconds (the process and its pool workers) and wall seconds, the load
average, and whether both chose the same configuration with the same numbers and drew the
same frontier.

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


def answer(report: dict) -> dict:
    """The choice (numbers, memory plan, gain over ar) and the frontier, paths left out."""
    choice = {k: v for k, v in (report["choice"] or {}).items()
              if k not in ("config", "simulate")}
    return {"choice": choice, "pareto": report["pareto"]}


def simulated_steps(out: Path) -> int:
    """Engine steps of every distinct run stored under ``out`` (a whole run under a stop
    rule is stored twice, once per key)."""
    seen: dict[str, int] = {}
    for path in (out / "runs").rglob("points/*.json"):
        record = json.loads(path.read_text())
        seen[json.dumps(record["config"], sort_keys=True)] = int(
            record["summary"].get("steps") or 0)
    return sum(seen.values())


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
                          "stopped": report["searched"].get("stopped", 0),
                          "steps": simulated_steps(Path(tmp) / name),
                          "choice": report["choice"] and report["choice"]["label"],
                          "answer": answer(report),
                          "pareto": [p["label"] for p in report["pareto"]]}
    same = all(rows["pruned"][k] == rows["exhaustive"][k] for k in ("answer", "pareto"))
    for r in rows.values():
        r.pop("answer")
    if args.json:
        print(json.dumps({"rows": rows, "same_answer": same}))
        return
    for name, r in rows.items():
        print(f"{name:>10}: {r['runs']:>4} simulations ({r['stopped']} stopped early), "
              f"{r['steps']:>7,} steps, {r['cpu_s']:7.1f} CPU-s, {r['wall_s']:7.1f} s wall "
              f"(load {r['load']:.1f}); {r['choice']}")
    ratio = rows["exhaustive"]["cpu_s"] / rows["pruned"]["cpu_s"]
    print(f"same choice (with its numbers) and frontier: {same}; CPU {ratio:.2f}x less")


if __name__ == "__main__":
    main()
