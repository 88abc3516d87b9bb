"""analysis.plan.cost_source: runs share a cost model only where build_cost builds the same."""

from __future__ import annotations

from specbatch.analysis.plan.cost_source import cost_key
from specbatch.simulator.config.sim_config import make_config


def test_an_ngram_run_and_its_ar_run_share_a_model_unless_async_scheduling_splits_them():
    """vLLM overlaps the host for the AR deployment but never for the CPU n-gram proposer's
    (simulator.run.async_overlaps), so with async scheduling (asked, or vLLM's default) the
    two need their own models; synchronous, they share one. The key holds the resolved
    setting: auto and true that resolve alike share a model."""
    base = {"trace": "synth", "draft": "ngram", "policy": "fixed", "num_speculative_tokens": 2}
    spec = make_config({**base, "async_scheduling": False}, "test")
    assert cost_key(spec) == cost_key(spec.replace(policy="ar"))
    for asked in (True, "auto"):
        spec = spec.replace(async_scheduling=asked)
        assert cost_key(spec) != cost_key(spec.replace(policy="ar"))
        eagle = make_config({**base, "draft": "vicuna-68m", "async_scheduling": asked}, "test")
        assert cost_key(eagle) == cost_key(eagle.replace(policy="ar"))  # a model drafter overlaps
    auto = make_config({**base, "draft": "vicuna-68m"}, "test")
    assert cost_key(auto) == cost_key(auto.replace(async_scheduling=True))


def test_the_fields_left_out_of_the_key_are_never_read_by_build_cost():
    """Seeds and break-even profiles share a deployment's model: build_cost never reads the
    seed or the acceptance profile (every attribute it asks of the config is recorded; the
    policy it reads for async scheduling is in the key as ``async_scheduling``)."""
    from specbatch.analysis.plan.cost_source import NOT_COST_FIELDS
    from specbatch.simulator.run import build_cost

    assert {"seed", "acceptance_profile"} <= set(NOT_COST_FIELDS)
    class Recording:
        def __init__(self, config):
            self._config, self.read = config, set()

        def __getattr__(self, name):
            self.read.add(name)
            return getattr(self._config, name)

    for cost in ("calibrated", "roofline"):
        config = Recording(make_config({"cost": cost, "target": "vicuna-33b",
                                        "draft": "vicuna-68m", "tp": 2, "seed": 3}))
        build_cost(config)
        assert "cost" in config.read and not config.read & {"seed", "acceptance_profile"}


def test_the_cost_key_is_the_asdict_key_of_the_cost_fields():
    """SimConfig's fields are flat scalars, so reading them is dataclasses.asdict's copy."""
    import dataclasses
    import json

    from specbatch.analysis.plan.cost_source import NOT_COST_FIELDS, cost_key
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import async_overlaps

    config = make_config({"target": "vicuna-33b", "draft": "vicuna-68m", "hardware": "h100",
                          "tp": 2, "cost": "aic", "seed": 3})
    want = {k: v for k, v in dataclasses.asdict(config).items() if k not in NOT_COST_FIELDS}
    want["async_scheduling"] = async_overlaps(config)
    assert cost_key(config) == json.dumps(want, sort_keys=True, default=str)
