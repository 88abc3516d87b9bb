"""A trace's pooled TV law as a profile."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.traces.acceptance.from_trace import profile_from_trace
from specbatch.traces.acceptance.profile import mean_accepted_length
from specbatch.traces.synth import SynthConfig, synth_trace


def test_constant_alpha_trace_gives_alpha_everywhere():
    trace = synth_trace(SynthConfig(requests=8, depth=4, constant_alpha=0.7, output_mean=32))
    p = profile_from_trace(trace)
    assert p.rates == pytest.approx((0.7,) * 4, abs=1e-9)
    assert sum(p.histogram) == pytest.approx(1.0)
    assert p.provenance["source"] == "trace"


def test_mal_is_the_rows_mean_of_tv_survival():
    trace = synth_trace(SynthConfig(requests=8, depth=5, output_mean=32, seed=3))
    p = profile_from_trace(trace)
    for k in range(6):
        want = 1 + trace.accept_tv[:, :k].sum(axis=1).mean() if k else 1.0
        assert mean_accepted_length(p, k) == pytest.approx(float(np.asarray(want)), abs=1e-9)
