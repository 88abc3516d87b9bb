"""analysis.plan.cost_source: runs share a cost model only where build_cost builds the same."""

from __future__ import annotations

from specbatch.analysis.plan.cost_source import cost_key
from specbatch.simulator.config.sim_config import make_config


def test_an_ngram_run_and_its_ar_run_share_a_model_unless_async_scheduling_splits_them():
    """vLLM overlaps the host for the AR deployment but never for the CPU n-gram proposer's
    (simulator.run.async_overlaps), so with async scheduling the two need their own models."""
    base = {"trace": "synth", "draft": "ngram", "policy": "fixed", "num_speculative_tokens": 2}
    spec = make_config(base, "test")
    assert cost_key(spec) == cost_key(spec.replace(policy="ar"))
    spec = spec.replace(async_scheduling=True)
    assert cost_key(spec) != cost_key(spec.replace(policy="ar"))
    eagle = make_config({**base, "draft": "vicuna-68m", "async_scheduling": True}, "test")
    assert cost_key(eagle) == cost_key(eagle.replace(policy="ar"))  # a model drafter overlaps
