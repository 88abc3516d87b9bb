"""What sliding-window attention costs the simulator: a windowed model is priced from arrays.

A sliding layer's work needs per-request minima (simulator.cost.analytic.window), so the engine
prices a windowed model one ``step_time`` call per pass instead of from the five batch sums
(simulator.cost.interface.sums_path). This measures the price of that, in the same run:

1. microseconds per ``step_time`` call of the roofline, Mistral-7B-v0.1 (every layer slides,
   W = 4096) against the same shape without its window, at batch 1..512;
2. CPU seconds per engine step of one ``simulate`` run (TETRIS k = 3, e = 1, vllm-v1, H100
   roofline, vicuna-68m draft, the synthetic trace), windowed against unwindowed, alternating
   run by run, best of ``--repeat``; both runs' summaries are printed (equal where no context
   reaches the window).

    .venv/bin/python benchmarks/window_bench.py [--requests 2000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
from cost_bench import per_call_us  # a sibling script: its folder is on sys.path

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.run import simulate
from specbatch.traces.models.shapes import SHAPES
from specbatch.traces.synth import SynthConfig, synth_trace


def models() -> dict[str, RooflineCost]:
    hw, draft = get_hardware("h100"), SHAPES["vicuna-68m"]
    shape = SHAPES["mistral-7b-v0.1"]
    full = dataclasses.replace(shape, sliding_window=0, sliding_layers=0)
    return {"windowed": RooflineCost(hw, shape, draft), "full": RooflineCost(hw, full, draft)}


def call_rows(costs: dict, calls: int) -> list[dict]:
    rows = []
    for batch in (1, 8, 64, 512):
        q = np.full(batch, 4, dtype=np.int64)  # [batch]
        kv = np.arange(batch, dtype=np.int64) * 97 % 9000  # [batch] some past the window
        us = {name: per_call_us(lambda m=m, q=q, kv=kv: m.step_time("target", q, kv), calls)
              for name, m in costs.items()}
        rows.append({"batch": batch, **{f"{k}_us": round(v, 2) for k, v in us.items()},
                     "ratio": round(us["windowed"] / us["full"], 2)})
    return rows


def run_rows(costs: dict, requests: int, repeat: int) -> dict:
    trace = synth_trace(SynthConfig(requests=64, output_mean=200, prompt_mean=1500, seed=1))
    config = load_config(None, trace="synth", policy="tetris", extra=1, requests=requests,
                         arrival="burst", seed=1)
    best, summaries = {}, {}
    for _ in range(repeat):
        for name, cost in costs.items():  # alternating: the machine is shared
            t0 = time.process_time()
            result = simulate(config, trace, cost_model=cost)
            cpu = time.process_time() - t0
            steps = int(result.summary["steps"])
            best[name] = min(best.get(name, float("inf")), cpu / steps)
            summaries[name] = {k: result.summary[k] for k in ("steps", "throughput",
                                                              "target_time", "tpot_mean")}
    return {"us_per_step": {k: round(1e6 * v, 1) for k, v in best.items()},
            "ratio": round(best["windowed"] / best["full"], 2), "summaries": summaries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    costs = models()
    out = {"calls": call_rows(costs, args.calls),
           "run": run_rows(costs, args.requests, args.repeat)}
    if args.json:
        print(json.dumps(out))
        return
    for r in out["calls"]:
        print(f"step_time batch {r['batch']:>4}: windowed {r['windowed_us']:7.2f} us, "
              f"full {r['full_us']:7.2f} us, ratio {r['ratio']:.2f}")
    run = out["run"]
    print(f"simulate, {args.requests} requests: CPU per step windowed "
          f"{run['us_per_step']['windowed']} us, full {run['us_per_step']['full']} us, "
          f"ratio {run['ratio']:.2f} (best of {args.repeat}, alternating)")
    for name, s in run["summaries"].items():
        print(f"  {name:8s} " + ", ".join(f"{k} {v:.6g}" for k, v in s.items()))


if __name__ == "__main__":
    main()
