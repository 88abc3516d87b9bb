"""Serving metrics of a measured or simulated run, and the two-sample tests that compare them.

Per-request metrics, as vLLM's serving benchmark defines them (``vllm/benchmarks/serve.py``,
``calculate_metrics``), on a request table with ``arrival``, ``first_token``, ``finish``
(seconds) and ``output_len`` (tokens emitted):

- TTFT = first_token − arrival;
- TPOT = (e2e − TTFT) / (output_len − 1), only over requests with output_len > 1 (vLLM
  leaves the others out of its TPOT list);
- e2e = finish − arrival;
- percentiles with ``numpy.percentile`` (linear interpolation), as vLLM reports them;
- throughput = Σ output_len / (last finish − first arrival): vLLM's "output token
  throughput" over the benchmark's duration.

Equivalence and distribution tests (written here; the anchor simulator's validator at the
bundled commit prints only means and percentiles):

- KS: ``scipy.stats.ks_2samp`` on the per-request values, two-sided; D and its p-value.
- TOST (two one-sided Welch t-tests) on the means with the margin δ = 10 % of the measured
  mean: H0 is |μ_sim − μ_meas| ≥ δ. With d = x̄_sim − x̄_meas, se = √(s²_sim/n_sim +
  s²_meas/n_meas) and the Welch–Satterthwaite degrees of freedom ν, p_low = P(T_ν ≥ (d + δ)
  / se), p_high = P(T_ν ≤ (d − δ) / se), p = max(p_low, p_high); the means are equivalent
  within ±10 % at level 0.05 when p < 0.05.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

#: Per-request metrics and the statistics reported of each.
METRICS = ("ttft", "tpot", "e2e")
STATS = (("mean", None), ("p50", 50.0), ("p90", 90.0), ("p99", 99.0))
#: TOST margin (fraction of the measured mean) and level.
TOST_MARGIN = 0.10
ALPHA = 0.05


def per_request(requests: pd.DataFrame) -> dict[str, np.ndarray]:
    """TTFT, TPOT, e2e in seconds of each request (TPOT # [requests with > 1 token])."""
    arrival = requests["arrival"].to_numpy(dtype=np.float64)  # [N]
    first = requests["first_token"].to_numpy(dtype=np.float64)  # [N]
    finish = requests["finish"].to_numpy(dtype=np.float64)  # [N]
    out = requests["output_len"].to_numpy(dtype=np.int64)  # [N]
    ttft, e2e = first - arrival, finish - arrival
    many = out > 1
    return {"ttft": ttft, "tpot": (e2e[many] - ttft[many]) / (out[many] - 1), "e2e": e2e}


def throughput(requests: pd.DataFrame) -> float:
    """Output tokens per second of the run's duration (first arrival to last finish)."""
    span = float(requests["finish"].max() - requests["arrival"].min())
    return float(requests["output_len"].sum()) / span if span > 0 else float("nan")


def summary(values: np.ndarray) -> dict[str, float]:
    """mean, p50, p90, p99 of one metric's per-request values."""
    if values.size == 0:
        return {name: float("nan") for name, _ in STATS}
    return {name: float(values.mean() if q is None else np.percentile(values, q))
            for name, q in STATS}


def rel_error(simulated: float, measured: float) -> float:
    """Signed error y/x − 1 (NaN when the measured value is 0 or not finite)."""
    if not (math.isfinite(measured) and measured != 0):
        return float("nan")
    return simulated / measured - 1


def tost(measured: np.ndarray, simulated: np.ndarray, margin: float = TOST_MARGIN) -> dict:
    """Welch TOST of |mean(simulated) − mean(measured)| < margin · mean(measured) (module
    docstring): the two one-sided p-values, p = their max, and whether p < ALPHA."""
    n_m, n_s = measured.size, simulated.size
    if n_m < 2 or n_s < 2:
        return {"p_low": float("nan"), "p_high": float("nan"), "p": float("nan"),
                "equivalent": False, "margin": margin}
    delta = margin * abs(float(measured.mean()))
    d = float(simulated.mean() - measured.mean())
    v_m, v_s = measured.var(ddof=1) / n_m, simulated.var(ddof=1) / n_s
    se = math.sqrt(v_m + v_s)
    if se == 0:
        inside = abs(d) < delta
        return {"p_low": 0.0 if inside else 1.0, "p_high": 0.0 if inside else 1.0,
                "p": 0.0 if inside else 1.0, "equivalent": inside, "margin": margin}
    nu = (v_m + v_s) ** 2 / (v_m ** 2 / (n_m - 1) + v_s ** 2 / (n_s - 1))
    p_low = float(stats.t.sf((d + delta) / se, nu))
    p_high = float(stats.t.cdf((d - delta) / se, nu))
    p = max(p_low, p_high)
    return {"p_low": p_low, "p_high": p_high, "p": p, "equivalent": bool(p < ALPHA),
            "margin": margin}


def ks(measured: np.ndarray, simulated: np.ndarray) -> dict:
    """Two-sample two-sided Kolmogorov–Smirnov D and p-value."""
    if measured.size == 0 or simulated.size == 0:
        return {"D": float("nan"), "p": float("nan")}
    res = stats.ks_2samp(measured, simulated)
    return {"D": float(res.statistic), "p": float(res.pvalue)}


def compare(measured: pd.DataFrame, simulated: pd.DataFrame) -> dict:
    """Per metric and statistic {measured, simulated, error}, the throughput row, and the KS
    and TOST tests of each per-request metric."""
    m, s = per_request(measured), per_request(simulated)
    table, tests = {}, {}
    for metric in METRICS:
        ms, ss = summary(m[metric]), summary(s[metric])
        for name, _ in STATS:
            table[f"{metric}_{name}"] = {"measured": ms[name], "simulated": ss[name],
                                         "error": rel_error(ss[name], ms[name])}
        tests[metric] = {"ks": ks(m[metric], s[metric]), "tost": tost(m[metric], s[metric])}
    tm, ts = throughput(measured), throughput(simulated)
    table["throughput"] = {"measured": tm, "simulated": ts, "error": rel_error(ts, tm)}
    return {"metrics": table, "tests": tests}


def counts_at(requests: pd.DataFrame, ticks: np.ndarray, start: str) -> tuple:
    """(running, waiting) # [T] at each tick: waiting = arrival <= t < ``start`` column,
    running = ``start`` <= t < finish."""
    t = ticks[:, None]  # [T, 1]
    arrival = requests["arrival"].to_numpy()[None, :]  # [1, N]
    began = requests[start].to_numpy()[None, :]
    finish = requests["finish"].to_numpy()[None, :]
    waiting = ((arrival <= t) & (t < began)).sum(axis=1)
    running = ((began <= t) & (t < finish)).sum(axis=1)
    return running.astype(np.int64), waiting.astype(np.int64)


def timeseries(logged: pd.DataFrame, simulated: pd.DataFrame) -> dict:
    """Running/waiting over time: vLLM's stat-logger ticks (timeseries.csv, t seconds after
    the run started) against the simulation's counts at the same ticks, where a simulated
    request runs from its first token to its finish and waits from arrival to its first token
    (the simulator records no separate admission time: a prompt of P tokens is admitted
    ⌈P / budget⌉ steps before its first token). Mean counts and the mean absolute gap."""
    ticks = logged["t"].to_numpy(dtype=np.float64)  # [T]
    run, wait = counts_at(simulated, ticks, "first_token")
    out = {"ticks": int(ticks.size)}
    for name, sim in (("running", run), ("waiting", wait)):
        meas = logged[name].to_numpy(dtype=np.float64)
        out[name] = {"measured_mean": float(meas.mean()), "simulated_mean": float(sim.mean()),
                     "mean_abs_gap": float(np.abs(sim - meas).mean())}
    return out
