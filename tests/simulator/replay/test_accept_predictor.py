"""The learned acceptance predictor (simulator.replay.accept_predictor) and TETRIS allocating by
it."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.field_values import PREDICTORS
from specbatch.simulator.policies.calibration import split_trace
from specbatch.simulator.replay import accept_predictor as pred
from specbatch.traces.format.describe import weighted_auc
from tests.simulator.helpers import signal_trace


def test_the_config_offers_every_predictor():
    assert PREDICTORS == pred.PREDICTORS


def test_features_are_row_wise(entropy_trace):
    """A table built once for the whole trace and gathered per step (StepView.row_table)
    equals the features of the gathered rows."""
    t = entropy_trace
    rows = np.array([5, 0, 77, 5])
    whole = pred.token_features(t.draft_conf, t.entropy, t.top1).reshape(t.n_rows, t.K, -1)
    part = pred.token_features(t.draft_conf[rows], t.entropy[rows], t.top1[rows])
    assert np.array_equal(whole[rows].reshape(part.shape), part)
    assert part.shape[1] == len(pred.FEATURES)


@pytest.mark.parametrize("kind", pred.LEARNED)
def test_a_fitted_model_ranks_what_confidence_cannot(entropy_trace, kind):
    calibration, held_out, _ = split_trace(entropy_trace, 0.5, seed=0)
    model = pred.fit_predictor(calibration, kind)
    token = model.token_probs(held_out.draft_conf, held_out.entropy, held_out.top1)
    a = pred.token_acceptance(held_out.q, held_out.pt)
    assert weighted_auc(token.ravel(), a.ravel()) > 0.75
    assert abs(weighted_auc(held_out.draft_conf.ravel(), a.ravel()) - 0.5) < 0.05
    assert abs(token.mean() - a.mean()) < 0.05  # calibrated on average, out of sample
    reach = model.reach(held_out.draft_conf, held_out.entropy, held_out.top1)
    assert np.all(np.diff(reach, axis=1) <= 0) and np.all((reach >= 0) & (reach <= 1))


def test_a_fit_is_deterministic_and_cached(entropy_trace):
    calibration, held_out, _ = split_trace(entropy_trace, 0.5, seed=0)
    first = pred.fit_predictor(calibration, "learned")
    assert pred.fit_predictor(calibration, "learned") is first
    pred._CACHE.clear()
    again = pred.fit_predictor(calibration, "learned")
    signals = (held_out.draft_conf, held_out.entropy, held_out.top1)
    assert again is not first and again.key == first.key
    assert np.array_equal(again.token_probs(*signals), first.token_probs(*signals))


def test_nothing_to_learn_is_one_line():
    accept = np.ones((40, 2))
    trace = signal_trace(accept, np.full((40, 2), 0.5), np.ones((40, 2)), np.full((40, 2), 0.5),
                         n_requests=4)
    with pytest.raises(SpecbatchError, match="no rejected draft token"):
        pred.fit_predictor(trace, "learned")


def test_tetris_verifies_what_the_fitted_model_ranks_higher(entropy_trace):
    """Same budget, same requests, same coins: allocating by a model that sees what drives
    acceptance verifies tokens that are accepted more often than the confidence surrogate's."""
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.run import simulate

    vsr = {p: simulate(load_config(None, policy="tetris", k=1, extra=3, calibration_split=0.5,
                                   predictor=p, max_num_seqs=16), trace=entropy_trace
                       ).summary["vsr"] for p in ("confidence", "logistic")}
    assert vsr["logistic"] > vsr["confidence"] + 0.05


def test_a_filler_is_predicted_rejected(entropy_trace):
    """n-gram fillers carry draft signals 0 (no drafted token): never worth a budget slot."""
    calibration, held_out, _ = split_trace(entropy_trace, 0.5, seed=0)
    model = pred.fit_predictor(calibration, "logistic")
    conf = held_out.draft_conf[:3].copy()
    conf[:, 2:] = 0.0
    token = model.token_probs(conf, np.where(conf > 0, held_out.entropy[:3], 0.0),
                              np.where(conf > 0, held_out.top1[:3], 0.0))
    assert np.all(token[:, 2:] == 0) and np.all(token[:, :2] > 0)
