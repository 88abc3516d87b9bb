"""The demo: one sweep over every policy and verifier on a bundled trace, then its report.

``demo_spec`` builds the sweep (analysis.sweep.spec format): autoregressive decoding, fixed k,
DSD, and the budgeted policies (TETRIS, oracle, hindsight) at k + e ≤ K, each under token and
block verification. :func:`plan_demo` resolves the trace and parses the spec;
:func:`run_demo` runs it (resumable, analysis.sweep.runner), writes the report and returns the
headline table (best setting of each policy and verifier, analysis.report.compare.headline).
:func:`kv_description` is the line it prints about the KV cache the runs assume.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pandas as pd

from specbatch.analysis.sweep.runner import SweepOutcome, run_sweep
from specbatch.analysis.sweep.spec import SweepSpec, parse_spec
from specbatch.errors import SpecbatchError
from specbatch.traces.format.describe import describe_trace
from specbatch.traces.format.files import read_trace, resolve_trace

KS = (1, 2, 3, 4, 5, 6)
EXTRAS = (1, 2)
BUDGETED = ("tetris", "oracle", "hindsight")


def pick_trace(name: str) -> tuple[str, int, str]:
    """(trace name for the config, its draft depth K, a one-line description).

    Falls back to ``synth`` when the default trace is not bundled (a source checkout without
    its data files), and says so in the description.
    """
    try:
        path = resolve_trace(name)
    except SpecbatchError:
        if name != "default":
            raise
        from specbatch.traces.synth import SynthConfig

        synth = SynthConfig()
        return "synth", synth.depth, (
            "synthetic (traces.synth defaults: temperature "
            f"{synth.temperature:g}, K = {synth.depth}) because the bundled default trace "
            "is not present")
    # the whole trace is read and checked (meta.json, every row's bounds) before the demo
    # prints anything: a damaged trace is one line, not a banner followed by a worker's error
    trace = read_trace(path)
    return name, trace.K, f"{name} ({describe_trace(trace.meta, trace.K)})"


def demo_spec(trace: str, depth: int, quick: bool, seeds: int | None) -> dict:
    """The demo's sweep spec (analysis.sweep.runner format) as a dict."""
    ks = (1, 2) if quick else KS
    extras = (1,) if quick else EXTRAS
    n_seeds = seeds if seeds is not None else (1 if quick else 3)
    base = {"trace": trace, "requests": 32 if quick else 512, "max_num_seqs": 8 if quick else 64,
            "arrival": "burst", "cost": "auto", "hardware": "h100", "target": "vicuna-33b",
            "draft": "vicuna-68m"}
    verify = ["token", "block"]
    fixed_ks = [k for k in ks if k <= depth]
    grids: list[dict] = [
        {"policy": ["ar"]},
        {"policy": ["fixed"], "num_speculative_tokens": fixed_ks, "verify": verify},
        {"policy": ["dsd"], "verify": verify},  # DSD plans its own window k = 0..min(6, K)
    ]
    for e in extras:
        allowed = [k for k in ks if k + e <= depth]
        if allowed:
            grids.append({"policy": list(BUDGETED), "num_speculative_tokens": allowed,
                          "extra": [e], "verify": verify})
    return {"name": "demo-quick" if quick else "demo", "seeds": list(range(n_seeds)),
            "base": base, "axes": grids,
            "report": {"title": "specbatch demo: which draft tokens to verify, and how"}}


@dataclass(frozen=True)
class DemoPlan:
    """The demo's parsed sweep, its shared config fields and a one-line trace description."""

    spec: SweepSpec
    base: dict
    trace: str


@dataclass(frozen=True)
class DemoResult:
    """What a demo run did (analysis.sweep.runner.SweepOutcome), its headline table and report
    path."""

    outcome: SweepOutcome
    headline: pd.DataFrame
    report: str


def plan_demo(trace: str = "default", quick: bool = False, seeds: int | None = None) -> DemoPlan:
    """Resolve ``trace`` (:func:`pick_trace`) and parse the demo's sweep spec."""
    name, depth, desc = pick_trace(trace)
    data = demo_spec(name, depth, quick, seeds)
    spec = parse_spec(data, f"<demo{' --quick' if quick else ''}>")
    return DemoPlan(spec=spec, base=data["base"], trace=desc)


def kv_description(base: dict) -> str:
    """One line: the KV mode and capacity the demo's runs use (the config defaults unless
    ``base`` sets them), and what one GPU's memory would hold (simulator.cost.analytic.roofline)."""
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.analytic.memory import kv_capacity_tokens

    mode = base.get("kv_mode", SimConfig.kv_mode)
    capacity = base.get("kv_capacity", SimConfig.kv_capacity)
    memory = kv_capacity_tokens(base["hardware"], base["target"], base["draft"])
    used = "unlimited" if capacity is None else f"{capacity} tokens per replica"
    return (f"KV cache: kv_mode {mode}, capacity {used} (one {base['hardware']} holds {memory} "
            f"tokens next to {base['target']} + {base['draft']} at gpu_memory_utilization "
            f"0.9; simulate --kv-mode paged models that pool with preemption)")


def run_demo(plan: DemoPlan, out: str | os.PathLike, workers: int = 2, fmt: str = "md",
             progress: bool = True) -> DemoResult:
    """Run the planned sweep into ``out`` (stored runs are reused), write the report."""
    from specbatch.analysis.report.compare import headline
    from specbatch.analysis.report.sweep_report import (
        build_report,  # matplotlib: only when a report is due
    )

    if progress:
        sys.stderr.write(kv_description(plan.base) + "\n")
    outcome = run_sweep(plan.spec, out, workers=workers, progress=progress)
    table = headline(outcome.table)
    report = build_report(out, fmt=fmt)
    return DemoResult(outcome=outcome, headline=table, report=report)
