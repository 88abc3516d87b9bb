"""Each policy's best setting against the best fixed window, paired: the engines comparison.

A sweep holding the engines' draft-length policies (simulator.policies.engines,
simulator.policies.stops; ``analysis/specs/engines.toml``) answers "which of my engine's knobs,
set how, and what would TETRIS add on top?": :func:`versus_best_fixed` puts every policy's
best setting (by the ranking metric, analysis.report.compare) against the best fixed window k in the
same context (trace, load, ...), as per-seed paired relative changes of throughput and mean
e2e latency with Student-t intervals (common random numbers: one workload per seed).
"""

from __future__ import annotations

import pandas as pd

from specbatch.analysis.report.compare import (
    best_setting_selector,
    context_columns,
    paired_difference,
    ranking_metric,
)
from specbatch.simulator.config.sim_config import NO_K_POLICIES
from specbatch.simulator.policies.knobs import ENGINE_POLICY_NAMES

#: The knob that names an engine policy's setting beside k and e.
SETTING_KNOBS = {"batch-schedule": ("num_speculative_tokens_per_batch_size", "draft_len_schedule"),
                 "ema-adaptive": ("speculative_adaptive_config",),
                 "specdec++": ("specdec_threshold",), "entropy-stop": ("entropy_threshold",)}
#: Policies whose window is not k (their setting shows no k).
NO_WINDOW = NO_K_POLICIES


def has_engine_policies(df: pd.DataFrame) -> bool:
    """Whether the sweep holds an engine policy and fixed k to compare it with."""
    policies = set(df.policy)
    return "fixed" in policies and bool(policies & set(ENGINE_POLICY_NAMES))


def describe(setting: dict) -> str:
    """``k=4 e=1``, ``k=3 draft_len_schedule=4:4,8:2``, ``specdec_threshold=0.5``..."""
    policy = setting["policy"]
    parts = [] if policy in NO_WINDOW else [f"k={setting['num_speculative_tokens']}"]
    if setting.get("extra"):
        parts.append(f"e={setting['extra']}")
    for knob in SETTING_KNOBS.get(policy, ()):
        if setting.get(knob) is not None:
            parts.append(f"{knob}={setting[knob]}")
    if policy == "ema-adaptive" and setting.get("speculative_adaptive_config") is None:
        parts.append("SGLang's default config")
    return " ".join(parts) or "-"


def versus_best_fixed(df: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per context and verification rule: each policy's best setting, its ranking metric,
    and its paired relative change of throughput and mean e2e latency against the best fixed
    k (``rel``, ``low``, ``high`` as fractions). Sorted by context, then metric."""
    metric = ranking_metric(df)
    ctx = context_columns(df)
    keys = ctx + ["verify"]
    rows = []
    for key, sub in df.groupby(keys, sort=False, dropna=False):
        if "fixed" not in set(sub.policy):
            continue
        fixed = best_setting_selector(sub, {"policy": "fixed"}, metric)
        for policy in dict.fromkeys(sub.policy):
            mine = best_setting_selector(sub, {"policy": policy}, metric)
            out = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
            out.update(policy=policy, setting=describe(mine))
            for m in ("throughput", "e2e_mean"):
                d = paired_difference(sub, mine, fixed, m, confidence)
                out[m] = d.mean_a
                out[f"{m}_rel"], out[f"{m}_low"], out[f"{m}_high"] = d.rel, d.rel_low, d.rel_high
            out["best_fixed_k"] = fixed["num_speculative_tokens"]
            out["n_seeds"] = d.n
            rows.append(out)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    ascending = metric == "e2e_mean"
    return table.sort_values(keys + [metric], ascending=[True] * len(keys) + [ascending],
                             kind="stable").reset_index(drop=True)


def percent(rel: float, low: float, high: float) -> str:
    """``+1.23% [+0.80, +1.66]`` (no interval when undefined)."""
    text = f"{100 * rel:+.2f}%"
    if pd.notna(low):
        text += f" [{100 * low:+.2f}, {100 * high:+.2f}]"
    return text


def engine_blocks(df: pd.DataFrame, rep) -> list[tuple]:
    """The report's section: :func:`versus_best_fixed` as a table (also ``engines.csv``)."""
    table = versus_best_fixed(df)
    if table.empty:
        return []
    table.to_csv(rep / "engines.csv", index=False)
    shown = table[[c for c in table.columns if c in context_columns(df)] + ["policy", "setting"]]
    shown = shown.assign(**{
        "throughput (tok/s)": table.throughput.round(1),
        "throughput vs best fixed": [percent(*r) for r in zip(
            table.throughput_rel, table.throughput_low, table.throughput_high)],
        "e2e mean (s)": table.e2e_mean.round(3),
        "e2e vs best fixed": [percent(*r) for r in zip(
            table.e2e_mean_rel, table.e2e_mean_low, table.e2e_mean_high)],
        "best fixed k": table.best_fixed_k, "seeds": table.n_seeds})
    return [("h2", "Each policy's best setting against the best fixed window"),
            ("p", "Per context: every policy's best setting (by "
                  f"{ranking_metric(df).replace('_', ' ')}) against the best fixed k, per-seed "
                  "paired relative change with a 95% t-interval (common random numbers; "
                  "negative e2e = lower latency). The policies that calibrate (vllm-dynamic, "
                  "specdec++) read only the held-out calibration requests; every policy "
                  "replays the same others."),
            ("table", shown)]
