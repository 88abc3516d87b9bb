"""Per-request early stopping on hand-computed rows: SpecDec++'s rejection-probability
threshold on calibrated confidence, and the entropy rules (AdaEDL, SVIP)."""

from __future__ import annotations

import numpy as np

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.policies.step_plan import plan_step
from specbatch.simulator.policies.view import StepView, make_view
from specbatch.simulator.run import simulate
from specbatch.traces.format.trace import make_trace
from tests.simulator.helpers import LinearCost, const_trace


def specdec(h: float, depth: int = 6):
    config = load_config(None, policy="specdec++", k=depth, specdec_threshold=h,
                         calibration_split=0.5)
    return make_policy(config, depth)


def test_specdec_stops_once_a_rejection_is_likely_and_keeps_that_token():
    """Constant α = 0.8: one confidence bin, calibrated acceptance 0.8, P(no rejection through
    i) = 0.8^i = 0.8, 0.64, 0.512, 0.41. h = 0.5: first i with 1 − 0.8^i > 0.5 is 4 -> 4 tokens;
    h = 0.3: first is 2 -> 2 tokens; h = 0.9: never within depth 6 -> 6."""
    trace = const_trace(alpha=0.8, depth=6)
    rows = np.arange(5)
    for h, kept in ((0.5, 4), (0.3, 2), (0.9, 6)):
        policy = specdec(h)
        policy.calibrate(trace)
        np.testing.assert_allclose(policy.rate, 0.8)
        drafted, verified = policy.decide(make_view(trace, rows, 0, 6))
        assert drafted.tolist() == verified.tolist() == [kept] * 5, h


def test_specdec_reads_calibrated_acceptance_not_raw_confidence():
    """The draft is overconfident: confidence 0.9, acceptance min(1, r) = 0.5. On raw
    confidence h = 0.3 would keep 4 tokens (1 − 0.9^4 = 0.34 is the first > 0.3); calibrated,
    1 − 0.5 > 0.3 already at token 1."""
    base = const_trace(alpha=0.5, depth=6)
    cols = base.columns() | {"draft_conf": np.full((base.n_rows, 6), 0.9)}
    overconfident = make_trace(dict(base.meta), base.requests(), cols)
    policy = specdec(0.3)
    policy.calibrate(overconfident)
    np.testing.assert_allclose(policy.rate, 0.5)
    verified = policy.decide(make_view(overconfident, np.arange(3), 0, 6))[1]
    assert verified.tolist() == [1, 1, 1]


def test_entropy_stop_drafts_until_the_entropy_bound_fails():
    """θ = 2.5 nats: rows keep 2, 0, 4 tokens; the pass that saw H > θ ran (drafted 3, 1)."""
    entropy = np.array([[1.0, 2.5, 3.0, 0.1], [5.0, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1]])
    policy = make_policy(load_config(None, policy="entropy-stop", k=4, entropy_threshold=2.5), 4)
    view = StepView.from_signals(np.zeros(3, dtype=np.int64), 0, 4, entropy=entropy)
    drafted, verified = plan_step(policy, view, check=True)[:2]
    assert verified.tolist() == [2, 0, 4] and drafted.tolist() == [3, 1, 4]


def test_entropy_stop_runs_in_the_engine():
    trace = const_trace(n_requests=4, depth=4)  # const_trace entropy: 0 everywhere
    config = load_config(None, trace="synth", policy="entropy-stop", k=4, requests=4)
    result = simulate(config, trace, cost_model=LinearCost(), reference=True)
    decode = result.steps[result.steps["batch"] > 0]
    assert (decode["verified"] == 4 * decode["batch"]).all()  # entropy 0 never stops
