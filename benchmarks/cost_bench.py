"""Microbenchmark of the cost models' hot path: microseconds per ``step_time`` call.

The simulator prices every decode step with 1 target call plus one draft call per draft depth,
and DSD scans k = 0..6 every 20 steps, so ``step_time`` must cost a few microseconds.

    .venv/bin/python benchmarks/cost_bench.py [--calls 20000] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from specbatch.simulator.cost.measured.profiled import ProfiledCost, fit_role
from specbatch.simulator.cost.registry import build_cost_model


def per_call_us(fn, calls: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):  # best of 3 repeats: the machine is shared
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return 1e6 * best


def synthetic_profiled() -> ProfiledCost:
    rng = np.random.default_rng(0)
    b, q, c = rng.integers(1, 257, 200), rng.integers(1, 9, 200), rng.integers(0, 4096, 200)
    y = 2e-3 + 3e-5 * b * q + 2e-8 * b * c
    fit = fit_role(b, q, c, y)
    return ProfiledCost(fits={"target": fit, "draft": fit})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = {"roofline": build_cost_model(), "profiled": synthetic_profiled()}
    rows = []
    for name, model in models.items():
        for batch in (1, 8, 64, 512):
            q = np.full(batch, 4, dtype=np.int64)
            kv = np.full(batch, 700, dtype=np.int64)
            us = per_call_us(lambda m=model, q=q, kv=kv: m.step_time("target", q, kv), args.calls)
            rows.append({"cost": name, "batch": batch, "us_per_call": round(us, 2)})
    if args.json:
        print(json.dumps({"rows": rows}))
    else:
        for r in rows:
            print(f"{r['cost']:<9} batch {r['batch']:>4}: {r['us_per_call']:6.2f} us/call")


if __name__ == "__main__":
    main()
