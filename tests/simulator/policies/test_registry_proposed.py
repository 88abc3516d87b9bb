"""Policies on a trace with a ``proposed`` column (n-gram drafts): every policy drafts and
verifies at most the proposed count, and the capped run accepts exactly what the uncapped run
over the trace's lossless fillers accepts (same coins), verifying fewer tokens."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.policies.step_plan import plan_step
from specbatch.simulator.policies.view import StepView, make_view
from specbatch.simulator.run import simulate
from specbatch.traces.format.trace import default_meta, make_trace
from tests.simulator.helpers import CHAIN_POLICIES, LinearCost, calibrated, policy_settings

DEPTH = 4


def ngram_trace(proposed: np.ndarray, pt_real, with_column: bool = True):
    """A hand-made one-hot trace: ``proposed`` # [rows] real tokens of probability ``pt_real``
    (a scalar or # [rows, K]), then fillers (q = 1, pt = 0, signals 0). 4 requests."""
    rows = proposed.shape[0]
    real = np.arange(DEPTH)[None, :] < proposed[:, None]
    pt = np.where(real, np.broadcast_to(pt_real, (rows, DEPTH)), 0.0)
    p_prev = np.concatenate([np.ones((rows, 1)), np.cumprod(pt, axis=1)[:, :-1]], axis=1)
    cols = {"draft_token": np.where(real, 7, 99).astype(np.int32), "q": np.ones((rows, DEPTH)),
            "pt": pt, "z": p_prev * (1 - pt), "draft_conf": real * 1.0,
            "entropy": np.zeros((rows, DEPTH)), "top1": real * 1.0}
    if with_column:
        cols["proposed"] = proposed
    n = 4
    req = {"request_id": np.arange(n), "prompt_len": np.full(n, 5),
           "output_len": np.full(n, rows // n),
           "category": np.array(["code"] * n, dtype=object)}
    return make_trace(default_meta(1.0, DEPTH), req, cols)


PROPOSED = np.tile(np.array([0, 1, 4, 2, 3, 0, 4, 4, 1, 0]), 4)  # 4 requests x 10 positions


def test_fixed_k_verifies_min_k_and_proposed_in_a_view():
    trace = ngram_trace(PROPOSED, 1.0)
    for k in (1, 3, 4):
        fixed = make_policy(load_config(None, trace="synth", policy="fixed", k=k), DEPTH)
        rows = np.arange(10)
        drafted, verified, _, _ = plan_step(fixed, make_view(trace, rows, k * 10, k))
        np.testing.assert_array_equal(verified, np.minimum(k, PROPOSED[:10]))
        np.testing.assert_array_equal(drafted, verified)
    plain = ngram_trace(PROPOSED, 1.0, with_column=False)
    fixed = make_policy(load_config(None, trace="synth", policy="fixed", k=3), DEPTH)
    assert (plan_step(fixed, make_view(plain, np.arange(10), 30, 3)).verified == 3).all()


@pytest.mark.parametrize("name", CHAIN_POLICIES)
def test_every_policy_stays_within_the_proposed_count(name):
    trace = ngram_trace(PROPOSED, 0.6)
    config = load_config(None, trace="synth", policy=name, k=2, extra=2, **policy_settings(name))
    policy = calibrated(make_policy(config, DEPTH), trace)
    rows = np.arange(trace.n_rows)
    view = make_view(trace, rows, 2 * rows.size, policy.depth, cost=LinearCost())
    plan = plan_step(policy, view, check=True)
    drafted, verified = plan.drafted, plan.verified
    assert plan.draft_passes() == plan.draft_passes(int(drafted.sum())) == drafted.max()
    assert (drafted <= PROPOSED).all() and (verified <= PROPOSED).all()
    assert (verified <= drafted).all()


@pytest.mark.parametrize("verify", ["token", "block"])
def test_capped_run_accepts_what_the_fillers_accept_with_less_verification(verify):
    rng = np.random.default_rng(0)
    pt = rng.uniform(0.3, 1.0, size=(PROPOSED.shape[0], DEPTH))
    capped, filler = ngram_trace(PROPOSED, pt), ngram_trace(PROPOSED, pt, with_column=False)
    config = load_config(None, trace="synth", policy="fixed", k=4, verify=verify, requests=4)
    a = simulate(config, capped, cost_model=LinearCost()).requests
    b = simulate(config, filler, cost_model=LinearCost()).requests
    for col in ("steps", "accepted", "tokens"):
        np.testing.assert_array_equal(a[col].to_numpy(), b[col].to_numpy(), err_msg=col)
    assert a["verified"].sum() < b["verified"].sum()
    # with every proposed token certain (pt = 1), each step accepts all it verifies
    sure = simulate(config, ngram_trace(PROPOSED, 1.0), cost_model=LinearCost()).summary
    assert sure["vsr"] == 1.0


def test_an_array_view_given_proposed_counts_caps_like_a_trace_view():
    """The live loop's own draft: StepView.from_signals(proposed=...) caps every plan as
    the trace's column does; without it nothing is capped."""
    policy = make_policy(load_config(None, trace="synth", policy="fixed", k=3), 4)
    kv = np.array([10, 20, 30])
    capped = StepView.from_signals(kv, 9, 4, proposed=np.array([0, 2, 4]))
    assert capped.proposed.tolist() == [0, 2, 4]
    assert plan_step(policy, capped).verified.tolist() == [0, 2, 3]
    plain = StepView.from_signals(kv, 9, 4)
    assert plain.proposed is None and plan_step(policy, plain).verified.tolist() == [3, 3, 3]
