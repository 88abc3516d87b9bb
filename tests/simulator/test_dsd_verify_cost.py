"""Specification: ``dsd`` plans with the rejection sampler's seconds the engine charges.

The goodput scan prices a step as T_draft(k) + T_target(k) + T_verify(k) + T_overhead, with
T_verify the run's :class:`~simulator.cost.verify_cost.VerifyCost` (handed over before the run by
:func:`~simulator.run.attach_verify_cost`); ``verify_cost = "none"`` plans exactly as
before the term existed.
"""

from __future__ import annotations

import numpy as np
import pytest

import specbatch.simulator.run as run_module
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.verify_cost import VerifyCost, verify_cost_for
from specbatch.simulator.policies.registry import DynamicSD, make_policy
from specbatch.simulator.run import attach_verify_cost, simulate
from tests.simulator.helpers import LinearCost, const_trace

#: target 0.25 s + 2^-8 s per query token, draft 2^-5 s + 2^-10 s per token, overhead 2^-6 s
CHEAP = LinearCost(fixed=0.25, per_token=2**-8, draft_fixed=2**-5, draft_per_token=2**-10,
                   overhead=2**-6)
#: a sampler reading 4 · 8 bytes per row at 1024 bytes/s: 2^-5 s per probability row, no floor
SAMPLER = VerifyCost(rule="token", vocab=8, bandwidth=1024.0, floor=0.0)


def dsd(alpha: float = 0.7) -> DynamicSD:
    trace = const_trace(n_requests=2, output_len=10, depth=6)
    policy = make_policy(load_config(None, trace="synth", policy="dsd"), trace.K)
    policy.alpha = alpha
    return policy


def test_goodput_adds_the_samplers_seconds_hand_computed():
    """n = 2, k = 1, α = 0.7: tokens 2 (1 + 0.7) = 3.4; step 2^-6 + 0.25 + 4·2^-8 (target,
    query 2 each) + 2^-5 + 2·2^-10 (one draft pass) = 0.314453125 s; the sampler reads
    n + 2·Σs = 6 rows = 0.1875 s."""
    kv = np.array([5, 7], dtype=np.int64)
    plain = dsd()
    assert plain.goodput(1, kv, CHEAP) == pytest.approx(3.4 / 0.314453125, rel=1e-12)
    priced = dsd()
    priced.price_verification(SAMPLER)
    assert priced.goodput(1, kv, CHEAP) == pytest.approx(3.4 / (0.314453125 + 0.1875),
                                                          rel=1e-12)


def test_a_costly_sampler_shortens_the_planned_window():
    """Without the sampler the scan rises to k = 3 (goodput 12.32 at k = 2, 12.78 at k = 3,
    12.68 at k = 4); each verified token adds two rows (2^-4 s), which makes k = 1 the best
    (6.77, against 6.55 at k = 0 with its ×1.1 and 6.56 at k = 2)."""
    kv = np.array([5, 7], dtype=np.int64)
    assert dsd().plan(kv, CHEAP) == 3
    priced = dsd()
    priced.price_verification(SAMPLER)
    assert priced.plan(kv, CHEAP) == 1


def test_the_policy_gets_the_engines_own_verification_cost():
    trace = const_trace(n_requests=4, output_len=10, depth=6)
    for sampler, draft in (("fused", "vicuna-68m"), ("torch", "vicuna-68m"), ("fused", "ngram")):
        config = load_config(None, trace="synth", policy="dsd", verify_cost=sampler,
                             draft=draft)
        policy = make_policy(config, trace.K)
        attach_verify_cost(policy, config, trace)
        assert policy.sampler == verify_cost_for(config, trace, draft == "ngram")
        assert policy.sampler is not None
    config = load_config(None, trace="synth", policy="dsd", verify_cost="none")
    policy = make_policy(config, trace.K)
    attach_verify_cost(policy, config, trace)
    assert policy.sampler is None


def test_a_policy_without_the_hook_is_left_alone():
    trace = const_trace(n_requests=4, output_len=10, depth=6)
    config = load_config(None, trace="synth", policy="fixed")
    policy = make_policy(config, trace.K)
    attach_verify_cost(policy, config, trace)
    assert not hasattr(policy, "sampler")


def run_dsd(monkeypatch, hooked: bool, **settings):
    """A dsd run with the sampler handed to the policy (``hooked``) or withheld, as before."""
    if not hooked:
        monkeypatch.setattr(run_module, "attach_verify_cost", lambda *args: None)
    config = load_config(None, policy="dsd", trace="smollm2-q4", target="smollm2-135m",
                         draft="smollm2-135m", requests=16, host="fixed",  # GPU passes
                         cost="roofline",  # the 135M pair's passes as the docstring prices them
                         **settings)
    result = simulate(config)
    monkeypatch.undo()
    return result


def test_verify_cost_none_plans_bit_identically_to_dsd_without_the_term(monkeypatch):
    hooked = run_dsd(monkeypatch, True, verify_cost="none")
    withheld = run_dsd(monkeypatch, False, verify_cost="none")
    assert hooked.steps.equals(withheld.steps) and hooked.requests.equals(withheld.requests)
    assert hooked.summary == withheld.summary


def test_a_run_with_the_measured_torch_sampler_plans_shorter_windows(monkeypatch):
    """SmolLM2 verifying itself on an H100: the torch sampler's 2.28 ms per verify call
    outweighs a pass of the 135M models, so the priced plan verifies far less and the run is
    faster than one planned without the term (the steps pay the sampler either way)."""
    hooked = run_dsd(monkeypatch, True, verify_cost="torch")
    withheld = run_dsd(monkeypatch, False, verify_cost="torch")
    depth = {name: r.steps[r.steps["batch"] > 0]["depth"].mean()
             for name, r in (("hooked", hooked), ("withheld", withheld))}
    assert depth["hooked"] < depth["withheld"]
    assert hooked.summary["throughput"] > withheld.summary["throughput"]
