"""Validation of live runs against the simulator (``specbatch validate``).

A prediction simulates one live run's workload (run B: its recorded trace, the statistics at
every visited output position; its N requests, prompt and output lengths, arrival process
and seed, hence the same arrival times and verifier uniforms; ``max_num_seqs``, policy, k, e,
budget k × running, verification rule) with a profiled cost model
(:mod:`simulator.cost.measured.profiled`) and compares it with what B measured. Relative errors are
(simulated − measured) / measured.

Where the cost model comes from decides what the errors mean:

- **out of sample** (``fit_dir`` = run A ≠ B): the law is fitted to A's latency grid
  (``A/profile_grid.csv`` from ``live --profile-grid``; A's own passes when it has none) and
  the per-step overhead is A's mean measured overhead per step; nothing of B's timing is used;
- **grid of the same run** (no ``fit_dir``, ``B/profile_grid.csv`` present): the grid is timed
  separately from B's steps, but on the same machine state;
- **in sample** (``in_sample`` or no grid): fitted to B's own passes; a lower bound on the
  error, labelled as such.

Per-step latency MAPE prices every measured step of B on its own passes (each pass's batch
sums n, Σq, Σc, Σq·c, Σq², recorded by the live run) plus the overhead, against its measured
duration: the cost model's error with the schedule held fixed. The end-to-end metrics
(throughput, makespan, e2e mean and p99, TTFT, TPOT) come from the full simulation, whose
schedule follows the predicted step times. ``trajectory_match`` says whether the simulation
took exactly B's steps (same batches, verified and accepted counts): with ``fixed`` every
request's τ sequence is replayed exactly whatever the schedule; with ``tetris`` a different
schedule changes the allocation, and positions the live run verified less deeply are replayed
from the recorded prefix only.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.errors import require
from specbatch.io import write_json
from specbatch.live.config import LiveConfig
from specbatch.live.record import read_live

#: Metrics compared, with the unit and scale :func:`format_report` prints.
COMPARED = (("throughput", "tok/s", 1.0), ("makespan", "s", 1.0), ("e2e_mean", "s", 1.0),
            ("e2e_p99", "s", 1.0), ("ttft_mean", "s", 1.0), ("tpot_mean", "ms", 1e3),
            ("step_latency_mean", "ms", 1e3), ("decode_step_latency_mean", "ms", 1e3),
            ("draft_time", "s", 1.0), ("target_time", "s", 1.0), ("overhead_time", "s", 1.0))
#: The pass columns that price a recorded pass exactly (live.record.PASS_COLUMNS).
SUM_COLUMNS = ("batch_size", "sum_q", "sum_kv", "sum_qkv", "sum_qq")


def _rel(sim: float, meas: float) -> float:
    """Relative error (simulated − measured) / measured (NaN when measured is 0)."""
    return (sim - meas) / meas if meas else float("nan")


def fit_in_sample(path: str | Path, overhead: float):
    """:class:`simulator.cost.measured.profiled.ProfiledCost` fitted to a live run's own
    ``profile.csv``.

    Same law and cross-validation as :func:`simulator.cost.measured.profiled.fit_profile` (one
    :func:`simulator.cost.measured.role_fit.fit_role` per role) but without its minimum of rows
    per role, so a short run still validates (a fit on fewer rows than features is weak; the CV MAPE
    says so).
    """
    from specbatch.simulator.cost.measured.profiled import ProfiledCost, fit_role, read_profile

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
    from specbatch.simulator.cost.measured.profiled import read_profile

    frames = [read_profile(p) for p in paths]
    pd.concat(frames, ignore_index=True).to_csv(out, index=False)
    return str(out)


def cost_model(d: Path, profile: str | list | None, in_sample: bool, overhead: float,
               target_model: str | None, draft_model: str | None):
    """(cost model, profile label, in_sample) fitted from run directory ``d``: to ``profile``
    (one or several files) when given; else to ``d/profile_grid.csv`` when ``specbatch live
    --profile-grid`` measured one, else (or with ``in_sample``) to the run's own passes
    ``d/profile.csv`` (:func:`fit_in_sample`)."""
    from specbatch.simulator.cost.measured.profiled import fit_profile

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


def check_live_run(live: dict) -> dict:
    """``live`` (:func:`live.record.read_live`) when its tables are a live run's, else a
    one-line error naming the file and column: every column of the simulator's request and
    step tables present, numeric and finite, at least one step, each step ending no earlier
    than it starts, and one request row per request of live.json. A damaged run used to be
    replayed as it was (NaN finish times, rows missing) or to end in a KeyError."""
    from specbatch.simulator.engine.request_state import STEP_COLUMNS
    from specbatch.simulator.metrics import REQUEST_COLUMNS

    d = live["dir"]
    for name, columns in (("requests.parquet", REQUEST_COLUMNS), ("steps.parquet", STEP_COLUMNS)):
        table = live[name.split(".")[0]]
        path = d / name
        missing = [c for c in columns if c not in table.columns]
        require(not missing, f"file {path}: column {missing[0] if missing else ''}: missing "
                f"(expected the columns of `specbatch live`'s {name.split('.')[0]} table)")
        require(len(table) > 0, f"file {path}: expected at least one row, got none")
        for col in columns:
            values = table[col]
            require(pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(
                values), f"file {path}: column {col}: expected numbers, got {values.dtype}")
            bad = ~np.isfinite(values.to_numpy(dtype=np.float64))
            row = int(np.argmax(bad))
            require(not bad.any(), f"file {path}: column {col}: expected finite numbers, got "
                    f"{float(values.iloc[row])!r} in row {row}")
    steps = live["steps"]
    back = (steps["end"] < steps["time"]).to_numpy()
    require(not back.any(), f"file {d / 'steps.parquet'}: column end: expected each step to end "
            f"no earlier than its time, got row {int(np.argmax(back))}")
    expected = live["manifest"].get("requests")
    require(expected is None or expected == len(live["requests"]),
            f"file {d / 'requests.parquet'}: expected {expected} rows (live.json field "
            f"requests), got {len(live['requests'])}")
    return live


def metrics(requests: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """The compared metrics of a run's tables (definitions: :mod:`simulator.metrics`)."""
    from specbatch.simulator.metrics import summarize

    s = summarize(requests, steps)
    lat = (steps["end"] - steps["time"]).to_numpy()
    dec = steps["batch"].to_numpy() > 0
    out = {key: float(s[key]) for key in ("throughput", "makespan", "e2e_mean", "e2e_p99",
                                         "ttft_mean", "tpot_mean", "draft_time",
                                         "target_time", "overhead_time", "mal")}
    out.update(steps=int(len(steps)), tokens=int(s["tokens"]),
               step_latency_mean=float(lat.mean()),
               decode_step_latency_mean=float(lat[dec].mean()) if dec.any() else float("nan"))
    return out


def same_trajectory(sim_steps: pd.DataFrame, live_steps: pd.DataFrame) -> bool:
    """Whether both runs took the same steps with the same batches, verified and accepted
    counts."""
    return (len(sim_steps) == len(live_steps)
            and all(bool((sim_steps[c].to_numpy() == live_steps[c].to_numpy()).all())
                    for c in ("batch", "prefill_tokens", "accepted", "verified")))


def predicted_step_latency(cost, passes: pd.DataFrame, n_steps: int) -> np.ndarray | None:
    """Seconds of each recorded step # [n_steps] as the cost model prices its own passes
    (``time_from_sums`` of every pass's batch sums) plus the per-step overhead; None for a
    live run recorded without the pass sums, or for a model with sliding-window layers (its
    passes need per-request minima the recorded sums do not hold:
    simulator.cost.analytic.window)."""
    if not {"step", *SUM_COLUMNS} <= set(passes.columns) or getattr(cost, "windowed", False):
        return None
    pred = np.full(n_steps, float(cost.overhead))
    for row in passes.itertuples(index=False):
        pred[int(row.step)] += cost.time_from_sums(
            row.role, int(row.batch_size), float(row.sum_q), float(row.sum_kv),
            float(row.sum_qkv), float(row.sum_qq))
    return pred


def step_latency_mape(predicted: np.ndarray, steps: pd.DataFrame) -> float:
    """Mean |predicted − measured| / measured step latency."""
    measured = (steps["end"] - steps["time"]).to_numpy()
    return float(np.mean(np.abs(predicted - measured) / measured))


def _settings(live: dict) -> LiveConfig:
    st = {"scheduler": "vllm-v0", **live["manifest"]["settings"]}  # runs before V1 steps
    return LiveConfig(**{k: st[k] for k in LiveConfig.__dataclass_fields__ if k in st})


def _mode(fit_dir, in_sample: bool, label: str) -> str:
    if in_sample:
        return "in-sample"
    if fit_dir is not None:
        return "out-of-sample"
    return "grid of the same run" if label.endswith("profile_grid.csv") else "external profile"


def validate(live_dir: str | Path, profile: str | list | None = None,
             target_model: str | None = None, draft_model: str | None = None,
             overhead: float | None = None, out: str | Path | None = None,
             in_sample: bool = False, fit_dir: str | Path | None = None) -> dict:
    """Predict the live run ``live_dir`` (run B) with a cost model fitted on ``fit_dir``
    (run A; out of sample) or on B itself (module docstring); returns the report (measured,
    simulated, relative errors, per-step MAPE). The per-step overhead is ``overhead`` or the
    fitting run's mean measured overhead per step. With ``out`` the simulated tables and
    ``validate.json`` are written there."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.cost.features.free_draft import FreeDraftCost
    from specbatch.simulator.run import simulate

    live = check_live_run(read_live(live_dir))
    d, meas_steps = live["dir"], live["steps"]
    require(fit_dir is None or not in_sample,
            "--in-sample: expected no --fit run (in-sample fits the predicted run itself)")
    fit = live if fit_dir is None else check_live_run(read_live(fit_dir))
    over = float(fit["steps"]["overhead_time"].mean()) if overhead is None else float(overhead)
    require(math.isfinite(over) and over >= 0, f"--overhead: expected seconds >= 0, got {over}")
    cost, label, in_sample = cost_model(fit["dir"], profile, in_sample, over, target_model,
                                        draft_model)
    cfg = _settings(live)
    n_req = int(live["requests"].shape[0])
    values = cfg.sim_values(n_req)
    # the measured overhead per step already holds the live verification (not timed apart)
    values.update(trace=str(d / "trace"), cost="profiled", profile=label.split(", ")[0],
                  verify_cost="none")
    if cfg.draft == "ngram":  # prompt lookup runs no model: priced as free draft passes
        cost = FreeDraftCost(cost)
        values.update(draft="ngram")
    sim = simulate(make_config(values, f"live manifest {d / 'live.json'}"), trace=live["trace"],
                   cost_model=cost)
    if out is not None:
        sim.write_files(out)
    measured = metrics(live["requests"], meas_steps)
    simulated = metrics(sim.requests, sim.steps)
    errors = {key: _rel(simulated[key], measured[key]) for key, _, _ in COMPARED}
    passes = pd.read_csv(d / "profile.csv")
    pred = predicted_step_latency(cost, passes, len(meas_steps))
    errors["step_latency_mape"] = (step_latency_mape(pred, meas_steps) if pred is not None
                                   else float("nan"))
    mode = _mode(fit_dir, in_sample, label)
    report = {
        "live_dir": str(d), "fit_dir": str(fit["dir"]), "mode": mode, "policy": cfg.policy,
        "verify": cfg.verify, "k": cfg.k, "extra": cfg.extra, "requests": n_req,
        "max_num_seqs": cfg.slots(n_req), "arrival": cfg.arrival, "rate": cfg.rate,
        "seed": cfg.seed, "temperature": cfg.temperature,
        "device": live["manifest"]["settings"].get("device"), "dtype": cfg.dtype,
        "acceptance": "replay of the predicted run's recorded per-position statistics "
                      "(its trace/, same verifier uniforms)",
        "trajectory_match": same_trajectory(sim.steps, meas_steps),
        "cost_model": "profiled law (simulator.cost.registry) fitted to " + (
            f"{fit['dir']}'s own passes (in-sample)" if in_sample else label) + f" [{mode}]",
        "cost_cv_mape": cost.cv_mape, "overhead_per_step": over,
        "measured": measured, "simulated": simulated, "relative_error": errors,
        "warnings": accuracy_warnings(errors, cost.cv_mape),
    }
    if out is not None:
        write_json(Path(out) / "validate.json", report)
    return report


#: Errors checked against the cost model's own held-out error (:func:`accuracy_warnings`).
CHECKED = ("throughput", "makespan", "e2e_mean", "step_latency_mape")


def accuracy_warnings(errors: dict, cv_mape: dict) -> list[str]:
    """One line per checked error (:data:`CHECKED`) whose size exceeds the cost model's own
    cross-validated MAPE (the largest over roles): a miss the fit's uncertainty does not
    explain, so the simulation is not a prediction of this run (usually a live-engine
    effect the profile did not measure, or a profile from another machine state)."""
    finite = [float(v) for v in cv_mape.values() if v is not None and math.isfinite(v)]
    if not finite:
        return []
    bound = max(finite)
    lines = []
    for key in CHECKED:
        value = errors.get(key)
        if value is None or not math.isfinite(value) or abs(value) <= bound:
            continue
        what = ("per-step latency MAPE is" if key == "step_latency_mape"
                else f"simulated {key} is off by")
        shown = f"{100 * value:.1f} %" if key == "step_latency_mape" else f"{100 * value:+.1f} %"
        lines.append(f"{what} {shown}, more than the cost model's own cross-validated MAPE "
                     f"({100 * bound:.1f} %): the fit's uncertainty does not explain this miss")
    return lines


def format_report(report: dict) -> str:
    """Plain-text table of :func:`validate`'s report."""
    m, s, e = report["measured"], report["simulated"], report["relative_error"]
    lines = [
        f"predicted   {report['live_dir']}  ({report['policy']}, verify {report['verify']}, "
        f"k {report['k']}, e {report['extra']}, N {report['requests']}, max_num_seqs "
        f"{report['max_num_seqs']}, {report['arrival']}, seed {report['seed']}, "
        f"T {report['temperature']:g}, {report['device']} {report['dtype']})",
        f"mode        {report['mode']}",
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
    lines.append(f"per-step latency MAPE (each measured step priced on its own passes): "
                 f"{e['step_latency_mape']:.1%}")
    return "\n".join(lines)
