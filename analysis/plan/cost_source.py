"""Which cost model and sources priced a plan: the ``cost_source`` entry of plan.json."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel


def plan_sources(base: dict, report: dict, hardware: tuple[str, ...]) -> dict:
    """The cost model (``base["cost"]``, default roofline) and, for the chosen deployment
    (else the first hardware at tp 1), which source priced the target's and the draft's
    passes with its validated error (simulator.cost.report)."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.cost.registry import run_cost
    from specbatch.simulator.cost.report import cost_sources
    from specbatch.simulator.run import build_cost

    choice = report.get("choice") or {"hardware": hardware[0], "tp": 1}
    config = make_config({**base, "hardware": choice["hardware"], "tp": choice["tp"]})
    return {"cost": run_cost(config).to_dict(), "hardware": choice["hardware"],
            "tp": choice["tp"], **cost_sources(build_cost(config))}


#: Cost models a planner process has built: every run (and bound) of one deployment in a
#: process prices its passes with one instance, so the tables a model fills lazily (the
#: calibrated pricer's monotone envelopes and per-Q memo) are built once per deployment and
#: process (the search keeps one pool of workers: analysis.plan.runner.Runner).
_COSTS: dict[tuple, object] = {}


#: SimConfig fields the planner varies within a deployment that no cost model reads (the
#: speculation setting, the data-parallel copies, and the seeds and acceptance profiles of
#: analysis.plan.seeds and analysis.plan.breakeven; simulator.run.build_cost reads none of
#: them): runs differing only in them share one.
NOT_COST_FIELDS = ("policy", "num_speculative_tokens", "extra", "verify", "replicas", "seed",
                   "acceptance_profile")


def cost_key(config: SimConfig) -> str:
    """Every SimConfig field but :data:`NOT_COST_FIELDS` (so a field simulator.run.build_cost
    reads, today's or a later one, can never be shared across)."""
    import dataclasses
    import json

    from specbatch.simulator.run import async_overlaps

    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
              if f.name not in NOT_COST_FIELDS}  # flat values: no asdict deep copy
    fields["async_scheduling"] = async_overlaps(config)  # the policy decides it for n-gram
    return json.dumps(fields, sort_keys=True, default=str)


def shared_cost(config: SimConfig) -> CostModel:
    """``build_cost(config)``, built once per :func:`cost_key` in this process and warmed
    (:func:`warm`). A model's lazy tables only cache what it computes (the same numbers
    whoever asks first), so a run priced by the shared model is bit-identical to one that
    builds its own (tests/analysis/plan/test_search.py)."""
    from specbatch.simulator.run import build_cost

    key = cost_key(config)
    if key not in _COSTS:
        if len(_COSTS) >= 64:
            _COSTS.pop(next(iter(_COSTS)))
        _COSTS[key] = warm(build_cost(config))
    return _COSTS[key]


def warm(cost):
    """Fill a calibrated model's per-role envelopes (the running maxima of the laws over the
    correction grid, simulator.cost.measured.calibrated_role.RolePricer.monotone) by pricing one
    token."""
    for role in (getattr(cost, "roles", None) or {}).values():
        if hasattr(role, "per_token_parts"):
            role.per_token_parts(1.0)
    return cost
