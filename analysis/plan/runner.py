"""The planner's runner: simulate a search's candidates into one point store, reusing runs.

Runs are stored under ``RUNS/points`` keyed by their resolved config, the package version and
the trace's and workload file's contents (analysis.sweep.runner.input_identity), and a stopped
run also by its stop rule (:func:`stop_key`), so a rerun reuses every run already computed and
an exhaustive rerun every whole one. One local pool of workers serves the whole search, forked
after the parent loaded the trace; each worker prices a deployment's runs with one cost model
(analysis.plan.cost_source.shared_cost) and ends a run early by its rule
(analysis.plan.slo.EarlyStop). Each run is judged by analysis.plan.entry.judge_entry.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

from specbatch.analysis.plan.entry import judge_entry
from specbatch.analysis.plan.slo import Slos, StopRule
from specbatch.analysis.plan.space import Deployment, Speculation


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

        # runs settled (simulated or reused) out of those of the cost levels begun: each
        # level adds its candidates (begin_level) and bounds drop the ones they skip, so the
        # total and ETA are the current level's end (how many levels follow depends on them)
        self.bar = tqdm(total=None, desc="plan", unit="run", file=sys.stderr,
                        leave=False, disable=not self.progress, dynamic_ncols=True)
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

    def begin_level(self, index: int, levels: int, runs: int) -> None:
        """Cost level ``index`` of at most ``levels`` starts with ``runs`` candidates."""
        self.bar.set_description(f"plan: cost level {index}/{levels}", refresh=False)
        self.expect((self.bar.total or 0) + runs)

    def expect(self, runs: int) -> None:
        """The progress bar's total: ``runs`` runs, counting those settled."""
        self.bar.total = max(int(runs), self.bar.n)
        self.bar.refresh()

    def drop(self, runs: int) -> None:
        """``runs`` candidates the search will not run (negative: adds them back)."""
        if self.bar.total is not None and runs:
            self.expect(self.bar.total - runs)

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
        self.bar.update(len(candidates) - len(todo))  # the reused count as settled too
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


def compiled_first(config) -> bool:
    """Whether a run, whole or early-stopped, tries the compiled loop first: under
    ``engine = "auto"`` with numba installed, at any size. The planner runs many small runs in
    one process, so the kernel's load (auto's reason to keep runs under
    simulator.engine.v1.compiled.AUTO_MIN_REQUESTS on numpy) is paid once; the tables are
    bit-identical either way, so the answer is too (docs/benchmarks.md: the README's plan
    question in fewer CPU seconds)."""
    from specbatch.simulator.engine.v1.compiled import numba_installed

    return getattr(config, "engine", "auto") == "auto" and numba_installed()


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
    fields = {k: v for k, v in config.items() if k != STOP_FIELD}
    cfg = make_config(fields)
    kw = dict(trace=_cached_trace(cfg), cost_model=shared_cost(cfg),
              stop=None if rule is None else EarlyStop(rule))
    if compiled_first(cfg):  # an early stop too: the kernel stops at the numpy engine's events
        from specbatch.simulator.engine.v1.compiled import NotCovered

        try:
            result = simulate(make_config({**fields, "engine": "compiled"}), **kw)
        except NotCovered:
            result = simulate(cfg, **kw)
    else:
        result = simulate(cfg, **kw)
    summary = {k: v for k, v in result.summary.items() if k not in ("policy", "verify")}
    return summary, result.requests
