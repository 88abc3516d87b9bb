"""``specbatch plan``: the cheapest deployment and speculation setting that meets the SLOs.

The question a capacity planner asks ("this target and draft, this load, these SLOs: should I
speculate, with which policy, verifier and k, and on how many GPUs?") answered from one
command: the workload (a file, or length distributions written to ``OUT/workload.csv`` by
simulator.workload.lengths), the search space (analysis.plan.space: hardware x tp x replicas x
speculation, pruned where the weights do not fit), the simulations (analysis.plan.search: cost
levels cheapest first on the sweep machinery, paged KV with preemption, skipping what the
latency lower bounds of analysis.plan.bound prove cannot pass or cannot matter), the
verdicts (analysis.plan.slo) and this module's report: the choice with its memory plan and
its gain over ``ar`` on the same deployment, the Pareto frontier of cost vs latency, what
limits each rejected configuration (analysis.plan.rejected), where acceptance came from
(trace, wrapped positions) and, with an acceptance band, how the choice moves under a
constant α at both ends. The output folder is claimed first (analysis.plan.out_dir).

The choice is written as a ``simulate`` config (``OUT/plan.toml``): ``specbatch simulate
--config OUT/plan.toml`` re-runs it and reproduces the planner's numbers.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.analysis.plan.entry import Entry, choose, pareto, rank
from specbatch.analysis.plan.rejected import configuration_dict, dominated, rejected
from specbatch.analysis.plan.search import Search, search
from specbatch.analysis.plan.slo import Slos
from specbatch.analysis.plan.space import (
    PRECISION_FIELDS,
    Space,
    deployments,
    prune_reason,
    speculations,
)
from specbatch.errors import SpecbatchError, require
from specbatch.io import atomic_write, dumps

if TYPE_CHECKING:
    from specbatch.simulator.workload.lengths import Lengths

#: The report file (the folder's claim is analysis.plan.out_dir.MARKER, written first).
REPORT = "plan.json"


@dataclass(frozen=True)
class Question:
    """What the planner is asked: the runs' shared SimConfig fields (workload, models, engine
    limits, trace, seed), the search space and the SLOs; ``lengths`` (prompt, output): length
    distributions to draw the workload from into ``OUT/workload.csv`` (None: ``base`` names
    the workload, or the trace's own requests); ``prune``: skip settings a lower bound proves
    cannot matter (analysis.plan.bound; False: simulate every setting of every level);
    ``seeds``: R, the seeds the chosen deployment's settings are compared on (paired
    intervals and a tie set, analysis.plan.seeds; ``specbatch plan`` asks 3); ``breakeven``:
    the break-even acceptance of the tied settings (analysis.plan.breakeven; on in ``plan``)."""

    base: dict
    space: Space
    slos: Slos
    levels_after: int = 1
    band: tuple[float, float] | None = None
    lengths: tuple[Lengths, Lengths] | None = None
    prune: bool = True
    seeds: int = 1
    breakeven: bool = False


def run_plan(question: Question, out: str | Path | None = None, **executor: Any) -> dict:
    """Answer ``question`` into ``out`` (module docstring; None: a cache folder named by the
    question, analysis.plan.out_dir.default_out); returns the report dict, also written to
    ``OUT/plan.json``. executor: run_sweep's workers, scheduler, progress.

    The folder is claimed before anything is written (analysis.plan.out_dir: refused when it
    holds anything but this question's plan; one plan at a time). ``plan.json`` is written
    before the figure, and a figure that fails costs only the figure. Configs are memoised
    meanwhile (simulator.config.sim_config.remembered_configs).
    """
    from specbatch.simulator.config.sim_config import remembered_configs

    with remembered_configs():  # the catalogues do not change while a plan runs
        return _run_plan(question, out, **executor)


def _run_plan(question: Question, out: str | Path | None, **executor: Any) -> dict:
    from specbatch.analysis.plan.out_dir import claimed_plan_dir, default_out
    from specbatch.analysis.plan.runner import PlanPool

    preflight(question)
    out = Path(out) if out is not None else default_out(question)
    pool = None  # one pool for the whole plan (analysis.plan.runner.PlanPool)
    if executor.get("scheduler") is None and int(executor.get("workers", 1)) > 1:
        executor = {**executor, "pool": PlanPool(int(executor["workers"]))}
        pool = executor["pool"]
    with claimed_plan_dir(out, question) as out, pool or nullcontext():
        out = out.resolve()
        base = question.base
        if question.lengths is not None:
            workload = write_length_workload(base, *question.lengths, out / "workload.csv")
            base = {**base, "workload": str(workload)}
        main = answer(base, question, out / "runs" / "trace", **executor)
        if main.choice is not None and question.seeds > 1:
            from specbatch.analysis.plan.seeds import seed_check

            main = seed_check(base, question, main, out / "runs" / "trace", **executor)
        if main.choice is not None and question.breakeven:
            from specbatch.analysis.plan.breakeven import breakeven_report, bundled_band

            main.report["breakeven"] = breakeven_report(base, question, main, out, **executor)
            main.report["bundled_band"] = bundled_band(base, question, main, out, **executor)
        report = main.report
        if question.band is not None:
            report["acceptance_band"] = [
                band_answer(base, question, alpha, out, **executor) for alpha in question.band]
        if report["choice"] is not None:
            toml = out / "plan.toml"
            atomic_write(toml, choice_toml(base, main.choice))
            report["choice"]["config"] = str(toml)
            from specbatch.simulator.config.sim_config import make_config

            # as the answer's runs resolved it (SimConfig.async_setting)
            report["choice"]["async_scheduling"] = str(make_config(
                choice_fields(base, main.choice)).async_setting)
            report["choice"]["simulate"] = f"specbatch simulate --config {toml}"
            from specbatch.analysis.plan.engine_advice import engine_lines, versions

            spec = main.choice.speculation
            report["choice"]["engines"] = engine_lines(base, spec.policy, spec.k, spec.verify,
                                                       int(base["max_num_seqs"]))
            report["choice"]["engines_checked_against"] = versions()
        report["out"] = str(out)
        from specbatch.analysis.plan.cost_source import plan_sources

        report["cost_source"] = plan_sources(base, report, question.space.hardware)
        report["figure"] = None
        atomic_write(out / REPORT, dumps(report, indent=1))
        report["figure"] = draw_figure(main, question, out / "frontier.png")
        atomic_write(out / REPORT, dumps(report, indent=1))
    return report


def draw_figure(main: Answer, question: Question, path: Path) -> str | None:
    """The frontier figure's path, or None (and no figure) when drawing it fails: the
    results are already written and a figure must never cost them."""
    from specbatch.analysis.plan.figure import frontier_figure

    try:
        return frontier_figure(main.search.entries, question.slos, question.space.priced, path)
    except (ValueError, OverflowError, OSError, RuntimeError, MemoryError):
        return None


def preflight(question: Question) -> None:
    """One-line errors for a question that cannot run, before its folder is touched: the
    shared fields (simulator.config.sim_config), and the deepest setting against the trace's K."""
    from specbatch.analysis.sweep.executors import _cached_trace as load_trace
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import applied_profile

    base = question.base
    config = make_config(base)
    trace = load_trace(config)
    profile = applied_profile(config)
    depth = max_depth(base, question.space)
    if profile is not None:
        require(depth <= profile.K, f"--k/--extra: expected k + e <= the acceptance profile's "
                f"K = {profile.K} (it says nothing past it), got {depth}")
        return
    require(depth <= trace.K, f"--k/--extra: expected k + e <= the trace's draft depth K = "
            f"{trace.K} (it recorded that many draft tokens per position), got {depth}")


@dataclass(frozen=True)
class Answer:
    """One search's report dict, its choice (None: nothing met every limit) and entries."""

    report: dict
    choice: Entry | None
    search: Search


def answer(base: dict, question: Question, runs_dir: Path, **executor: Any) -> Answer:
    """Search one acceptance source (the trace, or a constant α) and build its report."""
    from specbatch.simulator.config.sim_config import make_config

    make_config(base)  # one-line errors before anything runs
    acceptance = acceptance_info(base)
    depth, trace_depth = max_depth(base, question.space), acceptance.pop("trace_depth")
    require(depth <= trace_depth, f"--k/--extra: expected k + e <= the acceptance's draft "
            f"depth K = {trace_depth} (what the trace or profile says), got {depth}")
    largest = acceptance.pop("largest_request") + depth + 1
    kept, pruned = [], []
    for d in deployments(question.space, base.get("requests")):
        why = prune_reason(d, base["target"], base["draft"],
                           float(base.get("gpu_memory_utilization", 0.9)), largest,
                           int(base.get("block_size", 16)),
                           {k: base[k] for k in PRECISION_FIELDS if k in base})
        (pruned if why else kept).append((d, why))
    if not kept:
        why = f" ({pruned[0][1]})" if pruned else ""
        raise SpecbatchError("plan: expected at least one deployment that can hold the models, "
                             f"got none{why}; raise --max-gpus, add --tp or --hardware")
    found = search(base, question.space, [d for d, _ in kept], question.slos, runs_dir,
                   question.levels_after, question.prune, **executor)
    choice = choose(found.entries)
    report = {
        "question": describe_question(base, question),
        "acceptance": acceptance,
        "choice": None if choice is None else choice_dict(choice, found.entries),
        "pareto": [entry_dict(e) for e in pareto(found.entries)],
        "rejected": rejected(found.entries, found.skipped),
        "dominated": dominated(found.entries, found.skipped),
        "configurations": [configuration_dict(e) for e in found.entries],
        "skipped": [{"label": s.label, "cost": s.deployment.cost, "reason": s.reason}
                    for s in found.skipped],
        "pruned": [{"deployment": d.label, "gpus": d.gpus, "cost": d.cost, "limit": why}
                   for d, why in pruned],
        "searched": {"levels": found.levels, "runs": found.runs, "computed": found.computed,
                     "reused": found.reused,
                     "skipped": sum(not s.stopped for s in found.skipped),
                     "stopped": found.stopped, "exhaustive": not question.prune},
    }
    return Answer(report, choice, found)


def band_answer(base: dict, question: Question, alpha: float, out: Path, **executor) -> dict:
    """The choice when acceptance is a constant ``alpha`` (the synth trace) instead."""
    fields = {**base, "trace": "synth", "synth_alpha": float(alpha)}
    fields.pop("acceptance_profile", None)  # the band replaces the profile's acceptance too
    if base.get("workload") is None:
        fields["workload"] = str(trace_workload(base, out / TRACE_WORKLOAD))
    result = answer(fields, question, out / "runs" / f"alpha-{alpha:g}", **executor)
    choice = result.report["choice"]
    return {"alpha": float(alpha),
            "choice": None if choice is None else choice["label"],
            "cost": None if choice is None else choice["cost"],
            "gpus": None if choice is None else choice["gpus"],
            "latency": None if choice is None else choice["latency"]}


#: The main trace's simulated requests as a workload file, for the band's constant-α runs.
TRACE_WORKLOAD = "workload-trace.csv"


def trace_workload(base: dict, path: Path) -> Path:
    """Write the requests the trace's own workload simulates (lengths, categories, and the
    arrival times when they are the trace's) as a workload file, so a constant-α run plans
    the same requests as the trace's run did."""
    import pandas as pd

    from specbatch.analysis.sweep.executors import _cached_trace as load_trace
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.workload.arrivals import build_workload

    config = make_config(base)
    trace = load_trace(config)
    workload = build_workload(config, trace)
    table = pd.DataFrame({"prompt_len": workload.prompt_len, "output_len": workload.output_len,
                          "category": np.asarray(trace.category, dtype=object)[
                              workload.trace_index].astype(str)})
    if config.arrival == "trace":
        table.insert(2, "arrival", workload.arrival)
    atomic_write(path, table.to_csv(index=False, float_format="%.9f"))
    return path


def write_length_workload(base: dict, prompt: Lengths, output: Lengths, path: Path) -> Path:
    """Draw ``base["requests"]`` requests' lengths from the distributions (seeded by
    ``base["seed"]``; ``trace`` sides from the trace ``base`` names) and write them as a
    workload file (simulator.workload.lengths; integer columns without pandas,
    simulator.workload.plain_csv, the same bytes)."""
    from specbatch.analysis.sweep.executors import _cached_trace as load_trace
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.workload.lengths import length_columns
    from specbatch.simulator.workload.plain_csv import int_csv

    trace = load_trace(make_config(base))
    columns = length_columns(prompt, output, int(base["requests"]), int(base.get("seed", 0)),
                             trace.prompt_len, trace.output_len,
                             np.asarray(trace.category, dtype=object))
    text = int_csv(columns)
    if text is None:  # a category column: pandas' quoting
        import pandas as pd

        text = pd.DataFrame(columns).to_csv(index=False)
    atomic_write(path, text)
    return path


def max_depth(base: dict, space: Space) -> int:
    """The deepest draft any searched setting asks (the KV lookahead of the largest request)."""
    from specbatch.simulator.config.sim_config import make_config, policy_depth

    return max(policy_depth(make_config({**base, **s.fields()})) for s in speculations(space))


def acceptance_info(base: dict) -> dict:
    """Where acceptance comes from and how much of it was wrapped: output positions beyond
    the recorded output of the trace request a simulated request replays (position t uses
    row t mod L, simulator.workload.arrivals). Also the largest prompt + output (for pruning)."""
    from specbatch.analysis.sweep.executors import _cached_trace as load_trace
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.workload.arrivals import build_workload

    config = make_config(base)
    trace = load_trace(config)
    workload = build_workload(config, trace)
    recorded = np.asarray(trace.output_len, dtype=np.int64)[workload.trace_index]
    beyond = np.maximum(workload.output_len - recorded, 0)
    from specbatch.simulator.replay.acceptance_source import acceptance_source
    from specbatch.simulator.run import applied_profile

    profile = applied_profile(config)
    origin = acceptance_source(config)
    return {
        **{k: origin[k] for k in ("source", "pair", "pair_matches", "asked")},
        "trace_requests": int(trace.n_requests),
        "output_positions": int(workload.output_len.sum()),
        "wrapped_positions": int(beyond.sum()),
        "wrapped_requests": int(np.count_nonzero(beyond)),
        "largest_request": int((workload.prompt_len + workload.output_len).max(initial=0)),
        "trace_depth": int(trace.K if profile is None else profile.K),
    }


def gain_vs_ar(choice: Entry, entries: tuple[Entry, ...]) -> dict | None:
    """The choice against ``ar`` on the same deployment: latency ratios (ar / choice), ar's
    verdict there, and the cheapest deployment on which ar alone meets every limit."""
    if choice.speculation.policy == "ar" or not any(e.speculation.policy == "ar"
                                                     for e in entries):
        return None
    same = [e for e in entries if e.deployment == choice.deployment
            and e.speculation.policy == "ar"]
    ar_ok = [e for e in entries if e.speculation.policy == "ar" and e.verdict.passed]
    cheapest = min(ar_ok, key=rank) if ar_ok else None
    out: dict = {"cheapest_ar": None if cheapest is None else cheapest.deployment.label,
                 "cheapest_ar_cost": None if cheapest is None else cheapest.deployment.cost}
    if same:
        ar = same[0]
        for name in ("tpot", "e2e", "ttft"):
            mine = choice.verdict.latency[name]
            out[f"{name}_ratio"] = ar.verdict.latency[name] / mine if mine > 0 else None
        out["throughput_ratio"] = (choice.summary["throughput"] / ar.summary["throughput"]
                                   if ar.summary["throughput"] else None)
        out["ar_limits"] = list(ar.verdict.limits)
    return out


def entry_dict(e: Entry) -> dict:
    """An entry as the report lists it."""
    lat = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in e.verdict.latency.items()}
    return {"label": e.label, "deployment": e.deployment.label, "hardware": e.deployment.hardware,
            "tp": e.deployment.tp, "replicas": e.deployment.replicas, "gpus": e.deployment.gpus,
            "cost": e.deployment.cost, "speculation": e.speculation.label,
            **e.speculation.fields(), "latency": lat,
            "throughput": e.summary["throughput"], "limits": list(e.verdict.limits),
            "memory": e.memory}


def choice_dict(choice: Entry, entries: tuple[Entry, ...]) -> dict:
    return {**entry_dict(choice), "gain_vs_ar": gain_vs_ar(choice, entries)}


def describe_question(base: dict, question: Question) -> dict:
    """The question as the report restates it."""
    space = question.space
    keys = ("target", "draft", "trace", "workload", "requests", "arrival", "rate",
            "max_num_seqs", "gpu_memory_utilization", "seed")
    return {**{k: base.get(k) for k in keys if k in base},
            "slos": question.slos.describe(),
            "space": {**{f.name: getattr(space, f.name) for f in dataclasses.fields(space)},
                      "cost": "price per GPU-hour" if space.priced else "GPUs"}}


def choice_fields(base: dict, choice: Entry) -> dict:
    """The fields the chosen configuration sets (k, e and verify only where its policy uses
    them, so ``simulate`` accepts it)."""
    fields = {**base, **choice.deployment.fields(), **choice.speculation.fields()}
    if choice.speculation.policy == "ar":
        fields.pop("verify", None)
    if not choice.speculation.extra:
        fields.pop("extra", None)
    return fields


def choice_toml(base: dict, choice: Entry) -> str:
    """The chosen configuration as a ``simulate`` TOML config (only the fields it sets:
    :func:`choice_fields`)."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.config.toml_writer import to_toml

    fields = choice_fields(base, choice)
    config = make_config(fields)
    keep = set(fields)
    lines = [line for line in to_toml(config).splitlines() if line.split(" = ")[0] in keep]
    return "\n".join(lines) + "\n"


def check_band(text: str | None) -> tuple[float, float] | None:
    """``--acceptance-band A,B`` as two acceptance probabilities 0 < A <= B <= 1."""
    if text is None:
        return None
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise SpecbatchError(
            f"--acceptance-band: expected A,B (two numbers), got {text!r}"
        ) from None
    require(0 < low <= high <= 1, f"--acceptance-band: expected 0 < A <= B <= 1, got {text!r}")
    return low, high
