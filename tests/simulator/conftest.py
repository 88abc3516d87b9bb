"""Simulator test fixtures: synthetic traces shared per session (built once)."""

from __future__ import annotations

import pytest

from specbatch.simulator.cost import build_cost_model
from specbatch.traces.synth import SynthConfig, synth_trace


@pytest.fixture(scope="module")
def h100():
    """The roofline H100 model of the demo's pair (Vicuna-33B target, 68M draft)."""
    return build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m")


@pytest.fixture(scope="session")
def synth_trace_natural():
    """Temperature-1 trace, natural surrogate, K = 8."""
    return synth_trace(SynthConfig(requests=32, output_mean=48, prompt_mean=32, seed=3))


@pytest.fixture(scope="session")
def synth_trace_perfect():
    """Temperature-1 trace whose draft_conf equals min(1, r): TETRIS's surrogate is the truth."""
    return synth_trace(SynthConfig(requests=32, output_mean=48, prompt_mean=32,
                                   surrogate="perfect", seed=4))
