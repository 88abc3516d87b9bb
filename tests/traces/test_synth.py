"""traces/synth.py: synthetic traces are valid, seeded, and satisfy THEORY.md §3 identities."""

from __future__ import annotations

import numpy as np
import pytest

from theory.errors import SpecbatchError
from theory.stats import token_weights
from traces.format import read_trace, write_trace
from traces.synth import SynthConfig, synth_trace


def test_synth_is_valid_and_round_trips(tmp_path):
    trace = synth_trace(SynthConfig(requests=8, depth=5, output_mean=20, seed=1))
    write_trace(trace, tmp_path / "s")
    loaded = read_trace(tmp_path / "s")
    for name, arr in trace.columns().items():
        assert np.array_equal(arr, getattr(loaded, name)), name
    assert trace.K == 5 and trace.n_requests == 8


def test_synth_is_deterministic_for_a_seed():
    a = synth_trace(SynthConfig(requests=5, output_mean=10, seed=7))
    b = synth_trace(SynthConfig(requests=5, output_mean=10, seed=7))
    c = synth_trace(SynthConfig(requests=5, output_mean=10, seed=8))
    for name, arr in a.columns().items():
        assert np.array_equal(arr, getattr(b, name)), name
    assert not np.array_equal(a.q, c.q) or not np.array_equal(a.output_len, c.output_len)


def test_perfect_surrogate_cumprod_equals_tv_acceptance():
    trace = synth_trace(SynthConfig(requests=6, output_mean=20, surrogate="perfect"))
    assert np.array_equal(np.cumprod(trace.draft_conf, axis=1), token_weights(trace.q, trace.pt))


def test_constant_alpha_mode_gives_exact_acceptance():
    trace = synth_trace(SynthConfig(requests=6, output_mean=20, constant_alpha=0.6))
    assert np.all(np.minimum(trace.pt / trace.q, 1.0) == 0.6)


def test_bad_knob_is_one_line_error():
    with pytest.raises(SpecbatchError, match="surrogate"):
        synth_trace(SynthConfig(surrogate="oracle"))
