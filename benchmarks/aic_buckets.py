"""Whether a curve priced within vLLM's kernel buckets holds out better, and how a row past
its bucket's grid points is priced (the choices of simulator.cost.measured.aic_dispatch).

    python benchmarks/aic_buckets.py                       # fp8 GEMM and all-reduce groups
    python benchmarks/aic_buckets.py --system h100_sxm --family gemm
    python benchmarks/aic_buckets.py --family moe           # fp8 MoE, Triton MoE groups

Data: the bundled AIConfigurator curves (traces/data/aiconfigurator/curves), the GEMM cells
read cold as the cost reads them; nothing is fitted. Each candidate is judged as
benchmarks/aic_validate.py judges the cost: each interior grid point left out, the curve built
from the others (aic_curve.monotone within the buckets, aic_curve.Curve.at), against the raw row.

Candidates (bucket edges from vLLM's source, aic_dispatch's docstring cites it):

- GEMM fp8: ``none`` (no edges); ``dispatch`` (the M buckets of the dispatch function only);
  ``tiles`` (those and the tile rows inside them: aic_dispatch.fp8_edges; SM100, B200,
  from csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm100_fp8_dispatch.cuh
  ``cutlass_gemm_sm100_fp8_dispatch``: m <= 16, (16, 64] (m = 64 at k < 4096 its own config),
  (64, 256] with 128-row tiles, above 256-row tiles: the candidates aic_dispatch leaves out);
- all-reduce: ``none``; ``buckets`` (the custom all-reduce's one-stage / two-stage switch,
  aic_dispatch.allreduce_edges);
- MoE fp8 on H100 / H200 (FlashInfer CUTLASS's default tactic): ``none``; ``tiles`` (a tile row
  per 128 routed rows of an expert, aic_dispatch.moe_edges); printed beside them, not
  candidates, the same at 64 and 256 rows (what the rows say of the tile height). Also the
  raw rows' jump: the median t(next) / t(prev) over the shapes' consecutive grid points
  (>= 256 tokens) that cross an edge, and that do not;
- MoE Triton (``fused_experts`` / ``TritonExperts``: bf16 on H100 / H200 / L40S, fp8 block,
  L40S's fp8; vllm/model_executor/layers/fused_moe/fused_moe.py ``try_get_optimal_moe_config``):
  ``none``; ``tuned`` (the tuned JSON's key nearest M: an edge midway between its keys 1, 2,
  4, ..., 3072, 4096, a tie to the smaller); ``default`` (``get_default_config``: 16-row blocks
  up to M = E local experts, 64-row above, and a block row per 64 rows of an expert there;
  block fp8: 64-row blocks at every M);
  ``tiles16`` / ``tiles64`` (a block row per 16 / 64 rows of an expert only);

each bucketed one with a row past its bucket's last point priced ``flat`` or by its ``slope``.
Two nested choices, each scored only on what it did not choose on: per group, the edges by
5-fold cross-validation over the group's units (GEMM shapes; all-reduce rows), the fold's
choice the candidate of least MAPE on the other four folds; per family, flat or slope by
leaving each GPU out (the mode of least pooled MAPE on the other GPUs' bucketed groups).
"""

from __future__ import annotations

import argparse

import numpy as np

from specbatch.simulator.cost.measured.aic_curve import interp_check
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_dispatch import (
    FP8_ARCH,
    FULL_NVLINK,
    MOE_SM90,
    MOE_TILE_ROWS,
    allreduce_edges,
    bucket,
    fp8_edges,
    moe_edges,
    steps,
)
from specbatch.simulator.cost.measured.aic_import import COMMON_SYSTEMS
from specbatch.simulator.cost.measured.aic_op_curves import shape_curves
from specbatch.simulator.cost.measured.aic_ops import ShapeCurves

FOLDS = 5
#: GPU -> its fp8 dispatch (aic_dispatch.FP8_ARCH and the SM100 candidate).
ARCH = {**FP8_ARCH, "b200_sxm": "sm100"}
GEMM_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "l40s")
AR_SYSTEMS = FULL_NVLINK
#: The Triton MoE groups (system, dtype) judged for the Triton candidates.
TRITON_MOE = (("h100_sxm", "bfloat16"), ("h100_sxm", "fp8_block"), ("h200_sxm", "bfloat16"),
              ("h200_sxm", "fp8_block"), ("l40s", "bfloat16"), ("l40s", "fp8"),
              ("l40s", "fp8_block"))
#: The tuned fused_moe JSONs' keys (M): the config of the key nearest the token count.
TUNED_KEYS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
#: The MoE rows' jump is measured from this many tokens on (every expert routed rows).
JUMP_FROM = 256


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


def triton_candidates(dtype: str):
    """(key, top) -> name -> the Triton MoE candidates' edges at shape ``key`` (module
    docstring); block fp8's ``get_default_config`` is 64-row blocks at every M."""
    def candidates(key: tuple, top: float) -> dict:
        local = int(key[2]) // int(key[5])
        tuned = tuple((a + b) // 2 for a, b in zip(TUNED_KEYS, TUNED_KEYS[1:]))
        rows64 = moe_edges(key, top, 64)
        default = rows64 if dtype == "fp8_block" else tuple(
            sorted({local, *(e for e in rows64 if e > local)}))
        return {"none": (), "tuned": tuned, "default": default,
                "tiles16": moe_edges(key, top, 16), "tiles64": rows64}
    return candidates


def moe_errors(system: str, dtype: str, candidates) -> dict:
    """(candidate, extrap) -> per shape, the signed held-out errors # [G - 2] of the MoE
    group, the curves read as the cost reads them (aic_cold.cold_moe) against the raw rows."""
    sc = shape_curves(system, "moe", dtype)
    frame = load_curves(system)["moe"]
    raw = ShapeCurves("moe", frame[frame["dtype"] == dtype], None, {}).points
    out: dict = {}
    for key in sorted(sc.points):
        grid, secs = sc.points[key]
        for name, edges in candidates(key, grid[-1]).items():
            for extrap in (("flat",) if name == "none" else ("flat", "slope")):
                e = interp_check(grid, secs, "loglog", raw[key][1],
                                 tuple(map(float, edges)), extrap)
                out.setdefault((name, extrap), []).append(e)
    return out


def cutlass_candidates(key: tuple, top: float) -> dict:
    return {"none": (), "tiles": moe_edges(key, top)}


def moe_jump(system: str, dtype: str, tile: int = MOE_TILE_ROWS) -> tuple:
    """(median, count) of the raw t(next) / t(prev) over consecutive grid points >= JUMP_FROM
    tokens that cross an edge of ``tile`` rows, and of those that do not."""
    frame = load_curves(system)["moe"]
    raw = ShapeCurves("moe", frame[frame["dtype"] == dtype], None, {}).points
    cross, within = [], []
    for key, (grid, secs) in raw.items():
        edges = moe_edges(key, grid[-1], tile)
        for i in range(len(grid) - 1):
            if grid[i] >= JUMP_FROM:
                hop = bucket(edges, grid[i]) != bucket(edges, grid[i + 1])
                (cross if hop else within).append(secs[i + 1] / secs[i])
    return (float(np.median(cross)), len(cross)), (float(np.median(within)), len(within))


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
    ap.add_argument("--system", nargs="+", default=None, choices=list(COMMON_SYSTEMS),
                    help="bundled AIConfigurator systems (default: each family's own)")
    ap.add_argument("--family", nargs="+", default=["gemm", "allreduce"],
                    choices=["gemm", "allreduce", "moe"])
    args = ap.parse_args()
    if "gemm" in args.family:
        systems = args.system or GEMM_SYSTEMS
        report("GEMM fp8", {s: gemm_errors(s) for s in systems if s in ARCH}, "tiles")
    if "allreduce" in args.family:
        systems = args.system or AR_SYSTEMS
        report("all-reduce", {s: allreduce_errors(s) for s in systems if s in AR_SYSTEMS},
               "buckets")
    if "moe" in args.family:
        moe(args.system)
    return 0


def moe(systems) -> None:
    """The fp8 MoE (FlashInfer CUTLASS) and Triton MoE reports (module docstring)."""
    cutlass = [s for s in (systems or MOE_SM90) if s in MOE_SM90]
    report("MoE fp8 (FlashInfer CUTLASS)",
           {s: moe_errors(s, "fp8", cutlass_candidates) for s in cutlass}, "tiles")
    print("\n| GPU | tile rows | held-out, flat / slope | jump across an edge (n) | within (n) |")
    print("|---|---|---|---|---|")
    for system in cutlass:
        for tile in (64, MOE_TILE_ROWS, 256):
            errs = moe_errors(system, "fp8", lambda k, top, t=tile: {"t": moe_edges(k, top, t)})
            (jc, nc), (jw, nw) = moe_jump(system, "fp8", tile)
            print(f"| {system} | {tile} | {100 * mape(errs[('t', 'flat')]):.2f} / "
                  f"{100 * mape(errs[('t', 'slope')]):.2f} % | {jc:.3f} ({nc}) | "
                  f"{jw:.3f} ({nw}) |")
    groups = [(s, d) for s, d in TRITON_MOE if not systems or s in systems]
    report("MoE Triton", {f"{s} {d}": moe_errors(s, d, triton_candidates(d))
                          for s, d in groups},
           "default")


if __name__ == "__main__":
    raise SystemExit(main())
