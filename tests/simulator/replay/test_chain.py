"""Verifier specification: counter-based uniforms (common random numbers) and τ sampling."""

from __future__ import annotations

import numpy as np

from specbatch.simulator.replay.chain import (
    VerifyTables,
    expected_accepted,
    request_keys,
    sample_tau,
    uniforms,
    uniforms_scalar,
)
from specbatch.theory.verify.path_stats import token_weights


def test_uniforms_match_scalar_twin_and_ignore_batch_composition():
    keys = request_keys(7, np.arange(50))
    pos = np.arange(50) * 3
    eta = uniforms(keys, pos, 5)
    for i in (0, 17, 49):
        assert eta[i].tolist() == uniforms_scalar(int(keys[i]), int(pos[i]), 5)
    sub = np.array([3, 9, 40])
    assert np.array_equal(uniforms(keys[sub], pos[sub], 5), eta[sub])  # same coins in any batch
    assert np.array_equal(uniforms(keys, pos, 3), eta[:, :3])  # and at any depth


def test_uniforms_look_uniform_and_depend_on_every_key_part():
    keys = request_keys(0, np.arange(2000))
    eta = uniforms(keys, np.zeros(2000, dtype=np.int64), 8)
    assert eta.min() >= 0.0 and eta.max() < 1.0
    assert abs(eta.mean() - 0.5) < 0.01
    assert abs(np.corrcoef(eta[:, 0], eta[:, 1])[0, 1]) < 0.05
    other_pos = uniforms(keys, np.ones(2000, dtype=np.int64), 8)
    other_seed = uniforms(request_keys(1, np.arange(2000)), np.zeros(2000, dtype=np.int64), 8)
    assert not np.any(other_pos == eta) and not np.any(other_seed == eta)


def test_tv_tau_frequencies_match_token_weights():
    rng = np.random.default_rng(0)
    q = rng.uniform(0.1, 1, size=(1, 4)).repeat(20000, axis=0)
    pt = rng.uniform(0, 1, size=(1, 4)).repeat(20000, axis=0)
    eta = uniforms(request_keys(3, np.arange(20000)), np.zeros(20000, dtype=np.int64), 4)
    tau = sample_tau(q, pt, np.zeros_like(q), np.full(20000, 4), eta, "token")
    freq = [(tau >= j).mean() for j in range(1, 5)]
    assert np.allclose(freq, token_weights(q[:1], pt[:1])[0], atol=0.015)


def test_expected_accepted_sums_prefix_probabilities(synth_trace_natural):
    trace = synth_trace_natural
    rows = np.array([0, 5, 9])
    s = np.array([0, 2, 3])
    truth = trace.accept_tv[rows]
    assert np.isclose(expected_accepted(trace, rows, s, "token"),
                      truth[1, :2].sum() + truth[2, :3].sum())


def test_precomputed_tables_equal_accept_from_stats(synth_trace_natural):
    """The fast path (one gather + compare) is bit-identical to theory's reference sampler."""
    trace = synth_trace_natural
    rng = np.random.default_rng(0)
    for rule in ("token", "block"):
        tables = VerifyTables(trace, rule)
        for d in range(1, trace.K + 1):
            rows = rng.integers(0, trace.n_rows, 300)
            s = rng.integers(0, d + 1, 300)
            eta = uniforms(request_keys(d, np.arange(300)), rows, d)
            ref = sample_tau(trace.q[rows, :d], trace.pt[rows, :d], trace.z[rows, :d], s, eta, rule)
            assert np.array_equal(tables.tau(rows, s, eta), ref), (rule, d)


def test_table_fallbacks_equal_accept_from_stats(synth_trace_natural, monkeypatch):
    """Past LUT_DEPTH (τ by reductions) and past MAX_TABLE (thresholds gathered per step)
    the fast path still equals the reference sampler bit for bit."""
    import specbatch.simulator.replay.chain as verify

    trace = synth_trace_natural
    rng = np.random.default_rng(1)
    for lut_depth, max_table in ((0, verify.MAX_TABLE), (12, 0), (0, 0)):
        monkeypatch.setattr(verify, "LUT_DEPTH", lut_depth)
        monkeypatch.setattr(verify, "MAX_TABLE", max_table)
        for rule in ("token", "block"):
            tables = VerifyTables(trace, rule)
            for d in (1, 3, trace.K):
                rows = rng.integers(0, trace.n_rows, 200)
                s = rng.integers(0, d + 1, 200)
                eta = uniforms(request_keys(d, np.arange(200)), rows, d)
                ref = sample_tau(trace.q[rows, :d], trace.pt[rows, :d], trace.z[rows, :d], s,
                                 eta, rule)
                table, lut, _ = tables.for_depth(d)
                assert (table is None) == (max_table == 0) and (lut is None) == (lut_depth == 0)
                assert np.array_equal(tables.tau(rows, s, eta), ref), (rule, d)


def test_a_zero_threshold_never_accepts_even_at_eta_zero():
    """pt = 0 on the first drafted token: TV's min(1, r) and BV's h are 0, and η = 0 (a value
    the uniforms can take) must not pass them, in the reference and the tables alike."""
    from specbatch.traces.format.files import make_trace

    n = 3
    row = lambda *v: np.tile(np.array(v, dtype=np.float64), (n, 1))  # noqa: E731
    cols = {"draft_token": np.zeros((n, 2), dtype=np.int64), "q": row(0.5, 0.5),
            "pt": row(0.0, 0.5), "z": row(0.75, 0.0), "draft_conf": row(0.5, 0.5),
            "entropy": row(0.7, 0.7), "top1": row(0.5, 0.5)}
    requests = {"request_id": np.arange(n), "prompt_len": np.ones(n, dtype=np.int64),
                "output_len": np.ones(n, dtype=np.int64), "category": np.array(["x"] * n, object)}
    trace = make_trace({"temperature": 1.0}, requests, cols)
    eta, rows = np.zeros((n, 2)), np.arange(n)
    for rule in ("token", "block"):
        for s in (1, 2):
            verified = np.full(n, s)
            assert np.all(sample_tau(trace.q, trace.pt, trace.z, verified, eta, rule) == 0)
            assert np.all(VerifyTables(trace, rule).tau(rows, verified, eta[:, :s]) == 0)


def test_runs_sharing_a_traces_verify_tables_equal_runs_building_their_own():
    # shared_tables (simulator.replay.replay_tables.tables_for's chain rules): one VerifyTables per
    # loaded trace and rule, its per-depth cache filled by whichever run asks first; a run
    # on tables other runs filled is bit-identical
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.replay import chain as verify
    from specbatch.simulator.replay.replay_tables import tables_for
    from specbatch.simulator.run import load_trace, simulate

    fields = {"trace": "tiny", "requests": 12, "max_num_seqs": 4, "verify": "block"}
    deep = make_config({**fields, "policy": "fixed", "num_speculative_tokens": 4})
    config = make_config({**fields, "policy": "tetris", "num_speculative_tokens": 2,
                          "extra": 1})
    trace = load_trace(config)
    simulate(deep, trace)  # fills the shared tables at depth 4
    shared = simulate(config, trace)
    assert verify.shared_tables(trace, "block") is tables_for(trace, "block")
    verify._SHARED.clear()
    fresh = simulate(config, trace)
    assert shared.requests.equals(fresh.requests) and shared.steps.equals(fresh.steps)
