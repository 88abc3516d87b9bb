"""The planner's search: simulate the cost levels of a space, cheapest first, on the sweep
machinery, and judge every run.

Each cost level (analysis.plan_space.cost_levels) is one sweep
(:func:`analysis.sweep.run_sweep`: resumable, progress bar, local pool or Dask) over its
deployments x speculation settings, stored under ``RUNS/level-<i>-<id>`` where ``id`` hashes
what the level runs, so a rerun of the same question reuses every stored run. The search
stops once ``levels_after`` levels beyond the first level where some configuration meets
every limit (analysis.plan_slo) have had a configuration meet them too, so the report can
show runner-up configurations above the choice without simulating the whole space.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbatch.analysis.plan_slo import Slos, Verdict, judge, memory_plan
from specbatch.analysis.plan_space import Deployment, Space, Speculation, cost_levels, speculations


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


@dataclass(frozen=True)
class Search:
    """Every judged entry, in cost order, and the sweep counts."""

    entries: tuple[Entry, ...]
    levels: int  # cost levels simulated
    runs: int
    computed: int
    reused: int


def level_spec(base: dict, level: list[Deployment], settings: list[Speculation], seed: int,
               index: int, runs_dir: Path):
    """The sweep spec of one cost level and its directory (named by what it runs)."""
    from specbatch.analysis.points import plain
    from specbatch.analysis.spec import SweepSpec

    grids = tuple({name: (value,) for name, value in {**d.fields(), **s.fields()}.items()}
                  for d in level for s in settings)
    ident = hashlib.sha256(json.dumps(plain({"base": base, "grids": grids, "seed": seed}),
                                      sort_keys=True).encode()).hexdigest()[:10]
    name = f"plan-level-{index}-{ident}"
    spec = SweepSpec(path=f"plan {runs_dir}", name=name, base=dict(base), grids=grids,
                     seeds=(int(seed),), store_requests=True)
    return spec, runs_dir / name


def search(base: dict, space: Space, deployments: list[Deployment], slos: Slos,
           runs_dir: Path, levels_after: int = 1, **executor: Any) -> Search:
    """Simulate ``deployments`` (already pruned) level by level (module docstring).

    base: SimConfig fields every run shares (seed included). executor: ``workers``,
    ``scheduler``, ``progress`` of :func:`analysis.sweep.run_sweep`.
    """
    from specbatch.analysis.sweep import run_sweep

    settings = speculations(space)
    seed = int(base.get("seed", 0))
    common = {k: v for k, v in base.items() if k != "seed"}
    entries: list[Entry] = []
    passing, levels, counts = 0, 0, [0, 0, 0]
    for index, (_, level) in enumerate(cost_levels(deployments)):
        if passing > levels_after:
            break
        spec, out = level_spec(common, level, settings, seed, index, runs_dir)
        outcome = run_sweep(spec, out, **executor)
        levels += 1
        counts = [counts[0] + outcome.total, counts[1] + outcome.computed,
                  counts[2] + outcome.reused]
        judged = judge_level(out, outcome.table, level, settings, slos)
        entries += judged
        passing += any(e.verdict.passed for e in judged)
    return Search(tuple(entries), levels, *counts)


def _match_key(config: dict) -> tuple:
    return (config["hardware"], int(config["tp"]), int(config["replicas"]), config["policy"],
            int(config["extra"]), config["verify"])


def judge_level(out: Path, table, level: list[Deployment], settings: list[Speculation],
                slos: Slos) -> list[Entry]:
    """An :class:`Entry` per run of a level's results table, in the level's order."""
    from specbatch.analysis.sweep import read_requests

    rows = {}
    for row in table.to_dict("records"):
        k = row["num_speculative_tokens"] if row["policy"] in ("fixed", "tetris") else None
        rows[_match_key(row) + (k,)] = row
    entries = []
    for d in level:
        for s in settings:
            row = rows[(d.hardware, d.tp, d.replicas, s.policy, s.extra, s.verify, s.k)]
            requests = read_requests(out, row["run"])
            config = {k: row[k] for k in config_fields()}
            summary = {k: row.get(f"{k}_result", row.get(k)) for k in SUMMARY_KEYS}
            verdict = judge(requests, int(summary["preemptions"]), slos)
            memory = memory_plan(requests, summary, int(config["max_num_seqs"]), _depth(config),
                                 *_memory_constants(d, config["target"], config["draft"]))
            entries.append(Entry(d, s, verdict, memory, summary, config))
    return entries


#: Summary metrics an entry keeps (simulator.metrics; ``kv_capacity`` = tokens per replica).
SUMMARY_KEYS = ("throughput", "e2e_p50", "e2e_p99", "ttft_mean", "tpot_mean", "mal", "vsr",
                "preemptions", "recomputed_tokens", "kv_capacity", "requests", "makespan")


def config_fields() -> tuple[str, ...]:
    """The SimConfig field names (a results row holds them, then the summary's)."""
    import dataclasses

    from specbatch.simulator.config import SimConfig

    return tuple(f.name for f in dataclasses.fields(SimConfig))


def _depth(row: dict) -> int:
    """Draft tokens per request and step the run's policy may ask (its KV lookahead)."""
    from specbatch.simulator.config import make_config, policy_depth

    fields = {k: row[k] for k in ("policy", "num_speculative_tokens", "extra")}
    return policy_depth(make_config(fields))


def _memory_constants(d: Deployment, target: str, draft: str) -> tuple[float, int]:
    """(weights of target + draft in GB per replica, KV bytes per cached token)."""
    from specbatch.simulator.hardware import get_hardware, weight_bytes
    from specbatch.traces.shapes import find_shape

    hw = get_hardware(d.hardware)
    shapes = [s for s in (find_shape(target), find_shape(draft)) if s is not None]
    return (weight_bytes(hw, (target, draft)) / 1e9,
            sum(s.kv_bytes_per_token(hw.dtype_bytes) for s in shapes))
