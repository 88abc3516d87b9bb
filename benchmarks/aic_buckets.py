"""Whether a curve priced within vLLM's kernel buckets holds out better, and how a row past
its bucket's grid points is priced (the choices of simulator.cost.measured.aic_dispatch).

    python benchmarks/aic_buckets.py                       # fp8 GEMM and all-reduce groups
    python benchmarks/aic_buckets.py --system h100_sxm --family gemm

Data: the bundled AIConfigurator curves (traces/data/aiconfigurator/curves), the GEMM cells
read cold as the cost reads them; nothing is fitted. Each candidate is judged as
benchmarks/aic_validate.py judges the cost: each interior grid point left out, the curve built
from the others (aic_ops.monotone within the buckets, aic_ops.Curve.at), against the raw row.

Candidates (bucket edges from vLLM's source, aic_dispatch's docstring cites it):

- GEMM fp8: ``none`` (no edges); ``dispatch`` (the M buckets of the dispatch function only);
  ``tiles`` (those and the tile rows inside them: aic_dispatch.fp8_edges; SM100, B200,
  from csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm100_fp8_dispatch.cuh
  ``cutlass_gemm_sm100_fp8_dispatch``: m <= 16, (16, 64] (m = 64 at k < 4096 its own config),
  (64, 256] with 128-row tiles, above 256-row tiles: the candidates aic_dispatch leaves out);
- all-reduce: ``none``; ``buckets`` (the custom all-reduce's one-stage / two-stage switch,
  aic_dispatch.allreduce_edges);

each bucketed one with a row past its bucket's last point priced ``flat`` or by its ``slope``.
Two nested choices, each scored only on what it did not choose on: per group, the edges by
5-fold cross-validation over the group's units (GEMM shapes; all-reduce rows), the fold's
choice the candidate of least MAPE on the other four folds; per family, flat or slope by
leaving each GPU out (the mode of least pooled MAPE on the other GPUs' bucketed groups).
"""

from __future__ import annotations

import argparse

import numpy as np

from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_dispatch import (
    FP8_ARCH,
    FULL_NVLINK,
    allreduce_edges,
    fp8_edges,
    steps,
)
from specbatch.simulator.cost.measured.aic_op_curves import shape_curves
from specbatch.simulator.cost.measured.aic_ops import ShapeCurves, interp_check

FOLDS = 5
#: GPU -> its fp8 dispatch (aic_dispatch.FP8_ARCH and the SM100 candidate).
ARCH = {**FP8_ARCH, "b200_sxm": "sm100"}
GEMM_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "l40s")
AR_SYSTEMS = FULL_NVLINK


def gemm_candidates(arch: str, n: int, k: int, top: float) -> dict:
    """name -> the fp8 GEMM's bucket edges at (n, k) under each candidate (module docstring)."""
    if arch == "sm100":
        low = [16, 63, 64] if k < 4096 else [16, 64]
        return {"none": (), "dispatch": (*low, 256),
                "tiles": (*low, 128, 256, *steps(256, 256, top))}
    dispatch = {"sm90": (16, 64, 128), "sm89": (16, 32, 64, 128, 256)}[arch]
    return {"none": (), "dispatch": dispatch, "tiles": fp8_edges(arch, n, top)}


def gemm_errors(system: str) -> dict:
    """(candidate, extrap) -> per shape, the signed held-out errors # [G - 2]."""
    sc = shape_curves(system, "gemm", "fp8")
    frame = load_curves(system)["gemm"]
    raw = ShapeCurves("gemm", frame[frame["dtype"] == "fp8"], None, {}).points
    out: dict = {}
    for key in sorted(sc.points):
        grid, secs = sc.points[key]
        truth = raw[key][1]
        for name, edges in gemm_candidates(ARCH[system], key[0], key[1], grid[-1]).items():
            for extrap in (("flat",) if name == "none" else ("flat", "slope")):
                e = interp_check(grid, secs, "loglog", truth, tuple(map(float, edges)), extrap)
                out.setdefault((name, extrap), []).append(e)
    return out


def allreduce_errors(system: str) -> dict:
    """(candidate, extrap) -> per held-out row, its signed error # [1] (rows are the units)."""
    sc = shape_curves(system, "allreduce", "")
    out: dict = {}
    for key in sorted(sc.points):
        grid, secs = sc.points[key]
        edges = tuple(float(e) for e in allreduce_edges(system, key))
        for name, ed in (("none", ()), ("buckets", edges)):
            for extrap in (("flat",) if name == "none" else ("flat", "slope")):
                e = interp_check(grid, secs, "loglog", None, ed, extrap)
                out.setdefault((name, extrap), []).extend(np.array([v]) for v in e)
    return out


def mape(parts) -> float:
    return float(np.abs(np.concatenate(parts)).mean()) if len(parts) else float("nan")


def nested_edges(errors: dict, extrap: str) -> tuple[float, list]:
    """5-fold choice of the edges (at ``extrap`` for the bucketed candidates): the nested MAPE
    and each fold's choice."""
    names = sorted({n for n, _ in errors})
    pick = {n: errors[(n, extrap)] if (n, extrap) in errors else errors[(n, "flat")]
            for n in names}
    units = len(next(iter(pick.values())))
    fold = np.arange(units) % FOLDS
    held, chosen = [], []
    for f in range(FOLDS):
        train = [i for i in range(units) if fold[i] != f]
        test = [i for i in range(units) if fold[i] == f]
        best = min(names, key=lambda n: mape([pick[n][i] for i in train]))
        chosen.append(best)
        held.extend(pick[best][i] for i in test)
    return mape(held), chosen


def leave_gpu_out(groups: dict, bucketed: str) -> dict:
    """System -> (mode chosen on the other GPUs' ``bucketed`` groups, its MAPE here)."""
    out = {}
    for system in groups:
        others = [s for s in groups if s != system]
        best = min(("flat", "slope"), key=lambda m: mape(
            [e for s in others for e in groups[s].get((bucketed, m), [])]))
        out[system] = (best, mape(groups[system][(bucketed, best)]))
    return out


def report(family: str, groups: dict, bucketed: str) -> None:
    modes = leave_gpu_out({s: g for s, g in groups.items() if (bucketed, "slope") in g},
                          bucketed)
    keys = sorted({k for g in groups.values() for k in g})
    print(f"\n{family}: held-out MAPE per candidate (edges, row past its bucket's points)\n")
    print("| GPU | " + " | ".join(f"{n} {m}" if n != "none" else n for n, m in keys)
          + " | extrap, leave-GPU-out | edges, 5-fold nested (choices) |")
    print("|---|" + "---|" * (len(keys) + 2))
    for system, errors in groups.items():
        mode = modes.get(system, ("flat", None))[0]
        nested, chosen = nested_edges(errors, mode)
        cells = [f"{100 * mape(errors[k]):.2f} %" for k in keys]
        left = f"{mode} ({100 * modes[system][1]:.2f} %)" if system in modes else "-"
        print(f"| {system} | " + " | ".join(cells) + f" | {left} | {100 * nested:.2f} % "
              f"({', '.join(chosen)}) |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", nargs="+", default=None)
    ap.add_argument("--family", nargs="+", default=["gemm", "allreduce"],
                    choices=["gemm", "allreduce"])
    args = ap.parse_args()
    if "gemm" in args.family:
        systems = args.system or GEMM_SYSTEMS
        report("GEMM fp8", {s: gemm_errors(s) for s in systems if s in ARCH}, "tiles")
    if "allreduce" in args.family:
        systems = args.system or AR_SYSTEMS
        report("all-reduce", {s: allreduce_errors(s) for s in systems if s in AR_SYSTEMS},
               "buckets")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
