"""Runs that fit TETRIS's learned predictor on the calibration split, as specifications."""

from __future__ import annotations

import numpy as np

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.run import simulate


def test_every_policy_of_a_calibrated_run_replays_the_same_requests(entropy_trace):
    runs = [simulate(load_config(None, policy=p, k=2, extra=e, calibration_split=0.5, seed=1,
                                 **kw), trace=entropy_trace)
            for p, e, kw in (("fixed", 0, {}), ("tetris", 1, {}),
                             ("tetris", 1, {"predictor": "learned"}))]
    for run in runs[1:]:
        assert np.array_equal(run.requests.trace_index, runs[0].requests.trace_index)
        assert np.array_equal(run.requests.prompt_len, runs[0].requests.prompt_len)
        assert run.requests.tokens.sum() == runs[0].requests.tokens.sum()


def test_a_learned_tetris_run_is_reproducible(entropy_trace):
    config = load_config(None, policy="tetris", k=2, extra=2, calibration_split=0.5,
                         predictor="logistic", max_num_seqs=8)
    first, again = simulate(config, trace=entropy_trace), simulate(config, trace=entropy_trace)
    assert first.summary == again.summary
    assert first.summary["vsr"] > 0


def test_a_learned_predictor_without_a_split_fits_on_the_default_share(entropy_trace):
    """It used to fail until calibration_split was given: the default split (0.25) is
    applied, and the run is the one with that split given."""
    from specbatch.simulator.policies.knobs import DEFAULT_CALIBRATION_SPLIT, applied_split

    config = load_config(None, policy="tetris", predictor="learned", k=2, requests=30)
    assert config.calibration_split == 0.0 and applied_split(config) == DEFAULT_CALIBRATION_SPLIT
    default = simulate(config, trace=entropy_trace)
    chosen = simulate(config.replace(calibration_split=0.25), trace=entropy_trace)
    assert default.requests.equals(chosen.requests)
    assert default.summary["held_out_requests"] == round(0.25 * entropy_trace.n_requests)
    assert applied_split(load_config(None, policy="tetris")) == 0.0  # confidence: no split


def test_a_confidence_tetris_needs_no_split(entropy_trace):
    """Only a fitted predictor calibrates: the official surrogate runs without a split."""
    run = simulate(load_config(None, policy="tetris", k=2, extra=1, requests=40),
                   trace=entropy_trace)
    assert run.summary["requests"] == 40 and run.summary["vsr"] > 0
