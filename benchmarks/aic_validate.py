"""Held-out errors of the estimators ``cost = "aic"`` uses, per GPU and op family.

    python benchmarks/aic_validate.py                 # every bundled GPU -> the JSON + table
    python benchmarks/aic_validate.py --system h100_sxm --no-write

Data: the bundled compact AIConfigurator curves (traces/data/aiconfigurator/curves; fitted and
judged on them only). Per estimator (simulator.cost.measured.aic_ops, aic_attention):

Every curve is judged against its raw rows as timed, never against a cleaned copy (the
cost's envelope, aic_curve.monotone, is part of what is judged: a point left out, the envelope
is built from the others); the cost interpolates the GEMM cells read cold (aic_cold.cold_gemm),
so a GEMM row also gives the error on the cells the cold floor leaves unchanged, and an MLA
row the error on the module rows its cold floors leave.

- GEMM, MoE, **measured**: an op whose shape is timed is its measured curve interpolated in
  the row coordinate; judged by leaving each interior grid point out and interpolating it from
  its two neighbours (twice the spacing the cost interpolates over), log-log and linear (the
  choice of aic_ops); where vLLM switches kernel along the rows (aic_dispatch: H100 / H200 /
  L40S fp8), from the points of its own kernel bucket, as the cost prices it;
- GEMM, MoE, **transfer**: a shape left out and priced from its two nearest timed shapes x the
  family law (bundled laws.json; fitted on every shape, a mild optimism, benchmarks/
  cost_vs_aic.py refits without it and reports the same to within ~0.1 pt); a MoE shape by
  aic_moe_transfer (nested: the law refitted and the variant chosen without the shape's rows),
  and also each timed model left out whole (what an untimed model gets);
- attention: the grid law (aic_attention.grid_tables, tabulated.grid_attention) with each
  timed head shape left out and carried from its two nearest timed shapes (``shape``: what an
  untimed model gets; the leave-one-model-out of issue 42), and with each interior column /
  row of a shape's own grid left out (``cells``), decode and prefill apart and decode at
  short context (< 256 cached tokens) alone, within the serving range of aic_pricer (decode
  batch <= 512, context < 32k; prefill batch <= 16); the decode cells and rows read cold as
  the law reads them (aic_mixed.cold_rate: no faster than their KV at the fastest rate the
  GPU's decode cells reach over >= 1 GiB; this moves only RTX PRO 6000's); L40S's decode
  (no grid) by its decode-only linear law with the shape left out;
- MLA (simulator.cost.measured.aic_mla): the core's grid law (the module row less
  DeepSeek-V3's projections on the bf16 GEMM curves) with each timed head count left out and
  carried from its two nearest by the core's linear law refitted without it, the projections
  added back, against the measured module rows (A100: kernel rows); and each interior column
  / row of a head count's core grid left out, against the core cells (a harder measure: the
  projections' share is not in its denominator). The target is judged on the first;
- all-reduce: each message size left out and interpolated log-log from its neighbours (within
  the custom all-reduce's one-stage / two-stage buckets on the NVLink GPUs, aic_dispatch).

Writes simulator/cost/measured/data/aic_validation.json (what ``cost show --json`` reports per
part) and prints the markdown table docs/fidelity.md carries.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from specbatch.io import dumps
from specbatch.simulator.cost.measured.aic_attention import (
    cell_check,
    grid_seconds,
    held_out,
    law_cells,
)
from specbatch.simulator.cost.measured.aic_cells import attention_rows, shape_cells
from specbatch.simulator.cost.measured.aic_cost import VALIDATION
from specbatch.simulator.cost.measured.aic_curve import interp_check
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_import import COMMON_SYSTEMS, load_laws
from specbatch.simulator.cost.measured.aic_mixed import cold_args, cold_rate
from specbatch.simulator.cost.measured.aic_mla import (
    carried_cells,
    core_rows,
    coverage,
    fit,
    head_cells,
    triton_decode,
)
from specbatch.simulator.cost.measured.aic_op_curves import mla_gemm, shape_curves
from specbatch.simulator.cost.measured.aic_ops import ShapeCurves
from specbatch.simulator.cost.measured.aic_role_attention import attention_cells, width_fit

TARGET = 0.08
SHAPE = ["heads", "kv_heads", "head_dim"]
SHORT = 256  # decode "at short context": fewer cached tokens than this


def record(signed: np.ndarray, check: str, **extra) -> dict:
    """MAPE, mean signed error, p90 of |error| of signed relative errors # [rows]."""
    signed = np.asarray(signed, dtype=np.float64)
    err = np.abs(signed)
    return {"mape": round(float(err.mean()), 4), "mean_signed": round(float(signed.mean()), 4),
            "p90": round(float(np.percentile(err, 90)), 4), "rows": int(err.size),
            "check": check, **extra}


def curve_checks(system: str, family: str, dtype: str) -> dict:
    """{"measured": ..., "transfer": ...} of one GEMM / MoE group: the curves as the cost reads
    them (GEMM cells read cold, aic_cold.cold_gemm; made non-decreasing, aic_curve.monotone)
    judged against the raw rows as timed (neither floored nor enveloped), and against the raw
    rows the cold floor leaves unchanged (``unchanged_mape``)."""
    sc = shape_curves(system, family, dtype)
    frame = load_curves(system)[family]
    raw = ShapeCurves(family, frame[frame["dtype"] == dtype], None, {}).points
    logs, lins, trans, same = [], [], [], []
    for key, (grid, secs) in sc.points.items():
        truth = raw[key][1]  # the raw rows: the truth of both checks
        keep = secs == truth  # the cells the cold floor leaves as timed
        edges = sc.edges_of(key, grid)  # within vLLM's kernel buckets (aic_dispatch)
        logs.append(interp_check(grid, secs, "loglog", truth, edges, sc.extrap))
        lins.append(interp_check(grid, secs, "linear", truth, edges, sc.extrap))
        curve = sc.curve(key, exclude=True)
        pred = np.array([curve.at(float(x)) for x in grid])
        trans.append(pred / truth - 1.0)
        same.append((keep[1:-1], keep))
    extra = moe_checks(sc) if family == "moe" else {}
    log, lin, tr = np.concatenate(logs), np.concatenate(lins), np.concatenate(trans)
    keep_in = np.concatenate([k[0] for k in same])
    keep_all = np.concatenate([k[1] for k in same])

    def kept(err, mask):
        return round(float(np.abs(err[mask]).mean()), 4) if mask.any() else None

    moved = int((~keep_all).sum())
    return {"measured": record(log, "each interior grid point left out, log-log from its "
                                    "neighbours", linear_mape=round(float(np.abs(lin).mean()), 4),
                               shapes=len(sc.points), cold_moved=moved,
                               unchanged_mape=kept(log, keep_in)),
            "transfer": record(tr, "each timed shape left out, priced by aic_moe_transfer (law "
                                   "refitted and variant chosen without it)" if family == "moe"
                               else "each timed shape left out, priced from its 2 nearest "
                                    "(law x ratio)", shapes=len(sc.points), cold_moved=moved,
                               unchanged_mape=kept(tr, keep_all), **extra)}


def moe_checks(sc: ShapeCurves) -> dict:
    """What the MoE transfer (aic_moe_transfer) chose for each timed shape left out
    (``variants``: its description -> shapes), and each timed *model* (h, I, E, k) left out
    whole, every split of it priced from the other models (what a model the tables do not
    time gets; its variant chosen by leaving models out): ``model_mape``, ``model_p90``."""
    moe = sc.moe_transfer()
    picks = Counter(str(moe.chosen(frozenset([k]), "shape")) for k in sc.points)
    errs = []
    for model in sorted({k[:4] for k in sc.points}):
        out = frozenset(k for k in sc.points if k[:4] == model)
        if len(out) == len(sc.points):
            continue
        variant = moe.chosen(out, "model")
        for key in sorted(out):
            grid, truth = sc.points[key]
            curve = moe.curve(key, variant, out)
            errs.append(np.array([curve.at(float(x)) for x in grid]) / truth - 1.0)
    err = np.abs(np.concatenate(errs))
    return {"variants": dict(picks.most_common()), "model_mape": round(float(err.mean()), 4),
            "model_p90": round(float(np.percentile(err, 90)), 4)}


def stand_in(system: str, kv: str, key: tuple) -> tuple:
    """The decode cells the cost uses where a table spans no decode grid (L40S): the decode-only
    law of the width's (aic_pricer.AicPricer), at this head shape."""
    fit = width_fit(system, kv, key[2], decode_only=True)
    return law_cells(fit, key[0], key[1], key[2], 1.0 if kv == "fp8" else 2.0)


def attention_checks(system: str, kv: str) -> dict | None:
    """The grid law (aic_attention.grid_tables) judged two ways, decode and prefill apart,
    decode at short context (< 256 cached tokens) also alone: ``shape``, each timed head shape
    left out and carried from the two nearest timed shapes of its width by the width law's
    ratio (aic_role_attention.attention_cells, exclude: what a model whose shape is untimed
    gets; the width law is fitted on every shape, the left-out one too: a mild optimism, as the GEMM
    transfer's), against its measured rows; ``cells``, each interior column / row of a
    shape's own grid left out (aic_attention.cell_check), against the measured cell means."""
    grids = shape_cells(system, kv)
    if not grids:
        return None
    rate = cold_rate(system, kv)
    d, p = attention_rows(system, kv)
    gd, gp = d.groupby(SHAPE), p.groupby(SHAPE)
    loso = {"decode": [], "prefill": [], "short": []}
    cell = {"decode": [], "prefill": [], "short": []}
    reached = 0
    for key, (dec, pre) in grids.items():
        cold = cold_args(system, kv, key[1], key[2]) if dec is not None else None
        got = cell_check((dec if dec is not None else stand_in(system, kv, key), pre), cold)
        if dec is not None:
            cell["decode"].append(got["decode"])
            cell["short"].append(got["decode"][got["decode_context"] < SHORT])
        cell["prefill"].append(got["prefill"])
        carry, how = attention_cells(system, kv, *key, exclude=True)
        if carry is None:
            continue
        reached += 1
        rows_p = gp.get_group(key)
        rows_p = rows_p[rows_p["prompt"] > 1]
        stand = (carry[0] if carry[0] is not None else stand_in(system, kv, key), carry[1])
        loso["prefill"].append(grid_seconds(
            stand, rows_p["batch"].to_numpy(np.float64), rows_p["prompt"].to_numpy(np.float64),
            False) / rows_p["latency_s"].to_numpy() - 1)
        if dec is not None and carry[0] is not None:
            rows_d = gd.get_group(key)
            ctx = rows_d["context"].to_numpy(np.float64)
            batch = rows_d["batch"].to_numpy(np.float64)
            truth = rows_d["latency_s"].to_numpy()
            if cold is not None:  # each row read cold, as the law reads its cells
                truth = np.maximum(truth, batch * (ctx + 1.0) * (cold[0] / cold[1]))
            e = grid_seconds(carry, batch, ctx, True, cold) / truth - 1
            loso["decode"].append(e)
            loso["short"].append(e[ctx < SHORT])

    decode_by = "grid"
    if not loso["decode"]:  # no decode grid (L40S): the decode-only law, held out by shape
        decode_by = "law"
        loso["decode"] = [held_out(d, p.iloc[:0])["decode"]]
        keys = sorted(set(map(tuple, d[SHAPE].to_numpy().tolist())))  # held_out's order
        ctx = np.concatenate([d["context"].to_numpy()[(d[SHAPE].to_numpy() == k).all(axis=1)]
                              for k in map(np.array, keys)])
        loso["short"] = [loso["decode"][0][ctx < SHORT]]

    def mape(parts):
        return round(float(np.abs(np.concatenate(parts)).mean()), 4) if parts else None

    both = np.concatenate(loso["decode"] + loso["prefill"])
    worst = max(v for v in (mape(x) for x in (*loso.values(), *cell.values())) if v is not None)
    return record(both, "grid law: each timed head shape left out, carried from the 2 "
                        "nearest timed shapes (law ratio); and each interior grid column / "
                        "row left out; decode cells read cold (aic_mixed.cold_rate)",
                  shapes=len(grids), shapes_reached=reached, worst=worst, decode_by=decode_by,
                  cold_rate=None if rate is None else round(rate / 1e12, 3),
                  **{f"shape_{k}_mape": mape(v) for k, v in loso.items()},
                  **{f"cells_{k}_mape": mape(v) for k, v in cell.items()})


def mla_checks(system: str, kv: str) -> dict | None:
    """The MLA core's grid law (simulator.cost.measured.aic_mla) judged as the attention's:
    ``shape``, each timed head count left out and carried from the two nearest by the linear
    law's ratio (the law refitted without it), plus the module's projections, against the
    measured module rows (kernel rows on A100); ``cells``, each interior column / row of a
    head count's own core grid left out (aic_attention.cell_check), against the core cells
    (the harder measure: the core is the module less its projections)."""
    if not coverage(system).get(kv):  # refused: eager kernel rows (aic_mla.GRAPHED_SCOPE)
        return None
    gemm = mla_gemm(system)
    d, p = core_rows(system, kv, gemm)
    grids = head_cells(d, p)
    if len(grids) < 3:
        return None
    kv_bytes = 1.0 if kv == "fp8" else 2.0
    loso = {"decode": [], "prefill": [], "short": []}
    same = {"decode": [], "prefill": []}  # the rows the cold floors leave as timed
    cell = {"decode": [], "prefill": [], "short": []}
    for h, got in grids.items():
        c = cell_check(got)
        cell["decode"].append(c["decode"])
        cell["short"].append(c["decode"][c["decode_context"] < SHORT])
        cell["prefill"].append(c["prefill"])
        law = fit(d[d["heads"] != h], p[p["heads"] != h])
        carry, _ = carried_cells(grids, law, h, kv_bytes, exclude=True,
                                 triton=triton_decode(system, kv))
        for part, rows, col in ((0, d, "context"), (1, p, "prompt")):
            r = rows[rows["heads"] == h]
            if part:
                r = r[r["prompt"] > 1]
            pred = grid_seconds(carry, r["batch"].to_numpy(np.float64),
                                r[col].to_numpy(np.float64), part == 0)
            e = (pred + r["projections_s"].to_numpy()) / r["module_s"].to_numpy() - 1
            loso["prefill" if part else "decode"].append(e)
            keep = np.isclose(r["cold_s"].to_numpy(), r["module_s"].to_numpy(), rtol=1e-9,
                              atol=0.0)
            same["prefill" if part else "decode"].append(e[keep])
            if not part:
                loso["short"].append(e[r["context"].to_numpy() < SHORT])

    def mape(parts):
        return round(float(np.abs(np.concatenate(parts)).mean()), 4) if parts else None

    both = np.concatenate(loso["decode"] + loso["prefill"])
    worst = max(mape(loso["decode"]), mape(loso["prefill"]))
    scope = "module" if (d["scope"] == "module").any() else "kernel"
    return record(both, "MLA core grid law: each timed head count left out, carried from the "
                        "2 nearest (law refitted without it) + the projections, against the "
                        f"{scope} rows; and each interior core grid column / row left out",
                  shapes=len(grids), shapes_reached=len(grids), worst=worst, decode_by="grid",
                  scope=scope, **{f"shape_{k}_mape": mape(v) for k, v in loso.items()},
                  **{f"cells_{k}_mape": mape(v) for k, v in cell.items()},
                  **{f"unchanged_{k}_mape": mape(v) for k, v in same.items()},
                  cold_moved={k: int(sum(len(a) for a in loso[k]) - sum(len(a) for a in v))
                              for k, v in same.items()})


def allreduce_checks(system: str) -> dict | None:
    sc = shape_curves(system, "allreduce", "")
    errs = [interp_check(g, s, "loglog", None, sc.edges_of(k, g), sc.extrap)
            for k, (g, s) in sc.points.items()]
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
    if "mla_decode" in curves:
        for kv in sorted(set(curves["mla_decode"]["kv_dtype"])):
            rec = mla_checks(system, kv)
            if rec is not None:
                out[f"{system}|mla|{kv}"] = rec
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
            def pct(x):
                return "-" if x is None else f"{100 * x:.1f} %"
            law = " (decode-only linear law)" if rec["decode_by"] == "law" else ""
            est = (f"grid law; shape left out ({rec['shapes_reached']} of {rec['shapes']}): "
                   f"decode{law} {pct(rec['shape_decode_mape'])} (short context "
                   f"{pct(rec['shape_short_mape'])}), prefill {pct(rec['shape_prefill_mape'])}; "
                   f"cells left out: decode {pct(rec['cells_decode_mape'])} (short "
                   f"{pct(rec['cells_short_mape'])}), prefill {pct(rec['cells_prefill_mape'])}")
        elif parts[1] == "mla":
            est = (f"MLA core grid law ({rec['scope']} rows); head count left out "
                   f"({rec['shapes']}): decode {100 * rec['shape_decode_mape']:.1f} % (short "
                   f"context {100 * rec['shape_short_mape']:.1f} %), prefill "
                   f"{100 * rec['shape_prefill_mape']:.1f} %; core cells left out: decode "
                   f"{100 * rec['cells_decode_mape']:.1f} %, prefill "
                   f"{100 * rec['cells_prefill_mape']:.1f} %")
            if any(rec.get("cold_moved", {}).values()):
                est += (f"; rows read cold moved (decode / prefill) {rec['cold_moved']['decode']}"
                        f" / {rec['cold_moved']['prefill']}, the others: decode "
                        f"{100 * rec['unchanged_decode_mape']:.1f} %, prefill "
                        f"{100 * rec['unchanged_prefill_mape']:.1f} %")
        elif parts[1] == "allreduce":
            est = "measured curve, log-log in bytes"
        elif parts[3] == "measured":
            est = f"measured curve, log-log in rows (linear: {100 * rec['linear_mape']:.1f} %)"
        elif parts[1] == "moe":
            est = (f"transfer from the nearest timed shapes, variant chosen by shapes left out"
                   f" (aic_moe_transfer); a whole model left out: "
                   f"{100 * rec['model_mape']:.1f} % ({100 * rec['model_p90']:.0f} %)")
        else:
            est = "transfer from the 2 nearest timed shapes"
        if parts[1] not in ("attention", "mla") and rec.get("cold_moved"):
            est += (f"; {rec['cold_moved']} cells read cold, the others "
                    f"{100 * rec['unchanged_mape']:.1f} %")
        # the grid laws meet the target on their worst part (decode, prefill, cells)
        ok = "yes" if rec.get("worst", rec["mape"]) <= target else "**no**"
        out.append(f"| {system} | {versions.get(system, '?')} | {op} | {est} | "
                   f"{100 * rec['mape']:.1f} % ({100 * rec['p90']:.0f} %) | {ok} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", nargs="+", default=list(COMMON_SYSTEMS),
                    choices=list(COMMON_SYSTEMS), help="bundled AIConfigurator systems")
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
