"""The planner's latency lower bound is a bound: request by request, the simulator's TTFT,
TPOT and e2e are never below it, on every policy, verifier, deployment and load the planner
searches (queues, preemption, wrapped outputs included); and the shortest path it takes the
fewest steps from is the brute-force minimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbatch.analysis.plan.bound import (
    BoundTables,
    decode_steps,
    depth_steps,
    fewest_steps,
    reach_steps,
)
from specbatch.analysis.plan.slo import per_request
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.run import simulate

BASE = {"requests": 12, "target": "vicuna-33b", "draft": "vicuna-68m", "max_num_seqs": 64,
        "kv_mode": "paged", "gpu_memory_utilization": 0.9, "seed": 3, "arrival": "poisson"}
SETTINGS = [
    {"policy": "ar"},
    {"policy": "fixed", "num_speculative_tokens": 1, "verify": "token"},
    {"policy": "fixed", "num_speculative_tokens": 4, "verify": "block"},
    {"policy": "tetris", "num_speculative_tokens": 2, "extra": 2, "verify": "block"},
    {"policy": "tetris", "num_speculative_tokens": 3, "extra": 1, "verify": "token"},
    {"policy": "dsd", "verify": "token"},
    {"policy": "dsd", "verify": "block"},
]
LOADS = [  # (deployment, arrival): alone, queued, preempting (one H100 holds ~4k KV tokens)
    ({"hardware": "h100", "tp": 2, "replicas": 2}, {"rate": 0.5}),
    ({"hardware": "h100", "tp": 4, "replicas": 1}, {"rate": 50.0}),
    ({"hardware": "h100", "tp": 1, "replicas": 1}, {"arrival": "burst"}),
]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Prompts of 250-500 tokens, outputs of 2-160 (some longer than their trace request:
    wrapped rows), and a synthetic trace with its own lengths."""
    path = tmp_path_factory.mktemp("bound") / "w.csv"
    rng = np.random.default_rng(0)
    path.write_text("prompt_len,output_len\n" + "".join(
        f"{p},{o}\n" for p, o in zip(rng.integers(250, 500, 12), rng.integers(2, 160, 12))))
    sources = {"file": {**BASE, "trace": "default", "workload": str(path)},
               "synth": {**BASE, "trace": "synth", "synth_alpha": 0.7}}
    return {name: (BoundTables(fields), fields) for name, fields in sources.items()}


def by_uid(requests) -> dict[str, np.ndarray]:
    """TTFT, TPOT, e2e of a run's requests in workload order (the bounds' order)."""
    return per_request(requests.sort_values("uid", kind="stable"))


COSTS = ("roofline", "calibrated", "aic")


def cases() -> list:
    """Every setting under every load and cost model; one load per (setting, cost) in the
    fast suite (rotating, so each load, source and cost is covered), the rest slow."""
    out = []
    for c, s, j in itertools.product(range(len(COSTS)), range(len(SETTINGS)),
                                     range(len(LOADS))):
        source = ("file", "synth", "file")[j]
        marks = () if j == (s + c) % len(LOADS) else (pytest.mark.slow,)
        out.append(pytest.param(SETTINGS[s], LOADS[j], source, COSTS[c], marks=marks,
                                id=f"{COSTS[c]}-s{s}-l{j}"))
    return out


@pytest.mark.parametrize(("setting", "load", "source", "cost"), cases())
def test_no_request_beats_its_bound(tables, setting, load, source, cost):
    deployment, arrival = load
    t, shared = tables[source]
    fields = {**shared, **deployment, **arrival, **setting, "cost": cost}
    bounds = t.bounds(fields)
    run = simulate(make_config(fields), trace=t.trace)
    if deployment["tp"] == 1 and source == "file":
        assert run.summary["preemptions"] > 0  # the bound holds through recomputation too
    seen = by_uid(run.requests)
    for name in ("ttft", "tpot", "e2e"):
        lower = getattr(bounds, name)
        assert np.all(seen[name] >= lower * (1 - 1e-12)), (name, np.min(seen[name] - lower))
        assert np.percentile(seen[name], 99) >= bounds.at(99)[name] * (1 - 1e-12)
    assert np.all(bounds.e2e > 0)


def test_the_bound_is_not_vacuous_for_a_request_alone(tables):
    # one request at a time on four GPUs: the e2e bound is within a third of the simulated
    t, shared = tables["synth"]
    fields = {**shared, "hardware": "h100", "tp": 4, "replicas": 1, "rate": 0.05,
              "policy": "fixed", "num_speculative_tokens": 3, "verify": "token"}
    bounds = t.bounds(fields)
    seen = by_uid(simulate(make_config(fields), trace=t.trace).requests)
    assert np.median(bounds.e2e / seen["e2e"]) > 0.67


def brute_steps(u: list[int], out: int, t: int) -> int:
    if t >= out:
        return 0
    return 1 + min(brute_steps(u, out, t + a) for a in range(1, u[t] + 1))


def test_fewest_steps_is_the_brute_force_minimum():
    rng = np.random.default_rng(1)
    for _ in range(40):
        n, top = 3, int(rng.integers(1, 12))
        out = rng.integers(0, top + 1, n)
        u = np.where(np.arange(top)[None, :] < out[:, None], rng.integers(1, 4, (n, top)), 0)
        for start in (0, 1):
            want = [brute_steps(list(u[i]), int(out[i]), start) for i in range(n)]
            assert fewest_steps(u, out, start).tolist() == want
            assert reach_steps(u, out, start).tolist() == want  # the fast twin


@pytest.mark.parametrize("source", ["file", "synth"])
def test_every_depth_at_once_is_each_depth_alone(tables, source):
    # the fast twin (one τ table, every depth's running maximum, reach layers) equals the
    # reference (per depth: its own uniforms, τ tables and shortest path) request by request
    t, _ = tables[source]
    for rule in ("token", "block"):
        fast = depth_steps(t.trace, t.workload, t.seed, rule, t.trace.K)
        for depth in range(1, t.trace.K + 1):
            want = decode_steps(t.trace, t.workload, t.seed, depth, rule)
            assert fast[depth].tolist() == want.tolist(), (rule, depth)
    fresh = BoundTables.__new__(BoundTables)  # no speculation: one token a step
    fresh.__dict__.update(t.__dict__, _steps={})
    assert fresh.steps(0, "token").tolist() == decode_steps(t.trace, t.workload, t.seed, 0,
                                                            "").tolist()


def test_no_bound_where_the_proof_does_not_hold(tables):
    t, shared = tables["synth"]
    assert t.bounds({**shared, "policy": "ar", "scheduler": "vllm-v0"}) is None


@pytest.mark.parametrize("cost", COSTS)
def test_a_mixture_of_experts_target_is_bounded_too(tables, cost):
    # roofline: its expert traffic grows with the pass's tokens, concavely: still monotone,
    # and a chunked prefill reads at least what the whole prompt's pass reads; calibrated and
    # aic: the pass is not monotone in the tokens (the floor takes the suffix minimum)
    t, shared = tables["synth"]
    fields = {**shared, "target": "qwen3-30b-a3b", "hardware": "h100", "tp": 1, "replicas": 1,
              "rate": 20.0, "policy": "fixed", "num_speculative_tokens": 2, "verify": "block",
              "cost": cost, "max_num_batched_tokens": 2048}
    bounds = t.bounds(fields)
    seen = by_uid(simulate(make_config(fields), trace=t.trace).requests)
    for name in ("ttft", "tpot", "e2e"):
        assert np.all(seen[name] >= getattr(bounds, name) * (1 - 1e-12)), name


def test_the_closed_form_for_huge_workloads_is_the_shortest_path_at_full_advance(monkeypatch):
    import specbatch.analysis.plan.bound as bound
    from specbatch.simulator.workload.arrivals import Workload

    out = np.array([0, 1, 2, 5, 6, 10, 11, 23])
    n = out.shape[0]
    work = Workload(trace_index=np.zeros(n, dtype=np.int64), arrival=np.zeros(n),
                    prompt_len=np.ones(n, dtype=np.int64), output_len=out,
                    row_base=np.zeros(n, dtype=np.int64))
    for depth in (1, 2, 4):
        u = np.where(np.arange(out.max())[None, :] < out[:, None], depth + 1, 0)
        want = np.maximum(np.minimum(fewest_steps(u, out, 0), fewest_steps(u, out, 1)) - 1, 0)
        monkeypatch.setattr(bound, "MAX_CELLS", 0)
        assert bound.decode_steps(None, work, 0, depth, "token").tolist() == want.tolist()


@pytest.mark.parametrize("cost", ["calibrated", "aic"])
def test_a_tabulated_bound_is_not_vacuous_for_a_request_alone(tables, cost):
    t, shared = tables["synth"]
    fields = {**shared, "hardware": "h100", "tp": 4, "replicas": 1, "rate": 0.05,
              "policy": "fixed", "num_speculative_tokens": 3, "verify": "token",
              "cost": cost}
    bounds = t.bounds(fields)
    seen = by_uid(simulate(make_config(fields), trace=t.trace).requests)
    assert np.median(bounds.e2e / seen["e2e"]) > 0.67


def test_no_tabulated_bound_past_the_compiled_loops_largest_table(tables):
    from specbatch.simulator.engine.v1.pass_tables import MAX_TABLE_TOKENS

    t, shared = tables["synth"]
    fields = {**shared, "hardware": "h100", "tp": 1, "policy": "ar", "cost": "calibrated",
              "max_num_batched_tokens": MAX_TABLE_TOKENS + 1}
    assert t.bounds(fields) is None


@pytest.mark.parametrize("cost", ["roofline", "calibrated", "aic"])
def test_a_sliding_window_target_is_bounded_too(tables, cost, tmp_path):
    # a request's window work is nondecreasing in its query and cache, and a chunked
    # prefill does at least the whole prompt's: the floors hold, priced with the window
    import json

    config = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 11008,
              "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
              "vocab_size": 32000, "sliding_window": 128,
              "layer_types": ["sliding_attention", "full_attention"] * 16}
    (tmp_path / "config.json").write_text(json.dumps(config))
    t, shared = tables["synth"]
    fields = {**shared, "target": str(tmp_path / "config.json"), "hardware": "h100", "tp": 1,
              "replicas": 1, "rate": 20.0, "policy": "fixed", "num_speculative_tokens": 2,
              "verify": "block", "cost": cost, "max_num_batched_tokens": 256,
              # its pages and the draft's do not unify into vLLM's hybrid KV cache groups
              "disable_hybrid_kv_cache_manager": True}
    bounds = t.bounds(fields)
    seen = by_uid(simulate(make_config(fields), trace=t.trace).requests)
    for name in ("ttft", "tpot", "e2e"):
        assert np.all(seen[name] >= getattr(bounds, name) * (1 - 1e-12)), name


@pytest.fixture(scope="module")
def random_tables(tmp_path_factory):
    """One workload file the property test rewrites (one path: the shared cost models, keyed
    by every field, are built once per deployment) and the trace it replays."""
    from specbatch.simulator.run import load_trace

    path = tmp_path_factory.mktemp("random") / "w.csv"
    return path, load_trace(make_config({**BASE, "trace": "default"}))


DEPLOYMENTS = [{"tp": 1}, {"tp": 2}, {"tp": 4}, {"tp": 2, "replicas": 2}]
ARRIVALS = [{"rate": 0.5}, {"rate": 8.0}, {"rate": 80.0}, {"arrival": "burst"}]


@pytest.mark.parametrize("cost", COSTS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 60)), min_size=1,
                        max_size=8),
       setting=st.sampled_from(SETTINGS), deployment=st.sampled_from(DEPLOYMENTS),
       arrival=st.sampled_from(ARRIVALS), budget=st.sampled_from([64, 256, 2048]),
       execution=st.sampled_from(["cuda_graph", "eager"]), overlap=st.booleans(),
       seed=st.integers(0, 3))
def test_random_workloads_never_beat_their_bound(random_tables, cost, lengths, setting,
                                                  deployment, arrival, budget, execution,
                                                  overlap, seed):
    # any workload (prompts past the token budget: chunked), any setting, load, tp, launch
    # preset and async scheduling: request by request the simulated TTFT, TPOT and e2e are
    # at least their bounds
    path, trace = random_tables
    path.write_text("prompt_len,output_len\n" + "".join(f"{p},{o}\n" for p, o in lengths))
    fields = {**BASE, "trace": "default", "workload": str(path), "requests": len(lengths),
              "hardware": "h100", "replicas": 1, **deployment, **arrival, **setting,
              "cost": cost, "max_num_batched_tokens": budget, "execution": execution,
              "async_scheduling": overlap, "seed": seed}
    t = BoundTables(fields, trace)
    bounds = t.bounds(fields)
    assert bounds is not None
    run = simulate(make_config(fields), trace=trace)
    seen = by_uid(run.requests)
    for name in ("ttft", "tpot", "e2e"):
        lower = getattr(bounds, name)
        assert np.all(seen[name] >= lower * (1 - 1e-12)), (name, np.min(seen[name] - lower))


def test_a_bounds_percentiles_are_computed_once_and_are_numpys():
    from specbatch.analysis.plan.bound import Bounds

    rng = np.random.default_rng(2)
    b = Bounds(ttft=rng.random(50), tpot=rng.random(50), e2e=rng.random(50))
    first = b.at(99.0)
    assert first == {n: float(np.percentile(getattr(b, n), 99.0)) for n in ("ttft", "tpot", "e2e")}
    first["e2e"] = -1.0  # the caller's copy
    assert b.at(99.0)["e2e"] == float(np.percentile(b.e2e, 99.0))
    assert b.at(50.0)["ttft"] == float(np.percentile(b.ttft, 50.0))
    assert list(b.__dict__["_at"]) == [99.0, 50.0]
