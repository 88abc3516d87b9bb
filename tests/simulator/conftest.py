"""Simulator test fixtures: synthetic traces shared per session (built once)."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.cost.registry import build_cost_model
from specbatch.traces.synth import SynthConfig, synth_trace
from tests.simulator.helpers import signal_trace


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


@pytest.fixture(scope="session")
def entropy_trace():
    """Acceptance driven by the draft's entropy, not by its confidence of the drafted token
    (which is noise): a confidence-only estimate cannot rank it, a fitted model can."""
    rng = np.random.default_rng(0)
    rows, depth = 1600, 4
    entropy = rng.uniform(0.0, 3.0, (rows, depth))
    conf = rng.uniform(0.05, 1.0, (rows, depth))
    accept = 1.0 / (1.0 + np.exp(2.0 * (entropy - 1.5)))
    return signal_trace(accept, conf, entropy, np.maximum(conf, 0.5), n_requests=40)
