"""The planner's runner: simulate a search's candidates into one point store, reusing runs.

Runs are stored under ``RUNS/points`` keyed by their resolved config, the code's identity
(analysis.sweep.points.code_version) and the trace's and workload file's contents
(analysis.sweep.runner.input_identity), and a stopped run also by its stop rule
(:func:`stop_key`), so a rerun reuses every run already computed and an exhaustive rerun every
whole one. One local pool of workers serves the whole search, forked after the parent loaded the
trace; each worker prices a deployment's runs with one cost model
(analysis.plan.cost_source.shared_cost) and ends a run early by its rule
(analysis.plan.slo.EarlyStop). Each run is judged by analysis.plan.entry.judge_entry.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specbatch.analysis.plan.entry import judge_entry
from specbatch.analysis.plan.slo import Slos, StopRule
from specbatch.analysis.plan.space import Deployment, Speculation

if TYPE_CHECKING:
    from specbatch.simulator.metrics import Table

#: A round's pending runs below which the pool is not used (they run in the parent): handing
#: a few runs to workers saves less wall than it costs (pickling, a worker's first run).
POOL_MIN_RUNS = 4


def default_workers(cores: int | None = None) -> int:
    """``--workers``' default: ``min(4, cores)`` on more than 2 cores, else 1. On 2 cores a pool
    of 2 costs more CPU than it saves wall (the README's question: 17.0 CPU-s and 11.3 s wall
    with 2 workers, 9.5 CPU-s and 9.3 s in one process; docs/benchmarks.md)."""
    cores = (os.cpu_count() or 1) if cores is None else cores
    return min(4, cores) if cores > 2 else 1


class PlanPool:
    """The plan's one local pool of ``workers`` processes, shared by every :class:`Runner` of a
    plan (search, seeds, break-even, band). It is forked lazily, the first time a round has at
    least :data:`POOL_MIN_RUNS` runs pending (:meth:`pays`), and only after this process has
    computed a run (:meth:`Runner.run` runs one first), so the workers inherit the loaded
    kernel, the trace and the cost models instead of loading them each. Which runs go where
    never changes a result (each run is a pure function of its config)."""

    def __init__(self, workers: int) -> None:
        self.workers = int(workers)
        self._pool = None
        self.parent_runs = 0  # runs computed in this process

    def pays(self, pending: int) -> bool:
        """Whether ``pending`` runs go to the pool."""
        return self.workers > 1 and pending >= POOL_MIN_RUNS

    @property
    def started(self) -> bool:
        return self._pool is not None

    def executor(self):
        """The pool, forked now if it is not yet (fork where the platform has it)."""
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            from specbatch.analysis.sweep.executors import _init_worker

            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context,
                                             initializer=_init_worker, initargs=(os.getpid(),))
        return self._pool

    def close(self, failed: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=not failed, cancel_futures=failed)
            self._pool = None

    def __enter__(self) -> PlanPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close(failed=exc[0] is not None)


class Runner:
    """Simulates candidates into one point store, reusing stored runs, on one executor
    (the plan's :class:`PlanPool`, or one Dask client)."""

    def __init__(self, base: dict, runs_dir: Path, workers: int = 1,
                 scheduler: str | None = None, progress: bool = False,
                 early: bool = False, pool: PlanPool | None = None) -> None:
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
        self._client = self._cluster = None
        # the plan's pool when given (run_plan's), else one of this runner's own
        self._own = pool is None and scheduler is None and workers > 1
        self.pool = PlanPool(workers) if self._own else pool

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
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
        if self._own:
            self.pool.close(failed=exc[0] is not None)
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
        from specbatch.analysis.sweep.executors import _call, execute
        from specbatch.analysis.sweep.points import (
            load_point,
            request_columns,
            run_key,
            store_point,
        )
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
        fresh: dict[str, tuple[dict, Table]] = {}

        def done(key, config, summary, requests, elapsed):
            config = {k: v for k, v in config.items() if k != STOP_FIELD}
            store_point(self.store, config, summary, requests, elapsed, key)
            if key in also and "stopped_at" not in summary:  # a whole run after all
                alias_point(self.store, key, also[key])
            fresh[key] = (summary, requests)
            self.bar.update(1)

        if self._client is not None:
            execute(simulate_point, todo, done, client=self._client)
        elif self.pool is not None and self.pool.pays(len(todo)):
            first = 0 if self.pool.started or self.pool.parent_runs else 1
            for key, config in todo[:first]:  # the kernel loaded here: the workers inherit it
                done(key, config, *_call(simulate_point, config))
                self.pool.parent_runs += 1
            run_on_pool(self.pool.executor(), todo[first:], done)
        else:
            execute(simulate_point, todo, done)
            if self.pool is not None:
                self.pool.parent_runs += len(todo)
        self.runs += len(candidates)
        self.computed += len(todo)
        self.reused += len(candidates) - len(todo)
        self.bar.update(len(candidates) - len(todo))  # the reused count as settled too
        out = {}
        for c in candidates:
            if records[c] is None:
                summary, requests = fresh[keys[c]]
            else:
                summary = records[c]["summary"]
                requests = request_columns(self.store, keys[c])  # no pandas
                if requests is None:
                    requests = read_requests(self.store, keys[c])
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
    import dataclasses

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
            # the validated config with only its engine changed (checks.validate_config does
            # not read the engine; __post_init__ checks the field's choices)
            result = simulate(dataclasses.replace(cfg, engine="compiled"), **kw)
        except NotCovered:
            result = simulate(cfg, **kw)
    else:
        result = simulate(cfg, **kw)
    summary = {k: v for k, v in result.summary.items() if k not in ("policy", "verify")}
    # the request table as the run holds it (its columns, no DataFrame built: the store and
    # the judge read columns; simulator.metrics.FrameField)
    return summary, vars(type(result))["requests"].held(result)
