"""Which cost model and sources priced a plan: the ``cost_source`` entry of plan.json."""

from __future__ import annotations


def plan_sources(base: dict, report: dict, hardware: tuple[str, ...]) -> dict:
    """The cost model (``base["cost"]``, default roofline) and, for the chosen deployment
    (else the first hardware at tp 1), which source priced the target's and the draft's
    passes with its validated error (simulator.cost.report)."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.cost.report import cost_sources
    from specbatch.simulator.run import build_cost

    choice = report.get("choice") or {"hardware": hardware[0], "tp": 1}
    config = make_config({**base, "hardware": choice["hardware"], "tp": choice["tp"]})
    return {"cost": config.cost, "hardware": choice["hardware"], "tp": choice["tp"],
            **cost_sources(build_cost(config))}
