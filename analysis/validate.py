"""Validation of a live run against the simulator (``specbatch validate``).

The simulator replays the live run's own workload: its trace (``LIVE_DIR/trace``, the
statistics recorded at every visited output position), N requests with their prompt and
output lengths, burst arrival, ``max_num_seqs = N``, the same policy, k, e, budget (k ×
running), verifier and seed, hence the same verifier uniforms. At temperature 0 — and at any
temperature when the replay draws the same τ — the simulated run visits exactly the live
run's positions and takes the same steps (``trajectory_match``); the remaining error is the
cost model's. Relative errors are (simulated − measured) / measured.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.errors import require
from specbatch.io import write_json
from specbatch.live.config import LiveConfig
from specbatch.live.record import read_live

#: Metrics compared in both directions, with the unit and scale :func:`format_report` prints.
COMPARED = (("throughput", "tok/s", 1.0), ("makespan", "s", 1.0),
            ("step_latency_mean", "ms", 1e3), ("decode_step_latency_mean", "ms", 1e3),
            ("draft_time", "s", 1.0), ("target_time", "s", 1.0), ("overhead_time", "s", 1.0))


def _rel(sim: float, meas: float) -> float:
    """Relative error (simulated − measured) / measured (NaN when measured is 0)."""
    return (sim - meas) / meas if meas else float("nan")


def fit_in_sample(path: str | Path, overhead: float):
    """:class:`simulator.cost.ProfiledCost` fitted to a live run's own ``profile.csv``.

    Same law and cross-validation as :func:`simulator.cost.fit_profile` (one
    :func:`simulator.cost.fit_role` per role) but without its minimum of rows per role, so a
    short run still validates (a fit on fewer rows than features is weak; the CV MAPE says so).
    """
    from specbatch.simulator.cost import ProfiledCost, fit_role, read_profile

    df = read_profile(path)
    fits = {}
    for role in ("draft", "target"):
        rows = df[df["role"] == role]
        require(len(rows) >= 2, f"profile {path}: column role: {len(rows)} rows for {role!r}, "
                "expected at least 2")
        fits[role] = fit_role(rows["batch_size"], rows["query_tokens"], rows["kv_tokens"],
                              rows["latency_s"], role=role, model=str(rows["model"].iloc[0]))
    return ProfiledCost(fits=fits, overhead=float(overhead), path=str(path))


def combine_profiles(paths: list[str], out: Path) -> str:
    """One latency-profile CSV from several (e.g. one per role from ``specbatch profile``)."""
    from specbatch.simulator.cost import read_profile

    frames = [read_profile(p) for p in paths]
    pd.concat(frames, ignore_index=True).to_csv(out, index=False)
    return str(out)


def cost_model(d: Path, profile: str | list | None, in_sample: bool, overhead: float,
               target_model: str | None, draft_model: str | None):
    """(cost model, profile label, in_sample) for :func:`validate`: fitted to ``profile``
    (one or several files); by default to ``d/profile_grid.csv`` when ``specbatch live
    --profile-grid`` measured one (out-of-sample), else (or with ``in_sample``) to the live
    run's own ``profile.csv`` (:func:`fit_in_sample`)."""
    from specbatch.simulator.cost import fit_profile

    if not profile and not in_sample and (d / "profile_grid.csv").is_file():
        profile = str(d / "profile_grid.csv")
    in_sample = bool(in_sample) or not profile
    if isinstance(profile, (list, tuple)) and len(profile) == 1:
        profile = profile[0]
    if in_sample:
        label = str(d / "profile.csv")
        cost = fit_in_sample(label, overhead)
    elif isinstance(profile, (list, tuple)):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            combined = combine_profiles(list(profile), Path(tmp) / "profile.csv")
            cost = fit_profile(combined, overhead=overhead, target=target_model,
                               draft=draft_model)
        label = ", ".join(map(str, profile))
    else:
        label = str(profile)
        cost = fit_profile(label, overhead=overhead, target=target_model, draft=draft_model)
    for role in ("draft", "target"):
        require(role in cost.fits, f"profile {label}: column role: no {role} rows")
    return cost, label, in_sample


def measured_metrics(requests: pd.DataFrame, steps: pd.DataFrame, summary: dict) -> dict:
    """The live run's metrics from its tables (definitions of :mod:`simulator.metrics`)."""
    lat = (steps["end"] - steps["time"]).to_numpy()
    dec = steps["batch"].to_numpy() > 0
    tokens = int(requests["tokens"].sum())
    makespan = float(requests["finish"].max() - requests["arrival"].min())
    return {
        "throughput": tokens / makespan if makespan else float("nan"),
        "makespan": makespan, "steps": int(len(steps)),
        "step_latency_mean": float(lat.mean()),
        "decode_step_latency_mean": float(lat[dec].mean()) if dec.any() else float("nan"),
        "draft_time": float(steps["draft_time"].sum()),
        "target_time": float(steps["target_time"].sum()),
        "overhead_time": float(steps["overhead_time"].sum()),
        "mal": summary.get("mal"), "tokens": tokens,
    }


def simulated_metrics(steps: pd.DataFrame, summary: dict) -> dict:
    """The same metrics from a simulation's step table and summary."""
    lat = (steps["end"] - steps["time"]).to_numpy()
    dec = steps["batch"].to_numpy() > 0
    return {
        "throughput": float(summary["throughput"]), "makespan": float(summary["makespan"]),
        "steps": int(len(steps)), "step_latency_mean": float(lat.mean()),
        "decode_step_latency_mean": float(lat[dec].mean()) if dec.any() else float("nan"),
        "draft_time": float(summary["draft_time"]), "target_time": float(summary["target_time"]),
        "overhead_time": float(summary["overhead_time"]), "mal": float(summary["mal"]),
        "tokens": int(summary["tokens"]),
    }


def same_trajectory(sim_steps: pd.DataFrame, live_steps: pd.DataFrame) -> bool:
    """Whether both runs took the same steps with the same verified and accepted counts."""
    return (len(sim_steps) == len(live_steps)
            and all(bool((sim_steps[c].to_numpy() == live_steps[c].to_numpy()).all())
                    for c in ("accepted", "verified")))


def step_latency_mape(sim_steps: pd.DataFrame, live_steps: pd.DataFrame) -> float:
    """Mean |simulated − measured| / measured step latency over aligned steps."""
    s_lat = (sim_steps["end"] - sim_steps["time"]).to_numpy()
    m_lat = (live_steps["end"] - live_steps["time"]).to_numpy()
    return float(np.mean(np.abs(s_lat - m_lat) / m_lat))


def validate(live_dir: str | Path, profile: str | list | None = None,
             target_model: str | None = None, draft_model: str | None = None,
             overhead: float | None = None, out: str | Path | None = None,
             in_sample: bool = False) -> dict:
    """Simulate a live run's workload and compare (module docstring); returns the report
    (measured, simulated, relative errors). Cost model: :func:`cost_model`; the per-step
    overhead is ``overhead`` or the live run's mean measured overhead per step. With ``out``
    the simulated tables and ``validate.json`` are written there."""
    from specbatch.simulator.config import make_config
    from specbatch.simulator.run import simulate

    live = read_live(live_dir)
    d, man, meas_steps = live["dir"], live["manifest"], live["steps"]
    st = man["settings"]
    cfg = LiveConfig(**{k: st[k] for k in LiveConfig.__dataclass_fields__ if k in st})
    n_req = int(live["requests"].shape[0])
    over = float(meas_steps["overhead_time"].mean()) if overhead is None else float(overhead)
    require(math.isfinite(over) and over >= 0, f"--overhead: expected seconds >= 0, got {over}")
    cost, label, in_sample = cost_model(d, profile, in_sample, over, target_model, draft_model)
    values = cfg.sim_values(n_req)
    values.update(trace=str(d / "trace"), cost="profiled",
                  profile=str(d / "profile.csv") if in_sample else label)
    sim = simulate(make_config(values, f"live manifest {d / 'live.json'}"), trace=live["trace"],
                   cost_model=cost)
    if out is not None:
        sim.write(out)
    m_sum = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() \
        else {}
    measured = measured_metrics(live["requests"], meas_steps, m_sum)
    simulated = simulated_metrics(sim.steps, sim.summary)
    same = same_trajectory(sim.steps, meas_steps)
    errors = {key: _rel(simulated[key], measured[key]) for key, _, _ in COMPARED}
    if same:
        errors["step_latency_mape"] = step_latency_mape(sim.steps, meas_steps)
    report = {
        "live_dir": str(d), "policy": cfg.policy, "verify": cfg.verify, "k": cfg.k,
        "extra": cfg.extra, "requests": n_req, "temperature": cfg.temperature,
        "device": st.get("device"), "dtype": cfg.dtype,
        "acceptance": "replay of the live run's recorded per-position statistics "
                      "(LIVE_DIR/trace, same verifier uniforms)",
        "trajectory_match": same,
        "cost_model": "profiled law (simulator.cost) fitted to " + (
            "the live run's own passes (in-sample)" if in_sample else label),
        "cost_cv_mape": cost.cv_mape, "overhead_per_step": over,
        "measured": measured, "simulated": simulated, "relative_error": errors,
    }
    if out is not None:
        write_json(Path(out) / "validate.json", report)
    return report


def format_report(report: dict) -> str:
    """Plain-text table of :func:`validate`'s report."""
    m, s, e = report["measured"], report["simulated"], report["relative_error"]
    lines = [
        f"live run    {report['live_dir']}  ({report['policy']}, verify {report['verify']}, "
        f"k {report['k']}, e {report['extra']}, N {report['requests']}, "
        f"T {report['temperature']:g}, {report['device']} {report['dtype']})",
        f"acceptance  {report['acceptance']}; same trajectory: {report['trajectory_match']}",
        f"cost model  {report['cost_model']}; CV MAPE "
        + ", ".join(f"{r} {v:.1%}" for r, v in report["cost_cv_mape"].items())
        + f"; overhead {report['overhead_per_step'] * 1e3:.3f} ms/step",
        "",
        f"{'metric':<26}{'measured':>14}{'simulated':>14}{'rel. error':>12}",
    ]
    for key, unit, scale in COMPARED:
        lines.append(f"{key + ' (' + unit + ')':<26}{m[key] * scale:>14.4f}"
                     f"{s[key] * scale:>14.4f}{e[key]:>+12.1%}")
    lines.append(f"{'steps':<26}{m['steps']:>14d}{s['steps']:>14d}")
    if "step_latency_mape" in e:
        lines.append(f"per-step latency MAPE (aligned steps): {e['step_latency_mape']:.1%}")
    return "\n".join(lines)
