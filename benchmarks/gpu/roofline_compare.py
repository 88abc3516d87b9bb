"""Measured GPU latency profiles against the roofline preset's floor (issue 16 §2).

For every cell of a profile (``specbatch profile``: batch B, query tokens q per request, KV
length c) the roofline of simulator/cost/registry.py gives the time of one forward pass on the named
hardware preset (``RooflineCost.step_time``: max(compute, memory) + fixed launch latencies,
*without* the per-step engine overhead); this script prints measured / roofline per model
(median, range, and at batch 1 / 64 / 256), the MAPE of the roofline as a predictor of the
measured latency, and the measured step latency at a few cells. The presets are not changed.

    python benchmarks/gpu/roofline_compare.py --hardware h100 \
        traces/data/profiles/h100-llama-3.1-8b.parquet ... [--json PATH]

The shape of each profile is its ``model`` column (a traces.models.shapes name).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.profiled import read_profile
from specbatch.traces.models.shapes import get_shape

CELLS = ((1, 1, 512), (64, 1, 512), (256, 1, 512), (1, 4, 512), (64, 4, 512), (256, 4, 512))


def compare(path: str, hardware: str) -> dict:
    df = read_profile(path)
    model = str(df["model"].iloc[0]).split("@")[0]
    shape = get_shape(model)
    cost = RooflineCost(get_hardware(hardware), shape, shape)
    roof = np.array([cost.step_time("target", np.full(int(b), float(q)), np.full(int(b), float(c)))
                     for b, q, c in zip(df["batch_size"], df["query_tokens"], df["kv_tokens"])])
    meas = df["latency_s"].to_numpy(dtype=float)
    ratio = meas / roof
    by_batch = {}
    for b in (1, 64, 256):
        sel = df["batch_size"].to_numpy() == b
        if sel.any():
            by_batch[f"b{b}"] = {"median": float(np.median(ratio[sel])),
                                 "min": float(ratio[sel].min()), "max": float(ratio[sel].max())}
    cells = {}
    for b, q, c in CELLS:
        sel = ((df["batch_size"] == b) & (df["query_tokens"] == q) & (df["kv_tokens"] == c))
        if sel.any():
            i = int(np.flatnonzero(sel.to_numpy())[0])
            cells[f"b{b}_q{q}_kv{c}"] = {"measured_ms": 1e3 * meas[i], "roofline_ms": 1e3 * roof[i]}
    return {"profile": str(path), "model": model, "hardware": hardware, "cells": len(df),
            "device": str(df["device"].iloc[0]), "dtype": str(df["dtype"].iloc[0]),
            "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
            "ratio_max": float(ratio.max()),
            "roofline_mape": float(np.mean(np.abs(roof - meas) / meas)),
            "ratio_by_batch": by_batch, "step_ms": cells}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profiles", nargs="+")
    p.add_argument("--hardware", default="h100")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rows = [compare(path, args.hardware) for path in args.profiles]
    for r in rows:
        print(f"{r['model']:<14} {r['cells']:>4} cells  measured/roofline({r['hardware']}) "
              f"median {r['ratio_median']:.2f} [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]  "
              f"roofline MAPE {100 * r['roofline_mape']:.1f}%")
        for k, v in r["ratio_by_batch"].items():
            print(f"    {k:<5} ratio median {v['median']:.2f} [{v['min']:.2f}, {v['max']:.2f}]")
        for k, v in r["step_ms"].items():
            print(f"    {k:<16} measured {v['measured_ms']:8.3f} ms  roofline "
                  f"{v['roofline_ms']:8.3f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
