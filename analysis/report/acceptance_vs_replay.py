"""Acceptance models against trace replay: how far does modelling acceptance move the answer?

Two views, both for the report of a sweep whose ``acceptance`` axis ran ``trace`` beside
``constant`` and ``per-position`` (simulator.replay.fitted_acceptance;
analysis/specs/acceptance.toml):

- :func:`formula_table` (from the trace alone): the mean accepted length ``E[τ + 1]`` at a
  fixed window γ as trace replay gives it (TV: ``1 + Σ_{j≤γ} mean P(τ ≥ j)``), as each fitted
  model gives it, and as two closed forms give it from the constant rate α: the i.i.d.
  expectation ``(1 − α^{γ+1}) / (1 − α)`` (THEORY.md §2) and ``g = 1 + αγ``, the tokens per
  step one simulator uses, which is not an expectation of any acceptance process with
  rate α below 1 (it assumes every token is tried even after a rejection). Documented here as
  a comparison only; no simulator mode implements it.
- :func:`model_shift` (from a sweep): per context (e.g. per trace) and model, the paired
  relative change of throughput and mean e2e latency of every policy's best trace-replay
  setting when the same setting replays the model instead (per seed, common random numbers:
  the same requests and the same uniforms), with the mean accepted length (MAL) each run
  realised. A model fitted from the trace's rows weights every recorded position alike, while
  a replayed request visits positions where drafts fail more often (a step that accepts τ
  skips τ rows, so easy stretches are crossed in few steps): with acceptance that persists
  along the text, the realised MAL under trace replay is below the row average, and the
  models overstate it; and :func:`ranking_shift`, whether the model
  reorders the settings: Kendall's τ between the settings' mean throughputs under the model
  and under trace replay, and the best setting under each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from specbatch.analysis.report.compare import (
    best_settings,
    config_columns,
    context_columns,
    means_by_setting,
    paired_difference,
    ranking_metric,
    select,
    setting_of,
)
from specbatch.simulator.config.sim_config import NO_K_POLICIES
from specbatch.simulator.replay.fitted_acceptance import acceptance_trace, constant_rate
from specbatch.traces.format.files import read_trace, resolve_trace

#: The acceptance models compared with trace replay, in report order.
MODELS = ("constant", "per-position")
#: Windows γ of the formula table.
GAMMAS = (1, 2, 4, 8)


def mean_accepted(trace, gamma: int) -> float:
    """``E[τ + 1]`` under TV at window γ, averaged over the trace's rows."""
    return 1.0 + float(trace.accept_tv[:, :gamma].mean(axis=0).sum())


def formula_table(trace, gammas: tuple[int, ...] = GAMMAS) -> pd.DataFrame:
    """One row per γ ≤ K: trace replay's E[τ + 1] (``replay``), each model's, and the closed
    forms of α (module docstring); α is in every row."""
    alpha = constant_rate(trace)
    models = {m: acceptance_trace(trace, m) for m in MODELS}
    rows = []
    for gamma in (g for g in gammas if g <= trace.K):
        iid = gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
        rows.append({"gamma": gamma, "alpha": alpha, "replay": mean_accepted(trace, gamma),
                     **{m: mean_accepted(t, gamma) for m, t in models.items()},
                     "(1 - a^(g+1))/(1 - a)": iid, "1 + a*g": 1.0 + alpha * gamma})
    return pd.DataFrame(rows)


def _split(df: pd.DataFrame):
    """(context columns other than acceptance, the (values, part) groups over them)."""
    ctx = [c for c in context_columns(df) if c != "acceptance"]
    groups = df.groupby(ctx, sort=False, dropna=False) if ctx else [((), df)]
    return ctx, [(v if isinstance(v, tuple) else (v,), part) for v, part in groups]


def model_shift(df: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per context and model: each policy's best trace-replay setting (by the sweep's
    ranking metric) replayed under the model, paired change (%) of throughput and mean e2e
    latency against trace replay. Empty unless the sweep ran ``acceptance = "trace"`` and a
    model."""
    if "acceptance" not in df.columns or "trace" not in set(df.acceptance):
        return pd.DataFrame()
    metric = ranking_metric(df)
    cfg = [c for c in config_columns(df) if c not in ("seed", "acceptance")]
    ctx, groups = _split(df)
    rows = []
    for values, part in groups:
        replay = part[part.acceptance == "trace"]
        best = best_settings(replay, metric, by=("policy",))
        for model in (m for m in MODELS if m in set(part.acceptance)):
            for _, row in best.iterrows():
                pick = setting_of(row, cfg)
                if select(part, {**pick, "acceptance": model}).empty:
                    continue
                windowed = row.policy not in NO_K_POLICIES
                out = {**dict(zip(ctx, values)), "model": model, "policy": row.policy,
                       "k": int(row.num_speculative_tokens) if windowed else "-",
                       "e": int(row.extra) if windowed else "-"}
                for m, short in (("throughput", "throughput"), ("e2e_mean", "e2e"),
                                 ("mal", "MAL")):
                    if m not in part.columns:
                        continue
                    d = paired_difference(part, {**pick, "acceptance": model},
                                          {**pick, "acceptance": "trace"}, m, confidence)
                    out[f"{short} trace"] = d.mean_b
                    out[f"{short} model"] = d.mean_a
                    if m != "mal":
                        out[f"{short} change (%)"] = d.rel_text(percent=True)
                rows.append(out)
    return pd.DataFrame(rows)


def ranking_shift(df: pd.DataFrame) -> pd.DataFrame:
    """Per context and model: Kendall's τ between the settings' mean throughput (closed
    load; mean e2e under open load) under the model and under trace replay, over the settings
    both ran; the best setting under each; and the policies ordered by their best setting."""
    if "acceptance" not in df.columns or "trace" not in set(df.acceptance):
        return pd.DataFrame()
    metric = ranking_metric(df)
    sign = 1.0 if metric == "throughput" else -1.0
    ctx, groups = _split(df)
    rows = []
    for values, part in groups:
        replay = _scores(part[part.acceptance == "trace"], metric)
        for model in ("trace",) + tuple(m for m in MODELS if m in set(part.acceptance)):
            mine = _scores(part[part.acceptance == model], metric)
            both = replay.index.intersection(mine.index)
            tau = (float(stats.kendalltau(replay[both], mine[both]).statistic)
                   if len(both) > 1 else float("nan"))
            rows.append({**dict(zip(ctx, values)), "model": model, "settings": len(both),
                         "Kendall tau vs trace": tau,
                         "best setting": (sign * mine).idxmax() if len(mine) else "-",
                         "policy order": _policy_order(mine, sign)})
    return pd.DataFrame(rows)


def _scores(part: pd.DataFrame, metric: str) -> pd.Series:
    """Mean ``metric`` per setting, indexed by a readable label ``policy k,e``."""
    means = means_by_setting(part, [metric])
    labels = [_label(r) for _, r in means.iterrows()]
    return pd.Series(means[metric].to_numpy(), index=labels)


def _label(row: pd.Series) -> str:
    text = str(row.policy)
    if "predictor" in row and row.policy == "tetris" and row.predictor != "confidence":
        text += f"/{row.predictor}"
    if row.policy in NO_K_POLICIES:
        return text
    return f"{text} {int(row.num_speculative_tokens)},{int(row.extra)}"


def _policy_order(scores: pd.Series, sign: float) -> str:
    """``oracle > tetris > fixed > ...`` by each policy's best setting."""
    best: dict[str, float] = {}
    for name, value in scores.items():
        policy = name.split(" ")[0]
        best[policy] = max(best.get(policy, -np.inf), sign * value)
    return " > ".join(sorted(best, key=lambda p: -best[p]))


def acceptance_blocks(df: pd.DataFrame) -> list[tuple]:
    """Report blocks (analysis.report.render) for a sweep over ``acceptance``: the closed forms per
    trace, :func:`model_shift` and :func:`ranking_shift`. Empty unless it ran trace replay
    beside a model."""
    if "acceptance" not in df.columns or not ({"trace"} < set(df.acceptance)):
        return []
    formulas = []
    for name in dict.fromkeys(df.trace):
        table = formula_table(read_trace(resolve_trace(str(name))))
        formulas.append(table.assign(trace=name)[["trace"] + list(table.columns)])
    return [
        ("h2", "Acceptance models against trace replay"),
        ("p", "Mean accepted length E[tau + 1] at a fixed window gamma (token verification): "
              "trace replay, each fitted model, and two closed forms of the constant rate "
              "alpha: the i.i.d. expectation (1 - a^(g+1))/(1 - a) and g = 1 + a*gamma, the "
              "tokens per step one simulator uses (not an expectation of any acceptance "
              "process; shown for comparison only, no mode implements it). On n-gram traces "
              "alpha is the rate of proposed tokens, while most rows propose fewer than K: "
              "the closed forms, which assume K proposals, overstate those traces."),
        ("table", pd.concat(formulas, ignore_index=True)),
        ("p", "Each policy's best trace-replay setting, replayed under each model: per-seed "
              "paired change against trace replay (same requests, same uniforms), mean with a "
              "95% t-interval, and the MAL each realised. The models are fitted over the "
              "trace's rows alike, but a replayed request crosses easy stretches in few steps "
              "and spends more steps where drafts fail, so where acceptance persists along the "
              "text trace replay realises a lower MAL than the row average the models keep."),
        ("table", model_shift(df)),
        ("p", "Ranking of every setting under each model against trace replay (Kendall's "
              "tau of the settings' mean throughput, 1 = same order), the best setting and the "
              "policies ordered by their best setting."),
        ("table", ranking_shift(df)),
    ]
