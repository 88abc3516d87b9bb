"""Acceptance models fitted from a trace (simulator.replay.fitted_acceptance), as specifications."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.field_values import ACCEPTANCE_MODELS
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.replay import fitted_acceptance as acc
from specbatch.simulator.run import simulate
from specbatch.traces.format.trace import make_trace
from tests.simulator.helpers import const_trace


def test_the_config_offers_every_model():
    assert ACCEPTANCE_MODELS == acc.ACCEPTANCE_MODELS


def test_trace_replay_is_the_trace_itself(synth_trace_natural):
    assert acc.acceptance_trace(synth_trace_natural, "trace") is synth_trace_natural


def test_per_position_rates_keep_the_mean_reach_of_every_position(synth_trace_natural):
    """Π_{l≤j} α_l telescopes to the trace's mean P(τ ≥ j): a fixed window's expected
    accepted length is the trace's; only which rows accept changes."""
    model = acc.acceptance_trace(synth_trace_natural, "per-position")
    assert np.allclose(model.accept_tv.mean(axis=0), synth_trace_natural.accept_tv.mean(axis=0))
    assert np.allclose(model.accept_tv, model.accept_tv[0])  # the same on every row


def test_the_constant_rate_is_the_iid_maximum_likelihood(synth_trace_natural):
    alpha = acc.constant_rate(synth_trace_natural)
    reach = synth_trace_natural.accept_tv
    before = np.concatenate([np.ones((reach.shape[0], 1)), reach[:, :-1]], axis=1)
    assert alpha == pytest.approx(reach.sum() / before.sum())
    model = acc.acceptance_trace(synth_trace_natural, "constant")
    assert np.allclose(np.minimum(model.pt / model.q, 1.0), alpha)
    assert acc.constant_rate(const_trace(alpha=0.25)) == pytest.approx(0.25)


@pytest.mark.parametrize("model", ["constant", "per-position"])
def test_a_model_trace_keeps_the_draft_side_and_is_a_valid_one_hot_trace(synth_trace_natural,
                                                                         model):
    t = acc.acceptance_trace(synth_trace_natural, model)
    for name in ("draft_token", "draft_conf", "entropy", "top1"):
        assert np.array_equal(getattr(t, name), getattr(synth_trace_natural, name))
    assert np.allclose(t.p, t.accept_tv, rtol=1e-12)  # one-hot draft: BV equals TV (THEORY.md §3)
    assert t.meta["acceptance"]["model"] == model
    make_trace(t.meta, t.requests(), t.columns())  # passes the reader's checks (Z window)


def test_a_greedy_trace_gets_a_model_too():
    """Rates between 0 and 1 are no greedy outcome: the model trace samples (temperature 1)
    and remembers the recorded temperature."""
    from specbatch.traces.synth import SynthConfig, synth_trace

    greedy = synth_trace(SynthConfig(requests=4, output_mean=16, prompt_mean=8, temperature=0))
    model = acc.acceptance_trace(greedy, "constant")
    assert model.temperature == 1.0 and model.meta["acceptance"]["trace_temperature"] == 0.0
    assert 0 < acc.constant_rate(greedy) < 1


def test_fillers_stay_rejected_and_out_of_the_fit():
    base = const_trace(n_requests=2, output_len=10, depth=4, alpha=0.5)
    proposed = np.tile([4, 2], 10)  # alternate rows draft 4 and 2 real tokens
    cols = base.columns()
    real = np.arange(4)[None, :] < proposed[:, None]
    cols = {**cols, "pt": np.where(real, cols["pt"], 0.0),
            "draft_conf": np.where(real, cols["draft_conf"], 0.0), "proposed": proposed}
    weights = np.cumprod(cols["pt"], axis=1)
    cols["z"] = np.concatenate([np.ones((20, 1)), weights[:, :-1]], axis=1) * (1 - cols["pt"])
    trace = make_trace(base.meta, base.requests(), cols)
    assert np.allclose(acc.position_rates(trace), 0.5)
    model = acc.acceptance_trace(trace, "per-position")
    assert np.all(model.pt[~real] == 0) and np.allclose(model.pt[real], 0.5)


def test_a_model_equal_to_the_trace_replays_the_same_run():
    """Common random numbers: where the model is the trace (every min(1, r) = α), a run under
    it is the trace-replay run, bit for bit."""
    trace = const_trace(n_requests=6, output_len=30, alpha=0.5)
    runs = [simulate(load_config(None, policy="fixed", k=3, acceptance=m), trace=trace)
            for m in ACCEPTANCE_MODELS]
    for run in runs[1:]:
        assert run.summary == runs[0].summary


def test_a_model_takes_away_the_signal_tetris_reads(synth_trace_perfect):
    """Where the draft's confidence is the truth, trace replay lets TETRIS verify the tokens
    most likely to pass; per-position rates make every row alike, and its VSR falls."""
    vsr = {m: simulate(load_config(None, policy="tetris", k=2, extra=2, acceptance=m),
                       trace=synth_trace_perfect).summary["vsr"] for m in ("trace", "per-position")}
    assert vsr["per-position"] < vsr["trace"] - 0.05
