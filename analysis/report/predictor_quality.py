"""The learned acceptance predictor judged: out-of-sample quality, and what it buys TETRIS.

:func:`predictor_quality` splits a trace by request exactly as a simulation with ``calibration_split
= f`` and seed s does (simulator.policies.calibration), fits each predictor on the calibration
requests and scores it on the others, against the draft's own confidence (the official TETRIS
surrogate) on the same tokens. Scores (each token weighted by its true acceptance probability, no
sampled labels; filler slots of n-gram traces left out):

- ``token AUC``: expected ROC AUC (traces.format.describe.weighted_auc) of the predicted
  acceptance of token j given tokens < j accepted, against ``a_j = min(1, r_j)``;
- ``reach AUC``: the same for the estimate of ``P(τ ≥ j)`` (the running product) against
  TV's ``Π_{l≤j} min(1, r_l)``, over every (row, j): what TETRIS ranks;
- ``Brier``: mean ``(â − a)²`` of the token estimate (lower is better; for the surrogate,
  â = conf); ``ECE``: expected calibration error over :data:`BINS` equal-width bins of â,
  ``Σ_b share_b · |mean â_b − mean a_b|``.

:func:`predictor_table` reads a sweep (analysis.sweep.runner) that ran TETRIS with several
predictors beside fixed SD and the oracle, and gives, per context (e.g. per trace), each
one's best setting with its paired change against the best fixed window, and for a fitted
predictor against TETRIS with the confidence surrogate (per-seed relative differences,
Student-t interval: analysis.report.compare).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specbatch.analysis.report.compare import (
    best_settings,
    config_columns,
    context_columns,
    paired_difference,
    ranking_metric,
    select,
    setting_of,
)
from specbatch.simulator.policies.calibration import split_trace
from specbatch.simulator.replay.accept_predictor import (
    LEARNED,
    fit_predictor,
    real_slots,
    token_acceptance,
)
from specbatch.traces.format.describe import weighted_auc
from specbatch.traces.format.files import read_trace, resolve_trace

#: Equal-width bins of the predicted probability for ECE and the reliability table.
BINS = 10


def scores(token: np.ndarray, reach: np.ndarray, trace) -> dict:
    """Token AUC, reach AUC, Brier and ECE of estimates ``token``, ``reach`` # [rows, K] on
    ``trace``'s real draft tokens (module docstring)."""
    mask = real_slots(trace)
    a = token_acceptance(trace.q, trace.pt)[mask]
    est = np.clip(token[mask], 0.0, 1.0)
    return {"token AUC": weighted_auc(est, a),
            "reach AUC": weighted_auc(reach[mask], trace.accept_tv[mask]),
            "Brier": float(np.mean((est - a) ** 2)) if a.size else float("nan"),
            "ECE": float(reliability(est, a).eval("share * gap").sum()),
            "mean estimate": float(est.mean()), "mean acceptance": float(a.mean())}


def reliability(estimate: np.ndarray, a: np.ndarray, bins: int = BINS) -> pd.DataFrame:
    """Per equal-width bin of ``estimate``: token share, mean estimate, mean true acceptance
    and their gap (non-empty bins only).  estimate, a # [m]"""
    which = np.minimum((estimate * bins).astype(np.int64), bins - 1)
    frame = pd.DataFrame({"bin": which, "est": estimate, "a": a})
    grouped = frame.groupby("bin", sort=True)
    out = pd.DataFrame({"low": grouped.size().index / bins,
                        "share": grouped.size().to_numpy() / max(len(frame), 1),
                        "mean estimate": grouped.est.mean().to_numpy(),
                        "mean acceptance": grouped.a.mean().to_numpy()})
    out["gap"] = (out["mean estimate"] - out["mean acceptance"]).abs()
    return out


def predictor_quality(trace, fraction: float = 0.5, seeds: tuple[int, ...] = (0, 1, 2),
                      kinds: tuple[str, ...] = ("learned", "logistic")) -> pd.DataFrame:
    """Out-of-sample scores per predictor and seed (the split of a run with ``calibration_split =
    fraction`` and that seed): one row per (predictor, seed), ``confidence`` first."""
    rows = []
    for seed in seeds:
        calibration, held_out, _ = split_trace(trace, fraction, seed)
        conf = np.minimum(held_out.draft_conf, 1.0)
        rows.append({"predictor": "confidence", "seed": seed,
                     **scores(conf, np.cumprod(conf, axis=1), held_out)})
        for kind in kinds:
            model = fit_predictor(calibration, kind)
            token = model.token_probs(held_out.draft_conf, held_out.entropy, held_out.top1)
            rows.append({"predictor": kind, "seed": seed,
                         **scores(token, np.cumprod(token, axis=1), held_out)})
    return pd.DataFrame(rows)


def quality_summary(quality: pd.DataFrame) -> pd.DataFrame:
    """Mean and range over seeds of each score, one row per predictor."""
    numeric = [c for c in quality.columns if c not in ("predictor", "seed")]
    grouped = quality.groupby("predictor", sort=False)
    out = grouped[numeric].mean()
    for c in ("token AUC", "reach AUC"):
        out[f"{c} range"] = [f"{lo:.3f}-{hi:.3f}" for lo, hi in
                             zip(grouped[c].min(), grouped[c].max())]
    out["seeds"] = grouped.size()
    return out.reset_index()


def predictor_table(df: pd.DataFrame, metric: str | None = None,
                    confidence: float = 0.95) -> pd.DataFrame:
    """Per context: the best setting of TETRIS with each predictor, of fixed SD and of the
    oracle (by ``metric``, default analysis.report.compare.ranking_metric), each against the best
    fixed window: paired relative change of throughput and mean e2e latency (%, t-interval).
    Empty unless the sweep ran tetris and fixed."""
    if not {"tetris", "fixed"} <= set(df.policy) or "predictor" not in df.columns:
        return pd.DataFrame()
    metric = metric or ranking_metric(df)
    ctx = context_columns(df)
    cfg = [c for c in config_columns(df) if c != "seed"]
    groups = df.groupby(ctx, sort=False, dropna=False) if ctx else [((), df)]
    rows = []
    for values, part in groups:
        values = values if isinstance(values, tuple) else (values,)
        if not {"tetris", "fixed"} <= set(part.policy):
            continue
        contenders = [(f"tetris ({p})", {"policy": "tetris", "predictor": p})
                      for p in dict.fromkeys(part[part.policy == "tetris"].predictor)]
        contenders += [(name, {"policy": name}) for name in ("fixed", "oracle")
                       if name in set(part.policy)]
        picks = {name: setting_of(best_settings(select(part, where), metric, by=()).iloc[0],
                                  cfg) for name, where in contenders}
        base, surrogate = picks["fixed"], picks.get("tetris (confidence)")
        for name, pick in picks.items():
            out = dict(zip(ctx, values))
            out.update({"policy": name, "k": int(pick["num_speculative_tokens"]),
                        "e": int(pick["extra"])})
            for m, short in (("throughput", "throughput"), ("e2e_mean", "e2e")):
                d = paired_difference(part, pick, base, m, confidence)
                out[f"{short}"] = d.mean_a
                out[f"{short} vs best fixed (%)"] = ("-" if pick == base
                                                     else d.rel_text(percent=True))
                fitted = surrogate is not None and name.startswith("tetris (") and \
                    pick.get("predictor") != "confidence"
                out[f"{short} vs tetris (confidence) (%)"] = (
                    paired_difference(part, pick, surrogate, m, confidence).rel_text()
                    if fitted else "-")
            out["seeds"] = d.n
            rows.append(out)
    return pd.DataFrame(rows)


def predictor_blocks(df: pd.DataFrame) -> list[tuple]:
    """Report blocks (analysis.report.render) for a sweep that ran TETRIS with a fitted predictor:
    the out-of-sample quality on each trace at the sweep's calibration fraction and seeds,
    and :func:`predictor_table`. Empty otherwise."""
    if "predictor" not in df.columns or not set(df.predictor) & set(LEARNED):
        return []
    kinds = tuple(k for k in LEARNED if k in set(df.predictor))
    seeds = tuple(int(s) for s in sorted(set(df.seed)))
    quality = []
    for (name, fraction), _ in df[df.predictor.isin(kinds)].groupby(
            ["trace", "calibration_split"], sort=False):
        trace = read_trace(resolve_trace(str(name)))
        summary = quality_summary(predictor_quality(trace, float(fraction), seeds, kinds))
        quality.append(summary.assign(trace=name)[["trace"] + list(summary.columns)])
    blocks = [("h2", "Learned acceptance predictor: out-of-sample quality"),
              ("p", "Each seed splits the trace by request as the runs did (calibration "
                    "requests fit the model and are never replayed); scores are on the other "
                    "requests' real draft tokens, weighted by their true acceptance "
                    "probability: token AUC (acceptance of token j given tokens < j accepted, "
                    "against min(1, r_j)), reach AUC (the estimate of P(tau >= j), what TETRIS "
                    "ranks, against TV's product), Brier score and expected calibration error "
                    f"({BINS} bins) of the token estimate; `confidence` is the draft's own "
                    "probability, the official TETRIS surrogate. Means over seeds."),
              ("table", pd.concat(quality, ignore_index=True))]
    table = predictor_table(df)
    if not table.empty:
        blocks += [("h2", "TETRIS by predictor vs the best fixed window and the oracle"),
                   ("p", "Each row is that policy's best setting (k, e) by throughput; the "
                         "changes are per-seed paired against the best fixed window (common "
                         "random numbers), mean with a 95% t-interval."),
                   ("table", table)]
    return blocks
