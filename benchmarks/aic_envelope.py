"""How the monotone envelope of ``cost = "aic"``'s measured curves moves them off their rows,
and which envelope holds out best against the raw rows.

    python benchmarks/aic_envelope.py                      # every bundled GPU, both tables
    python benchmarks/aic_envelope.py --system h100_sxm

Every GEMM / MoE / all-reduce curve the cost prices (simulator.cost.measured.aic_curve.Curve) is
its measured rows made non-decreasing in the row coordinate (aic_curve.monotone), then
interpolated log-log. Data: the bundled AIConfigurator curves (traces/data/aiconfigurator/
curves), each (GPU, family, dtype) group's rows as the envelope receives them (the GEMM cells
and MoE rows read cold, aic_cold: a deliberate floor, not the envelope's doing). Nothing is
fitted; every envelope is judged on the same rows. Two tables:

- **moved**: per group, how many points the envelope moves by more than 20 % and 50 % from
  their own row, and the worst move (signed), for the suffix minimum (aic_curve.monotone before
  the robust envelope) and for aic_curve.monotone;
- **candidates**: per group, each candidate's error against the RAW rows (never against an
  enveloped copy of them): ``held out``, each interior point left out, the envelope built from
  the rest and interpolated log-log at the point (twice the spacing the cost interpolates over;
  MAPE, p90 of |error|, share of points off by > 20 %); ``in place``, the envelope of all
  points read at each point (MAPE, share > 20 %).

Candidates (:data:`CANDIDATES`): the suffix minimum; the running maximum (the first version's);
a running 3-point median (endpoints kept) then the suffix minimum; isotonic regression
(pool-adjacent-violators, least squares, non-decreasing) on log time; the 3-point median then
isotonic, the one aic_curve.monotone is (chosen on these numbers: docs/fidelity.md carries the
tables and the choice).
"""

from __future__ import annotations

import argparse

import numpy as np

from specbatch.simulator.cost.measured.aic_curve import isotonic, median3, monotone
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_import import COMMON_SYSTEMS
from specbatch.simulator.cost.measured.aic_op_curves import shape_curves


def suffix_min(secs: np.ndarray) -> np.ndarray:
    """t_i = min over j >= i of t_j (aic_curve.monotone before the robust envelope)."""
    return np.minimum.accumulate(np.asarray(secs, dtype=np.float64)[::-1])[::-1]


def running_max(secs: np.ndarray) -> np.ndarray:
    """t_i = max over j <= i of t_j (the first version's envelope)."""
    return np.maximum.accumulate(np.asarray(secs, dtype=np.float64))


def log_isotonic(secs: np.ndarray) -> np.ndarray:
    """Isotonic regression of log ``secs``, back in seconds."""
    return np.exp(isotonic(np.log(secs)))


#: name -> envelope (seconds # [G] -> non-decreasing seconds # [G]).
CANDIDATES = {
    "suffix min": suffix_min,
    "running max": running_max,
    "median-3 + suffix min": lambda s: suffix_min(median3(s)),
    "isotonic (log)": log_isotonic,
    "median-3 + isotonic (log) = aic_curve.monotone": monotone,
}


def groups(system: str):
    """(family, dtype, [(grid, seconds), ...]) of each curve group of ``system`` the cost reads
    through aic_curve.Curve, the rows as the envelope receives them."""
    curves = load_curves(system)
    for family in ("gemm", "moe"):
        if family in curves:
            for dtype in sorted(set(curves[family]["dtype"])):
                yield family, dtype, list(shape_curves(system, family, dtype).points.values())
    if "allreduce" in curves:
        yield "allreduce", "", list(shape_curves(system, "allreduce", "").points.values())


def held_out(grid: np.ndarray, secs: np.ndarray, envelope) -> np.ndarray:
    """Signed error against ``secs`` of each interior point left out, the envelope built from
    the rest and interpolated log-log at the point # [G - 2]."""
    out = np.empty(max(len(grid) - 2, 0))
    lg = np.log(grid)
    for i in range(1, len(grid) - 1):
        keep = np.r_[0:i, i + 1:len(grid)]
        env = envelope(secs[keep])
        out[i - 1] = np.exp(np.interp(lg[i], lg[keep], np.log(env))) / secs[i] - 1.0
    return out


def moved(curves, envelope) -> dict:
    """Points the envelope moves by > 20 % / > 50 % of their row, and the worst move."""
    err = np.concatenate([envelope(s) / s - 1.0 for _, s in curves])
    worst = err[np.argmax(np.abs(err))]
    return {"points": err.size, "over20": int((np.abs(err) > 0.2).sum()),
            "over50": int((np.abs(err) > 0.5).sum()), "worst": float(worst)}


def judge(curves, envelope) -> dict:
    """``held out`` and ``in place`` errors of ``envelope`` against the raw rows."""
    lo = np.abs(np.concatenate([held_out(g, s, envelope) for g, s in curves]))
    ip = np.abs(np.concatenate([envelope(s) / s - 1.0 for _, s in curves]))
    return {"held_mape": float(lo.mean()), "held_p90": float(np.percentile(lo, 90)),
            "held_over20": float((lo > 0.2).mean()), "in_mape": float(ip.mean()),
            "in_over20": float((ip > 0.2).mean())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", nargs="+", default=list(COMMON_SYSTEMS),
                    choices=list(COMMON_SYSTEMS), help="bundled AIConfigurator systems")
    ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    args = ap.parse_args()
    moves, judged = [], []
    for system in args.system:
        for family, dtype, curves in groups(system):
            name = f"| {system} | {family} {dtype}".rstrip()
            before, now = moved(curves, suffix_min), moved(curves, monotone)
            moves.append(f"{name} | {before['points']} | {before['over20']} / {before['over50']}"
                         f" ({100 * before['worst']:+.0f} %) | {now['over20']} / "
                         f"{now['over50']} ({100 * now['worst']:+.0f} %) |")
            cells = []
            for cand in args.candidates:
                j = judge(curves, CANDIDATES[cand])
                cells.append(f"{100 * j['held_mape']:.1f} % ({100 * j['held_p90']:.0f} %, "
                             f"{100 * j['held_over20']:.1f} %); {100 * j['in_mape']:.1f} % "
                             f"({100 * j['in_over20']:.1f} %)")
            judged.append(f"{name} | " + " | ".join(cells) + " |")
    print("| GPU | op | points | suffix min: moved > 20 % / > 50 % (worst) | "
          "aic_curve.monotone: moved > 20 % / > 50 % (worst) |")
    print("|---|---|---|---|---|")
    print("\n".join(moves))
    print()
    print("held out: MAPE (p90, share > 20 %); in place: MAPE (share > 20 %), against the raw rows")
    print()
    print("| GPU | op | " + " | ".join(args.candidates) + " |")
    print("|---|---|" + "---|" * len(args.candidates))
    print("\n".join(judged))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
