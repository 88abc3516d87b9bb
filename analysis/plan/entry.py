"""What one simulated candidate of the planner's search is judged to be (analysis.plan.search).

An :class:`Entry` holds a run's verdict against the SLOs (analysis.plan.slo.judge), its memory
plan and summary; a :class:`Skipped` candidate was not simulated whole: a lower bound proved it
fails or cannot matter, or its early stop ended it once it could not beat the frontier.
:func:`judge_entry` turns one run's summary and per-request table into either.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from specbatch.analysis.plan.slo import (
    Slos,
    StopRule,
    Verdict,
    column,
    judge,
    judge_stopped,
    memory_plan,
)
from specbatch.analysis.plan.space import Deployment, Speculation

if TYPE_CHECKING:
    from specbatch.simulator.metrics import Table


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


def judge_entry(d: Deployment, s: Speculation, config: dict, summary: dict,
                requests: Table, slos: Slos, rule: StopRule | None = None
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
        mask = column(requests, "arrival") <= summary["stopped_at"]  # [N]
        arrived = {c: column(requests, c)[mask] for c in requests}  # [arrived] each
        arrived["finish"] = np.where(np.isnan(arrived["finish"]), np.inf, arrived["finish"])
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


#: The run config fields :func:`_memory_constants` reads (with the deployment's hardware).
MEMORY_FIELDS = ("target", "draft", "quantization", "kv_cache_dtype", "kv_mode", "block_size",
                 "hardware", "scheduler", "disable_hybrid_kv_cache_manager")


def _memory_constants(d: Deployment, config: dict) -> tuple:
    """:func:`memory_constants` of the fields it reads, once per process for each (a plan
    judges hundreds of runs on a few deployments)."""
    return memory_constants(d.hardware, tuple((k, config[k]) for k in MEMORY_FIELDS
                                              if k in config))


@functools.lru_cache(maxsize=256)
def memory_constants(hardware: str, fields: tuple) -> tuple:
    """(weights of target + draft in GB per replica, KV bytes per cached token), the target's
    weights in the run's ``quantization`` and the KV at its ``kv_cache_dtype``
    (simulator.cost.analytic.precision); for a sliding-window model under vLLM's hybrid KV cache
    manager also its KV cache groups and block size (:func:`_hybrid_constants`)."""
    from specbatch.simulator.cost.analytic.memory import quantized_weights
    from specbatch.simulator.cost.analytic.precision import kv_element_bytes
    from specbatch.simulator.cost.gpus.hardware import get_hardware, weight_bytes
    from specbatch.traces.models.shapes import find_shape

    config = dict(fields)
    target, draft = config["target"], config["draft"]
    hw = get_hardware(hardware)
    shapes = [s for s in (find_shape(target), find_shape(draft)) if s is not None]
    quantized = quantized_weights(hw, target, draft, 16, config.get("quantization", "none"))
    kv_b = kv_element_bytes(config.get("kv_cache_dtype", "auto"), hw)
    weights = (weight_bytes(hw, (target, draft)) if quantized is None else quantized[0]) / 1e9
    hybrid = _hybrid_constants(config, kv_b)
    if hybrid is not None:
        return (weights, *hybrid)
    return weights, sum(s.kv_bytes_per_token(kv_b) for s in shapes)


def _hybrid_constants(config: dict, kv_b: int) -> tuple | None:
    """(bytes of one pool token, KV cache groups, block size) of a paged sliding-window run
    under vLLM's hybrid KV cache manager (simulator.engine.kv.hybrid_layout), else None."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.engine.kv import hybrid_layout

    keys = ("target", "draft", "kv_mode", "block_size", "hardware", "kv_cache_dtype",
            "scheduler", "disable_hybrid_kv_cache_manager")
    layout = hybrid_layout(make_config({k: config[k] for k in keys if k in config}))
    if layout is None:
        return None
    bs = int(config.get("block_size", 16))
    return layout.block_bytes // bs, layout, bs


def rank(e: Entry) -> tuple:
    """Cheapest first; then fewest GPUs, lowest e2e at the percentile, simplest setting."""
    return (e.deployment.cost, e.deployment.gpus, e.verdict.latency["e2e"], e.speculation.label)


def choose(entries: tuple[Entry, ...]) -> Entry | None:
    """The cheapest entry meeting every limit (ties: :func:`rank`), or None."""
    passed = [e for e in entries if e.verdict.passed]
    return min(passed, key=rank) if passed else None


def pareto(entries: tuple[Entry, ...]) -> list[Entry]:
    """Passing entries no other passing entry beats on both cost and e2e at the
    percentile: the cost-latency frontier, cheapest first."""
    frontier: list[Entry] = []
    for e in sorted((e for e in entries if e.verdict.passed), key=rank):
        if not frontier or e.verdict.latency["e2e"] < frontier[-1].verdict.latency["e2e"]:
            frontier.append(e)
    return frontier
