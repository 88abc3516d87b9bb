"""Held-out errors of the estimators ``cost = "aic"`` uses, per GPU and op family.

    python benchmarks/aic_validate.py                 # every bundled GPU -> the JSON + table
    python benchmarks/aic_validate.py --system h100_sxm --no-write

Data: the bundled compact AIConfigurator curves (traces/data/aiconfigurator/curves; fitted and
judged on them only). Per estimator (simulator.cost.measured.aic_ops, aic_attention):

Every curve is judged against its cleaned points (aic_ops.monotone: non-decreasing by the
suffix minimum, isolated upward spikes removed), the values the cost interpolates.

- GEMM, MoE, **measured**: an op whose shape is timed is its measured curve interpolated in
  the row coordinate; judged by leaving each interior grid point out and interpolating it from
  its two neighbours (twice the spacing the cost interpolates over), log-log and linear (the
  choice of aic_ops);
- GEMM, MoE, **transfer**: a shape left out and priced from its two nearest timed shapes x the
  family law (bundled laws.json; fitted on every shape, a mild optimism, benchmarks/
  cost_vs_aic.py refits without it and reports the same to within ~0.1 pt);
- attention: the one law over the sums fitted on a head shape's own decode and prefill rows
  (what the cost uses where the shape is timed; ``shape``), and leaving that shape out of a
  fit on every other shape of its head width (``loso``), decode and prefill apart, within the
  serving range of aic_pricer (decode batch <= 512, context < 32k; prefill batch <= 16);
- all-reduce: each message size left out and interpolated log-log from its neighbours.

Writes simulator/cost/measured/data/aic_validation.json (what ``cost show --json`` reports per
part) and prints the markdown table docs/fidelity.md carries.
"""

from __future__ import annotations

import argparse

import numpy as np

from specbatch.io import dumps
from specbatch.simulator.cost.measured.aic_attention import fit_attention, held_out, seconds
from specbatch.simulator.cost.measured.aic_cost import VALIDATION
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_import import COMMON_SYSTEMS, load_laws
from specbatch.simulator.cost.measured.aic_ops import interp_check, monotone
from specbatch.simulator.cost.measured.aic_pricer import attention_rows, shape_curves

TARGET = 0.08
SHAPE = ["heads", "kv_heads", "head_dim"]


def record(signed: np.ndarray, check: str, **extra) -> dict:
    """MAPE, mean signed error, p90 of |error| of signed relative errors # [rows]."""
    signed = np.asarray(signed, dtype=np.float64)
    err = np.abs(signed)
    return {"mape": round(float(err.mean()), 4), "mean_signed": round(float(signed.mean()), 4),
            "p90": round(float(np.percentile(err, 90)), 4), "rows": int(err.size),
            "check": check, **extra}


def curve_checks(system: str, family: str, dtype: str) -> dict:
    """{"measured": ..., "transfer": ...} of one GEMM / MoE group."""
    sc = shape_curves(system, family, dtype)
    logs, lins, trans = [], [], []
    for key, (grid, secs) in sc.points.items():
        mono = monotone(secs)  # the cleaned curve: the truth of both checks
        logs.append(interp_check(grid, mono, "loglog"))
        lins.append(interp_check(grid, mono, "linear"))
        curve = sc.curve(key, exclude=True)
        pred = np.array([curve.at(float(x)) for x in grid])
        trans.append(pred / mono - 1.0)
    log, lin = np.concatenate(logs), np.concatenate(lins)
    return {"measured": record(log, "each interior grid point left out, log-log from its "
                                    "neighbours", linear_mape=round(float(np.abs(lin).mean()), 4),
                               shapes=len(sc.points)),
            "transfer": record(np.concatenate(trans), "each timed shape left out, priced from "
                                                      "its 2 nearest (law x ratio)",
                               shapes=len(sc.points))}


def attention_checks(system: str, kv: str, head_dim: int = 128) -> dict | None:
    d, p = attention_rows(system, kv)
    d, p = d[d["head_dim"] == head_dim], p[p["head_dim"] == head_dim]
    if d.empty or p.empty:
        return None
    keys = sorted(set(map(tuple, d[SHAPE].to_numpy().tolist()))
                  & set(map(tuple, p[SHAPE].to_numpy().tolist())))
    own_d, own_p, abs_err, total = [], [], 0.0, 0.0
    for key in keys:
        md = (d[SHAPE].to_numpy() == np.array(key)).all(axis=1)
        mp = (p[SHAPE].to_numpy() == np.array(key)).all(axis=1)
        fit = fit_attention(d[md], p[mp])
        t = np.concatenate([d["latency_s"].to_numpy()[md], p["latency_s"].to_numpy()[mp]])
        pred = seconds(fit, d[md], p[mp])
        e = pred / t - 1.0
        abs_err, total = abs_err + float(np.abs(pred - t).sum()), total + float(t.sum())
        own_d.append(e[:int(md.sum())])
        own_p.append(e[int(md.sum()):])
    loso = held_out(d, p)
    own_d, own_p = np.concatenate(own_d), np.concatenate(own_p)
    both = np.concatenate([own_d, own_p])
    return record(both, "one law over the sums fitted on the head shape's own decode + "
                        f"prefill rows (head width {head_dim}, serving range)",
                  decode_mape=round(float(np.abs(own_d).mean()), 4),
                  prefill_mape=round(float(np.abs(own_p).mean()), 4),
                  time_weighted=round(abs_err / total, 4),
                  loso_decode_mape=round(float(loso["decode"].mean()), 4),
                  loso_prefill_mape=round(float(loso["prefill"].mean()), 4),
                  shapes=len(keys))


def allreduce_checks(system: str) -> dict | None:
    sc = shape_curves(system, "allreduce", "")
    errs = [interp_check(g, monotone(s), "loglog") for g, s in sc.points.values()]
    return record(np.concatenate(errs), "each message size left out, log-log from its "
                                        "neighbours", worlds=[k[0] for k in sc.points])


def validate(system: str) -> dict:
    out = {}
    curves = load_curves(system)
    for family in ("gemm", "moe"):
        if family not in curves:
            continue
        for dtype in sorted(set(curves[family]["dtype"])):
            for est, rec in curve_checks(system, family, dtype).items():
                out[f"{system}|{family}|{dtype}|{est}"] = rec
            out[f"{system}|{family}|{dtype}"] = out[f"{system}|{family}|{dtype}|transfer"]
    for kv in sorted(set(curves["attention_decode"]["kv_dtype"])):
        rec = attention_checks(system, kv)
        if rec is not None:
            out[f"{system}|attention|{kv}"] = rec
    if "allreduce" in curves:
        out[f"{system}|allreduce"] = allreduce_checks(system)
    return out


def table(checks: dict, target: float = TARGET) -> list[str]:
    """Markdown rows: GPU, op, estimator, held-out MAPE (p90), meets the target."""
    out = ["| GPU | vLLM | op | estimator | held-out MAPE (p90) | <= 8 % |",
           "|---|---|---|---|---|---|"]
    versions = {s: v for s, (v, _) in load_laws().items()}
    for key, rec in checks.items():
        parts = key.split("|")
        system, op = parts[0], " ".join(parts[1:3])
        if parts[1] in ("gemm", "moe") and len(parts) == 3:
            continue  # the alias of the transfer row
        if parts[1] == "attention":
            est = (f"one law, own shape: time-weighted {100 * rec['time_weighted']:.1f} %, "
                   f"decode {100 * rec['decode_mape']:.1f} %, prefill "
                   f"{100 * rec['prefill_mape']:.1f} %; shape left out: decode "
                   f"{100 * rec['loso_decode_mape']:.1f} %, prefill "
                   f"{100 * rec['loso_prefill_mape']:.1f} %")
        elif parts[1] == "allreduce":
            est = "measured curve, log-log in bytes"
        elif parts[3] == "measured":
            est = f"measured curve, log-log in rows (linear: {100 * rec['linear_mape']:.1f} %)"
        else:
            est = "transfer from the 2 nearest timed shapes"
        ok = "yes" if rec["mape"] <= target else "**no**"
        out.append(f"| {system} | {versions.get(system, '?')} | {op} | {est} | "
                   f"{100 * rec['mape']:.1f} % ({100 * rec['p90']:.0f} %) | {ok} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", nargs="+", default=list(COMMON_SYSTEMS))
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    checks = {}
    for system in args.system:
        checks.update(validate(system))
    if not args.no_write:
        VALIDATION.write_text(dumps(checks, indent=1) + "\n")
    print("\n".join(table(checks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
