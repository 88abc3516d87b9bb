"""The planner's search: simulate the cost levels of a space, cheapest first, skip what a
lower bound proves cannot pass or cannot matter, and judge every run.

Each cost level (analysis.plan.space.cost_levels) holds its deployments x speculation
settings. With pruning on (the default) each candidate first gets its latency lower bound
(analysis.plan.bound, one set of shared tables per workload: trace, workload, fewest steps
per policy depth), then:

- **cannot pass**: a bound over an SLO at the percentile, or a goodput share under the
  target even at the bounds, proves the run would fail; it is not simulated;
- **cannot matter**: its e2e bound exceeds the e2e of a passing configuration ranked before
  it (cost, then GPUs no more than its own), so it can be neither the choice nor a point of
  the frontier (analysis.plan.planner.choose, pareto); it is not simulated. ``ar`` is not skipped
  this way unless a passing ``ar`` is ranked strictly before it (:func:`needed_ar`: the
  cheapest ``ar`` that passes is part of the answer);
- the rest run in rounds of :data:`ROUND` candidates in the order of their e2e bounds, the
  threshold tightening after each round, so the set simulated does not depend on the number
  of workers or the order runs finish in.

Each run of a pruned search carries a **stop rule** (analysis.plan.slo.EarlyStop, fixed when
its round starts): it ends as soon as what it simulated so far proves that it fails (a
preemption not allowed; enough requests over an SLO to fix its percentile above it; the
goodput share out of reach) or, for a setting that cannot matter otherwise, that its e2e at
the percentile exceeds the same threshold as above. A run stopped for failing is an entry
that fails, its latencies lower bounds; one stopped for the frontier is skipped. A run its
rule never stops is the whole run, bit for bit; ``ar`` on the chosen deployment is rerun
whole when it was stopped (its latencies are the gain's).

A level **adds to the frontier** when one of its passing runs beats every cheaper passing
run's e2e; the search stops once ``levels_after`` levels beyond the first passing level
have added to it. These rules only skip or stop runs that cannot change the choice, the
frontier or the levels searched, so the answer equals the exhaustive search's
(``prune=False``: every candidate of every searched level simulated whole), bit for bit
(tests/analysis/plan/test_search.py).

Runs are stored under ``RUNS/points`` keyed by their resolved config, the package version
and the trace's and workload file's contents (analysis.sweep.runner.input_identity), and a stopped
run also by its rule, so a rerun reuses every run already computed and an exhaustive rerun
every whole one. One local pool of workers serves the whole search, forked after the
parent loaded the trace; each worker prices a deployment's runs with one cost model
(analysis.plan.cost_source.shared_cost).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specbatch.analysis.plan.slo import (
    Slos,
    StopRule,
    Verdict,
    judge,
    judge_stopped,
    memory_plan,
)
from specbatch.analysis.plan.space import Deployment, Space, Speculation, cost_levels, speculations

#: Candidates simulated per round between two updates of the pruning threshold.
ROUND = 4


@dataclass(frozen=True)
class Entry:
    """One simulated configuration: what ran, its verdict, memory plan and summary."""

    deployment: Deployment
    speculation: Speculation
    verdict: Verdict
    memory: dict
    summary: dict = field(repr=False)
    config: dict = field(repr=False)  # the resolved SimConfig fields it ran with

    @property
    def label(self) -> str:
        return f"{self.deployment.label}, {self.speculation.label}"

    @property
    def stopped_at(self) -> float | None:
        """When an early stop ended the run (its verdict is then a failure proven from the
        run so far, its latencies lower bounds), or None for a whole run."""
        return self.summary.get("stopped_at")


@dataclass(frozen=True)
class Skipped:
    """A candidate not simulated: ``passes`` False when its bound proves it fails (``reason``
    says which limit), None when it might pass but cannot be chosen nor join the frontier;
    ``stopped``: simulated in part, until an early stop proved the latter."""

    deployment: Deployment
    speculation: Speculation
    reason: str
    passes: bool | None
    stopped: bool = False

    @property
    def label(self) -> str:
        return f"{self.deployment.label}, {self.speculation.label}"


@dataclass(frozen=True)
class Search:
    """Every judged entry and skipped candidate, in cost order, and the run counts."""

    entries: tuple[Entry, ...]
    levels: int  # cost levels searched
    runs: int  # simulated (computed now or reused)
    computed: int
    reused: int
    skipped: tuple[Skipped, ...] = ()
    stopped: int = 0  # runs an early stop ended (failing, or unable to beat the frontier)


def search(base: dict, space: Space, deployments: list[Deployment], slos: Slos,
           runs_dir: Path, levels_after: int = 1, prune: bool = True,
           **executor: Any) -> Search:
    """Search ``deployments`` (already pruned for memory) level by level (module docstring).

    base: SimConfig fields every run shares (seed included). executor: ``workers``,
    ``scheduler``, ``progress``.
    """
    from specbatch.analysis.plan.bound import BoundTables

    settings = speculations(space)
    runner = Runner(base, runs_dir, early=prune, **executor)
    tables = BoundTables(base, runner.trace) if prune else None
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    added, levels = 0, 0
    with runner:
        for _, level in cost_levels(deployments):
            if added > levels_after:
                break
            before = _best_e2e(entries)
            new, gone = search_level(runner, tables, level, settings, slos, entries)
            levels += 1
            entries += new
            skipped += gone
            added += any(e.verdict.passed and e.verdict.latency["e2e"] < before for e in new)
        ar_entry = complete_gain(runner, entries, space, slos)
        if ar_entry is not None:
            same = (ar_entry.deployment, ar_entry.speculation)
            entries = ([ar_entry if (e.deployment, e.speculation) == same else e
                        for e in entries] if any((e.deployment, e.speculation) == same
                                                 for e in entries) else entries + [ar_entry])
            skipped = [s for s in skipped if (s.deployment, s.speculation) != same]
    return Search(tuple(entries), levels, runner.runs, runner.computed, runner.reused,
                  tuple(skipped), runner.stopped)


def _best_e2e(entries: list[Entry]) -> float:
    """The lowest e2e at the percentile of the passing entries (inf: none passes)."""
    return min((e.verdict.latency["e2e"] for e in entries if e.verdict.passed),
               default=math.inf)


def search_level(runner: Runner, tables, level: list[Deployment], settings: list[Speculation],
                 slos: Slos, earlier: list[Entry]) -> tuple[list[Entry], list[Skipped]]:
    """Simulate one cost level's candidates, skipping what the bounds rule out (module
    docstring); returns its entries and skipped candidates in the level's order."""
    candidates = [(d, s) for d in level for s in settings]
    if tables is None:
        found = runner.run(candidates, slos)
        return [found[c] for c in candidates], []
    bounds = {c: tables.bounds(runner.fields(*c)) for c in candidates}
    skipped: dict = {}
    for c, b in bounds.items():
        why = None if b is None else cannot_pass(b, slos)
        if why is not None:
            skipped[c] = Skipped(*c, why, False)
    order = sorted((c for c in candidates if c not in skipped),
                   key=lambda c: (_e2e_bound(bounds[c], slos), candidates.index(c)))
    found: dict = {}
    while order:
        batch = []
        while order and len(batch) < ROUND:
            c = order.pop(0)
            why = cannot_matter(c, bounds[c], slos, earlier + list(found.values()))
            if why is None:
                batch.append(c)
            else:
                skipped[c] = Skipped(*c, why, None)
        ahead = earlier + list(found.values())
        rules = {c: stop_rule(c, slos, ahead) for c in batch}
        for c, got in runner.run(batch, slos, rules).items():
            (skipped if isinstance(got, Skipped) else found)[c] = got
    return ([found[c] for c in candidates if c in found],
            [skipped[c] for c in candidates if c in skipped])


def stop_rule(candidate: tuple[Deployment, Speculation], slos: Slos,
              entries: list[Entry]) -> StopRule:
    """The early stop of a candidate simulated now: its SLOs, and the e2e it must beat to
    matter (:func:`best_ahead`, fixed when its round starts, so what stops does not depend on
    the workers; none for ``ar``)."""
    best = None if needed_ar(candidate, entries) else best_ahead(candidate, entries)
    if best is None:
        return StopRule(slos)
    return StopRule(slos, best.verdict.latency["e2e"], best.label)


def needed_ar(candidate: tuple[Deployment, Speculation], entries: list[Entry]) -> bool:
    """Whether ``candidate`` is ``ar`` that may be the cheapest passing ``ar`` (part of the
    answer, analysis.plan.planner.gain_vs_ar): no passing ``ar`` is ranked strictly before it on
    (cost, GPUs). Such an ``ar`` is never skipped nor stopped for the frontier."""
    d, s = candidate
    return s.policy == "ar" and not any(
        e.verdict.passed and e.speculation.policy == "ar"
        and (e.deployment.cost, e.deployment.gpus) < (d.cost, d.gpus) for e in entries)


def best_ahead(candidate: tuple[Deployment, Speculation], entries: list[Entry]) -> Entry | None:
    """The passing entry ranked before ``candidate`` (cost, then GPUs, no more than its own)
    with the lowest e2e at the percentile, or None."""
    d = candidate[0]
    ahead = [e for e in entries if e.verdict.passed
             and (e.deployment.cost, e.deployment.gpus) <= (d.cost, d.gpus)]
    return min(ahead, key=lambda e: (e.verdict.latency["e2e"], e.label)) if ahead else None


def _e2e_bound(bounds, slos: Slos) -> float:
    return 0.0 if bounds is None else bounds.at(slos.percentile)["e2e"]


def cannot_pass(bounds, slos: Slos) -> str | None:
    """Why a run with these lower bounds must fail its SLOs, or None (module docstring)."""
    p = slos.percentile
    at = bounds.at(p)
    for name, bound in slos.bounds().items():
        if at[name] > bound:
            return (f"cannot pass: {name.upper()} p{p:g} >= {at[name]:.3g} s (lower bound) > "
                    f"{bound:g} s")
    if slos.bounds():
        ok = np.ones(bounds.e2e.shape[0], dtype=bool)
        for name, bound in slos.bounds().items():
            ok &= getattr(bounds, name) <= bound
        share = float(ok.mean()) if ok.size else 0.0
        if share < slos.goodput:
            return f"cannot pass: goodput <= {share:.3f} (lower bounds) < {slos.goodput:g}"
    return None


def cannot_matter(candidate: tuple[Deployment, Speculation], bounds, slos: Slos,
                  entries: list[Entry]) -> str | None:
    """Why ``candidate`` can be neither the choice nor a frontier point, or None: its e2e
    bound exceeds a passing entry's e2e ranked before it (module docstring)."""
    if bounds is None or needed_ar(candidate, entries):
        return None
    best = best_ahead(candidate, entries)
    if best is None:
        return None
    lower = bounds.at(slos.percentile)["e2e"]
    if lower > best.verdict.latency["e2e"]:
        return (f"cannot beat the frontier: e2e p{slos.percentile:g} >= {lower:.3g} s (lower "
                f"bound) > {best.verdict.latency['e2e']:.3g} s of {best.label}")
    return None


def complete_gain(runner: Runner, entries: list[Entry], space: Space,
                  slos: Slos) -> Entry | None:
    """``ar`` on the choice's deployment when it was skipped or stopped early (the gain over
    ``ar`` on the same GPUs is part of the answer: its whole run), simulated now; None when
    not needed."""
    from specbatch.analysis.plan.planner import choose

    choice = choose(tuple(entries))
    if choice is None or choice.speculation.policy == "ar" or "ar" not in space.policies:
        return None
    if any(e.deployment == choice.deployment and e.speculation.policy == "ar"
           and e.stopped_at is None for e in entries):
        return None
    c = (choice.deployment, Speculation("ar"))
    return runner.run([c], slos)[c]


class Runner:
    """Simulates candidates into one point store, reusing stored runs, on one executor
    (a local pool forked per round from a parent that holds the trace, or one Dask client)."""

    def __init__(self, base: dict, runs_dir: Path, workers: int = 1,
                 scheduler: str | None = None, progress: bool = False,
                 early: bool = False) -> None:
        from specbatch.analysis.sweep.executors import _cached_trace
        from specbatch.analysis.sweep.points import trace_fingerprint
        from specbatch.simulator.config.sim_config import make_config

        self.base, self.store = dict(base), Path(runs_dir)
        self.workers, self.scheduler, self.progress = workers, scheduler, progress
        config = make_config(self.base)
        self.trace = _cached_trace(config)  # forked pool workers inherit it
        self.trace_ids = {config.trace: trace_fingerprint(config.trace)[0]}
        self.early = early  # apply the candidates' stop rules (else every run is whole)
        self.runs = self.computed = self.reused = self.stopped = 0
        self._client = self._cluster = self._pool = None

    def __enter__(self) -> Runner:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=None, desc="plan", unit="run", file=sys.stderr, leave=False,
                        disable=not self.progress, dynamic_ncols=True)
        if self.scheduler is not None:
            from specbatch.analysis.sweep.executors import _dask_client

            self._client, self._cluster = _dask_client(self.scheduler, self.workers)
        elif self.workers > 1:  # one pool for the whole search: each worker imports the
            # simulator and builds a deployment's cost tables once, not once per round
            from concurrent.futures import ProcessPoolExecutor

            from specbatch.analysis.sweep.executors import _init_worker

            self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                             initializer=_init_worker, initargs=(os.getpid(),))
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
        if self._pool is not None:
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()

    def fields(self, d: Deployment, s: Speculation) -> dict:
        return {**self.base, **d.fields(), **s.fields()}

    def run(self, candidates: list[tuple[Deployment, Speculation]], slos: Slos,
            rules: dict | None = None) -> dict:
        """Simulate (or reuse) ``candidates``; returns candidate -> judged :class:`Entry`, or
        :class:`Skipped` for a run its stop rule (``rules``: candidate -> StopRule; applied
        when the runner is ``early``) ended because it cannot beat the frontier.

        A run with a rule is stored under its key and the rule's; one the rule did not stop
        is also stored under the plain key (an exhaustive rerun reuses it)."""
        from specbatch.analysis.sweep.executors import execute
        from specbatch.analysis.sweep.points import load_point, run_key, store_point
        from specbatch.analysis.sweep.runner import input_identity, read_requests
        from specbatch.analysis.sweep.spec import resolve_config
        from specbatch.simulator.config.sim_config import SimConfig

        rules = {c: r for c, r in (rules or {}).items() if r is not None and self.early}
        configs = {c: resolve_config(self.fields(*c), SimConfig, "plan") for c in candidates}
        plain = {c: run_key(configs[c], trace_id=input_identity(configs[c], self.trace_ids))
                 for c in candidates}
        keys = {c: stop_key(plain[c], rules[c]) if c in rules else plain[c]
                for c in candidates}
        records = {c: load_point(self.store, keys[c]) for c in candidates}
        todo = [(keys[c], {**configs[c], STOP_FIELD: rules[c]} if c in rules else configs[c])
                for c in candidates if records[c] is None]
        also = {keys[c]: plain[c] for c in rules}
        fresh: dict[str, tuple[dict, pd.DataFrame]] = {}

        def done(key, config, summary, requests, elapsed):
            config = {k: v for k, v in config.items() if k != STOP_FIELD}
            store_point(self.store, config, summary, requests, elapsed, key)
            if key in also and "stopped_at" not in summary:  # a whole run after all
                alias_point(self.store, key, also[key])
            fresh[key] = (summary, requests)
            self.bar.update(1)

        if self._pool is not None and len(todo) > 1:
            run_on_pool(self._pool, todo, done)
        else:
            execute(simulate_point, todo, done, **({"client": self._client}
                                                   if self._client is not None else {}))
        self.runs += len(candidates)
        self.computed += len(todo)
        self.reused += len(candidates) - len(todo)
        out = {}
        for c in candidates:
            if records[c] is None:
                summary, requests = fresh[keys[c]]
            else:
                summary, requests = records[c]["summary"], read_requests(self.store, keys[c])
            self.stopped += summary.get("stopped_at") is not None
            out[c] = judge_entry(*c, configs[c], summary, requests, slos, rules.get(c))
        return out


def run_on_pool(pool, todo: list[tuple[str, dict]], done) -> None:
    """Run ``todo`` on the search's pool, handing each result to ``done`` as it completes
    (analysis.sweep.executors' local pool, kept across rounds)."""
    from concurrent.futures import as_completed

    from specbatch.analysis.sweep.executors import _call

    futures = {pool.submit(_call, simulate_point, config): (key, config) for key, config in todo}
    try:
        for fut in as_completed(futures):
            done(*futures[fut], *fut.result())
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise


def alias_point(store: Path, key: str, alias: str) -> None:
    """Store run ``key`` again under ``alias`` (its request table's bytes copied, not
    re-encoded; the record written last, as analysis.sweep.points.store_point does)."""
    import json

    from specbatch.analysis.sweep.points import point_path, requests_path
    from specbatch.io import atomic_write

    source = requests_path(store, key)
    if source.exists():
        atomic_write(requests_path(store, alias), source.read_bytes())
    record = json.loads(point_path(store, key).read_bytes())
    record["key"] = alias
    atomic_write(point_path(store, alias), json.dumps(record, indent=1, allow_nan=True).encode())


#: The config key a candidate's stop rule travels under to the runner (never stored).
STOP_FIELD = "_plan_stop"


def stop_key(key: str, rule: StopRule) -> str:
    """The stored run's key under a stop rule: the plain run key and the rule's identity."""
    import hashlib
    import json

    blob = json.dumps({"run": key, "stop": rule.identity()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def simulate_point(config: dict):
    """The runner: one simulation (as analysis.sweep.executors.simulate_point), priced by the
    deployment's shared cost model (analysis.plan.cost_source.shared_cost) and ended early by the
    candidate's stop rule when it carries one (analysis.plan.slo.EarlyStop). Module level,
    so a pool can pickle it."""
    from specbatch.analysis.plan.cost_source import shared_cost
    from specbatch.analysis.plan.slo import EarlyStop
    from specbatch.analysis.sweep.executors import _cached_trace
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import simulate

    rule = config.get(STOP_FIELD)
    cfg = make_config({k: v for k, v in config.items() if k != STOP_FIELD})
    result = simulate(cfg, trace=_cached_trace(cfg), cost_model=shared_cost(cfg),
                      stop=None if rule is None else EarlyStop(rule))
    summary = {k: v for k, v in result.summary.items() if k not in ("policy", "verify")}
    return summary, result.requests


def judge_entry(d: Deployment, s: Speculation, config: dict, summary: dict,
                requests: pd.DataFrame, slos: Slos, rule: StopRule | None = None
                ) -> Entry | Skipped:
    """An :class:`Entry` from one run's summary and per-request table; a run its stop rule
    ended is judged on what it ran (analysis.plan.slo.judge_stopped): a failing entry, or
    :class:`Skipped` when it cannot beat the frontier."""
    summary = {k: summary.get(k) for k in SUMMARY_KEYS}
    constants = _memory_constants(d, config)
    depth, seqs = _depth(config), int(config["max_num_seqs"])
    if summary["stopped_at"] is not None:
        kind, verdict = judge_stopped(requests, summary, rule or StopRule(slos))
        if kind == "cannot beat":
            return Skipped(d, s, verdict.limits[0], None, stopped=True)
        arrived = requests[requests["arrival"] <= summary["stopped_at"]]
        arrived = arrived.assign(finish=arrived["finish"].fillna(np.inf))
        memory = memory_plan(arrived, summary, seqs, depth, *constants)
        return Entry(d, s, verdict, memory, summary, config)
    verdict = judge(requests, int(summary["preemptions"]), slos)
    memory = memory_plan(requests, summary, seqs, depth, *constants)
    return Entry(d, s, verdict, memory, summary, config)


#: Summary metrics an entry keeps (simulator.metrics; ``kv_capacity`` = tokens per replica).
SUMMARY_KEYS = ("throughput", "e2e_p50", "e2e_p99", "ttft_mean", "tpot_mean", "mal", "vsr",
                "preemptions", "recomputed_tokens", "kv_capacity", "requests", "makespan",
                "stopped_at")


def _depth(row: dict) -> int:
    """Draft tokens per request and step the run's policy may ask (its KV lookahead)."""
    from specbatch.simulator.config.sim_config import make_config, policy_depth

    fields = {k: row[k] for k in ("policy", "num_speculative_tokens", "extra")}
    return policy_depth(make_config(fields))


def _memory_constants(d: Deployment, config: dict) -> tuple[float, int]:
    """(weights of target + draft in GB per replica, KV bytes per cached token), the target's
    weights in the run's ``quantization`` and the KV at its ``kv_cache_dtype``
    (simulator.cost.precision)."""
    from specbatch.simulator.cost.hardware import get_hardware, quantized_weights, weight_bytes
    from specbatch.simulator.cost.precision import kv_element_bytes
    from specbatch.traces.models.shapes import find_shape

    target, draft = config["target"], config["draft"]
    hw = get_hardware(d.hardware)
    shapes = [s for s in (find_shape(target), find_shape(draft)) if s is not None]
    quantized = quantized_weights(hw, target, draft, 16, config.get("quantization", "none"))
    kv_b = kv_element_bytes(config.get("kv_cache_dtype", "auto"), hw)
    return ((weight_bytes(hw, (target, draft)) if quantized is None else quantized[0]) / 1e9,
            sum(s.kv_bytes_per_token(kv_b) for s in shapes))
