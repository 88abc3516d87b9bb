"""Policy specification: MAL formula, per-step optimality, bounds, BV ≥ TV, one decide for
trace views and array views, one required depth per policy."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.registry import POLICIES, DynamicSD, make_policy
from specbatch.simulator.policies.view import StepView, make_view
from specbatch.simulator.replay.chain import expected_accepted
from specbatch.simulator.run import simulate
from specbatch.theory.verify.path_stats import block_thresholds, block_weights
from specbatch.traces.synth import SynthConfig, synth_trace
from tests.simulator.helpers import (
    CHAIN_POLICIES,
    LinearCost,
    calibrated,
    const_trace,
    policy_settings,
    tree_rule,
)

COST = LinearCost()


def policy(trace, name, **kw):
    config = load_config(None, trace="synth", policy=name, **policy_settings(name), **kw)
    return calibrated(make_policy(config, trace.K), trace)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_mal_matches_constant_alpha_formula(k):
    """Fixed k on a constant-α trace, TV: MAL = E[τ + 1] = (1 − α^{k+1}) / (1 − α) (THEORY §2).

    BV is checked against the exact per-path law ``P(τ ≥ i | X^γ) = 1 − Π_{l≥i} (1 − h_l)``
    averaged over rows: the synthetic constant-α mode forces the drafted token's q, so its
    paths are not draws from Ms and BV's Σ p_i identity (which averages over the future
    draft) does not apply to it row by row.
    """
    alpha = 0.7
    trace = synth_trace(SynthConfig(requests=32, output_mean=96, prompt_mean=16, depth=6,
                                    constant_alpha=alpha, seed=k))
    for verify in ("token", "block"):
        result = simulate(load_config(None, trace="synth", policy="fixed", k=k, verify=verify,
                                      requests=160), trace, cost_model=COST)
        steps = result.summary["decode_request_steps"]
        if verify == "token":
            expected = (1 - alpha ** (k + 1)) / (1 - alpha)
        else:
            p = block_weights(trace.q[:, :k], trace.pt[:, :k])
            h = block_thresholds(p, trace.z[:, :k], np.full(trace.n_rows, k))
            survive = 1 - np.cumprod((1 - h)[:, ::-1], axis=1)[:, ::-1]
            expected = 1 + survive.sum(axis=1).mean()
        # τ+1 ∈ [1, k+1] has variance ≤ (k/2)²; 4 standard errors over request-steps.
        tol = 4 * np.sqrt(k ** 2 / 4 / steps) + 1e-3
        assert abs(result.summary["mal"] - expected) < tol, (verify, result.summary["mal"])


@pytest.mark.parametrize("rule", ["token", "block"])
def test_oracle_beats_every_policy_per_step_at_equal_budget(synth_trace_natural, rule):
    """For any batch, the oracle's expected accepted tokens at C = Σ s_p ≥ policy p's."""
    trace = synth_trace_natural
    rng = np.random.default_rng(0)
    others = [policy(trace, "tetris", extra=2, verify=rule),
              policy(trace, "fixed", k=3, verify=rule),
              policy(trace, "dsd", verify=rule, k=4),
              policy(trace, "threshold", extra=2, threshold=0.05, verify=rule)]
    oracle = policy(trace, "oracle", k=3, extra=5, verify=rule)  # depth 8 = trace K
    for _ in range(20):
        n = int(rng.integers(1, 40))
        rows = rng.integers(0, trace.n_rows, size=n)
        kv = rng.integers(1, 500, size=n)
        for p in others:
            view = make_view(trace, rows, budget=3 * n, depth=p.depth, cost=COST, kv=kv)
            _, s = p.decide(view)
            c = int(s.sum())
            _, best = oracle.decide(make_view(trace, rows, budget=c, depth=oracle.depth))
            assert best.sum() <= c
            mine = expected_accepted(trace, rows, s, rule)
            assert expected_accepted(trace, rows, best, rule) >= mine - 1e-9, p.name


def test_tetris_beats_fixed_with_a_perfect_surrogate(synth_trace_perfect):
    """TV with draft_conf = min(1, r): TETRIS's top-C on the truth ≥ fixed k at C = k·n."""
    trace = synth_trace_perfect
    rng = np.random.default_rng(1)
    for extra in (1, 2, 3):
        tetris = policy(trace, "tetris", k=3, extra=extra)
        fixed = policy(trace, "fixed", k=3)
        for _ in range(20):
            n = int(rng.integers(1, 64))
            rows = rng.integers(0, trace.n_rows, size=n)
            _, s_t = tetris.decide(make_view(trace, rows, 3 * n, tetris.depth))
            _, s_f = fixed.decide(make_view(trace, rows, 3 * n, fixed.depth))
            assert s_t.sum() == s_f.sum() == 3 * n
            assert (expected_accepted(trace, rows, s_t, "token")
                    >= expected_accepted(trace, rows, s_f, "token") - 1e-9)


@pytest.mark.parametrize("rule", ["token", "block"])
def test_hindsight_verifies_exactly_what_is_accepted(synth_trace_natural, rule):
    result = simulate(load_config(None, trace="synth", policy="hindsight", extra=2, verify=rule,
                                  requests=48), synth_trace_natural, cost_model=COST)
    assert result.summary["vsr"] == 1.0
    assert (result.requests["accepted"] == result.requests["verified"]).all()
    # and it accepts at least as much as fixed at the same full depth
    fixed = simulate(load_config(None, trace="synth", policy="fixed", k=5, verify=rule,
                                 requests=48), synth_trace_natural, cost_model=COST)
    assert result.summary["mal"] >= fixed.summary["mal"]


def test_block_verification_mal_at_least_token_on_temperature_one():
    trace = synth_trace(SynthConfig(requests=48, output_mean=96, prompt_mean=16, seed=11))
    assert trace.temperature == 1.0
    for name, kw in (("fixed", dict(k=4)), ("oracle", dict(k=3, extra=2))):
        mal = {rule: simulate(load_config(None, trace="synth", policy=name, verify=rule,
                                          requests=192, **kw), trace, cost_model=COST
                              ).summary["mal"] for rule in ("token", "block")}
        assert mal["block"] >= mal["token"], (name, mal)


def test_policy_outputs_are_well_formed(synth_trace_natural):
    trace = synth_trace_natural
    rows = np.arange(0, trace.n_rows, 7)
    for name in POLICIES:
        if POLICIES[name].tree:  # tree traces only: tests/simulator/policies/test_trees.py
            continue
        for rule in ("token", "block"):
            p = policy(trace, name, extra=1, verify=rule)
            view = make_view(trace, rows, budget=2 * rows.size, depth=p.depth, cost=COST,
                             kv=np.full(rows.size, 100))
            drafted, verified = p.decide(view)
            assert drafted.shape == verified.shape == rows.shape
            assert ((0 <= verified) & (verified <= drafted) & (drafted <= max(p.depth, 0))).all()
            if name in ("tetris", "oracle"):
                assert verified.sum() <= 2 * rows.size


def test_dsd_goes_autoregressive_when_nothing_is_accepted():
    """α → 0 makes every k > 0 worse than k = 0 (goodput with the ×1.1 bias); after that only
    the probe, one k = 1 step per 20-step interval, verifies anything."""
    trace = const_trace(n_requests=8, output_len=60, depth=6, alpha=0.0)
    result = simulate(load_config(None, trace="synth", policy="dsd", requests=8), trace,
                      cost_model=COST)
    steps = result.steps[result.steps["batch"] > 0]
    later = steps["depth"].iloc[20:].to_numpy()
    assert set(later.tolist()) <= {0, 1}
    assert 1 <= (later == 1).sum() <= -(-later.size // 20)


def test_dsd_recovers_from_a_plan_of_k_zero(monkeypatch):
    """A pessimistic start (α = 0.01 plans k = 0) on text the draft always gets right: the
    probes observe α̂ = 1 and the windows grow back, instead of k = 0 for good."""
    monkeypatch.setattr(DynamicSD, "INITIAL_ALPHA", 0.01)
    trace = const_trace(n_requests=8, output_len=400, depth=8, alpha=1.0)
    cheap = LinearCost(fixed=0.25, per_token=2**-8, draft_fixed=2**-5, draft_per_token=2**-10,
                       overhead=2**-6)
    result = simulate(load_config(None, trace="synth", policy="dsd", requests=8), trace,
                      cost_model=cheap)
    depth = result.steps[result.steps["batch"] > 0]["depth"].to_numpy()
    assert depth[0] == 1 and (depth[1:20] == 0).all()  # the k = 0 plan, with its probe
    assert depth[-1] == 6


def test_dsd_estimates_alpha_by_maximum_likelihood():
    """s = 4 verified each; τ = 1 and τ = 4: α̂ = 5 / (5 + 1), not accepted/verified = 5/8."""
    trace = const_trace(n_requests=2, output_len=10, depth=6, alpha=0.5)
    p = make_policy(load_config(None, trace="synth", policy="dsd", k=4), trace.K)
    p.observe(np.array([4, 4]), np.array([1, 4]))
    assert p.alpha == pytest.approx(0.85 * 0.7 + 0.15 * 5 / 6)
    p.observe(np.array([0, 0]), np.array([0, 0]))  # nothing verified: no update
    assert p.alpha == pytest.approx(0.85 * 0.7 + 0.15 * 5 / 6)


def test_dsd_goes_deep_when_everything_is_accepted_and_verifying_is_cheap():
    """α = 1 and a memory-bound target (fixed pass cost): goodput rises with k up to min(6, K)."""
    trace = const_trace(n_requests=8, output_len=200, depth=8, alpha=1.0)
    cheap = LinearCost(fixed=0.25, per_token=2**-8, draft_fixed=2**-5, draft_per_token=2**-10,
                       overhead=2**-6)
    result = simulate(load_config(None, trace="synth", policy="dsd", requests=8), trace,
                      cost_model=cheap)
    steps = result.steps[result.steps["batch"] > 0]
    depth = steps["depth"].to_numpy()
    # planned at the first decode step with the initial α = 0.7, re-planned every 20 steps
    # as the EMA climbs towards the observed α = 1
    assert len(set(depth[:20])) == 1 and depth[20] != depth[0]
    assert (np.diff(depth) >= 0).all() and depth[-1] == 6
    assert result.summary["vsr"] == 1.0


def test_block_equals_token_verification_at_temperature_zero():
    """THEORY §3: at temperature 0 (one-hot rows) BV and TV have the same law; with common
    random numbers the whole simulation is identical."""
    trace = synth_trace(SynthConfig(requests=16, output_mean=48, prompt_mean=16, temperature=0.0,
                                    seed=5))
    for name in ("fixed", "tetris"):
        runs = [simulate(load_config(None, trace="synth", policy=name, extra=1, verify=rule,
                                     requests=24), trace, cost_model=COST).requests
                for rule in ("token", "block")]
        assert runs[0].equals(runs[1]), name


def test_block_oracle_is_exact_on_the_recorded_paths(synth_trace_natural):
    """BV oracle = brute force over all allocations of E[τ | X^s] (not of Σ p_j), small batches."""
    import itertools

    trace = synth_trace_natural
    oracle = policy(trace, "oracle", k=1, extra=2, verify="block")  # depth 3
    rng = np.random.default_rng(7)
    for _ in range(15):
        n = int(rng.integers(1, 5))
        rows = rng.integers(0, trace.n_rows, size=n)
        budget = int(rng.integers(0, 3 * n + 1))
        _, s = oracle.decide(make_view(trace, rows, budget, oracle.depth))
        assert s.sum() <= budget
        best = max(expected_accepted(trace, rows, np.array(c), "block")
                   for c in itertools.product(range(4), repeat=n) if sum(c) <= budget)
        assert expected_accepted(trace, rows, s, "block") >= best - 1e-12


@pytest.mark.parametrize("rule", ["token", "block"])
def test_hindsight_accepts_at_least_any_prefix_on_the_same_coins(synth_trace_natural, rule):
    """Per request, hindsight's τ = s ≥ τ^{(s')} for every verified prefix s' (BV included,
    where a shorter draft can accept more than the full one)."""
    from specbatch.simulator.replay.chain import sample_tau

    trace = synth_trace_natural
    hindsight = policy(trace, "hindsight", k=3, extra=5, verify=rule)  # depth 8
    rows = np.random.default_rng(5).integers(0, trace.n_rows, size=400)
    view = make_view(trace, rows, budget=0, depth=hindsight.depth, seed=11)
    _, s = hindsight.decide(view)
    tau = sample_tau(view.q, view.pt, view.z, s, view.eta, rule)
    assert np.array_equal(tau, s)  # VSR = 1
    for other in range(hindsight.depth + 1):
        alt = sample_tau(view.q, view.pt, view.z, np.full(rows.shape[0], other), view.eta, rule)
        assert np.all(tau >= alt), other


@pytest.mark.parametrize("rule", ["token", "block"])
def test_a_view_of_gathered_signals_decides_like_a_view_of_trace_rows(synth_trace_natural,
                                                                        rule):
    """The live loop builds StepView.from_signals from its own draft; every policy's decision
    on it equals the decision on the same trace rows (signals gathered, tables row-wise)."""
    trace = synth_trace_natural
    rng = np.random.default_rng(2)
    for name in CHAIN_POLICIES:
        for _ in range(5):
            n = int(rng.integers(1, 40))
            rows = rng.integers(0, trace.n_rows, size=n)
            kv = rng.integers(1, 500, size=n)
            decided = []
            for view_of in ("trace", "signals"):
                p = policy(trace, name, extra=2, verify=rule)
                view = make_view(trace, rows, budget=3 * n, depth=p.depth, cost=COST, kv=kv)
                if view_of == "signals":
                    cols = {s: getattr(trace, c)[rows, : p.depth] for s, c in
                            (("conf", "draft_conf"), ("q", "q"), ("pt", "pt"), ("z", "z"),
                             ("entropy", "entropy"))}
                    view = StepView.from_signals(kv, 3 * n, p.depth, eta=view.eta, cost=COST,
                                                 **cols)
                decided.append(p.decide(view))
            for a, b in zip(*decided):
                assert np.array_equal(a, b), name


def test_every_policy_drafts_its_required_depth_and_config_asks_the_class(synth_trace_natural):
    """One definition of a policy's depth: Policy.required_depth, used by validation
    (simulator.config.sim_config.policy_depth) and equal to the depth the policy gathers."""
    from specbatch.simulator.config.sim_config import policy_depth

    trace = synth_trace_natural  # K = 8
    for name, cls in POLICIES.items():
        for k, extra in ((1, 0), (3, 2), (6, 2)):
            config = load_config(None, trace="synth", policy=name, k=k, extra=extra,
                                 **policy_settings(name), **tree_rule(cls))
            need = cls.required_depth(config)
            assert policy_depth(config) == need
            p = make_policy(config, trace.K)
            assert p.depth >= need if name == "dsd" else p.depth == need, name
    dsd = load_config(None, trace="synth", policy="dsd", k=9)
    assert policy_depth(dsd) == 6  # the goodput scan never goes past 6


def test_dsd_k_caps_the_window_and_the_default_is_unchanged():
    """A k given to dsd is its upper bound (dsd_max_k): every plan stays within it. Without
    one DSD scans k = 0..min(6, K) exactly as before (the hashes of this run's tables were
    recorded before dsd accepted a k, re-recorded when the LM head came to be priced at the
    rows vLLM samples only, and when a draft model's passes came to follow vLLM V1's proposer:
    simulator.cost.features.draft_model_pass)."""
    import hashlib

    base = load_config(None, trace="default", policy="dsd", requests=64, seed=1,
                       host="fixed", client_ttft_s=0.0, async_scheduling=False,
                       cost="roofline")  # as the hashes were recorded
    default = simulate(base)
    assert base.dsd_max_k is None and default.steps["depth"].max() == 5
    assert repr(default.summary["throughput"]) == "1792.2483598721622"
    assert hashlib.sha256(default.steps.to_csv().encode()).hexdigest()[:16] == "131b1fa0aa20b95a"
    assert hashlib.sha256(default.requests.to_csv().encode()).hexdigest()[:16] == \
        "1393800dda00a9ac"
    for cap in (1, 2, 4):
        capped = simulate(load_config(None, trace="default", policy="dsd", requests=64, seed=1,
                                      k=cap))
        assert capped.config.dsd_max_k == cap
        steps = capped.steps
        per_request = steps["verified"] / steps["decode_requests"].clip(lower=1)
        assert steps["depth"].max() <= cap and per_request.max() <= cap
    assert simulate(base.replace(dsd_max_k=4)).steps["depth"].max() == 4  # binding: 5 -> 4
