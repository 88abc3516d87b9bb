"""Paged KV specification under the vllm-v0 composer (simulator.engine.kv; vllm-v1: test_v1.py):
blocks are conserved, the newest request is preempted first, preemption by recomputation changes no
request's tokens or τ sequence, and the capacity comes from the cost model's memory."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.kv import kv_capacity
from specbatch.simulator.engine.request_state import Row
from specbatch.simulator.engine.v0 import V0Step
from specbatch.simulator.metrics import request_table, step_table, summarize
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import cap_workload, simulate
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import LinearCost, const_trace

COST = LinearCost()
RECORDS = ["tokens", "steps", "drafted", "verified", "accepted"]


class CheckedV0(V0Step):
    """The vllm-v0 composer with a log of every preemption: (uid, prompt + t, its column index
    from the end of the running batch), and no admission in a step that preempted."""

    def schedule_paged(self, rep):
        before = rep.state.copy()
        joined = super().schedule_paged(rep)
        kept = rep.n_running - joined
        assert (rep.state[Row.UID, :kept] == before[Row.UID, :kept]).all()  # a prefix stays
        for back, i in enumerate(range(before.shape[1] - 1, kept - 1, -1)):  # newest first
            self.log.append((int(before[Row.UID, i]),
                             int(before[Row.PROMPT, i] + before[Row.POS, i]), back))
        if kept < before.shape[1]:
            assert joined == 0 or kept == 0  # no admission in a step that preempted
            gone = before[Row.UID, kept:][::-1].tolist()
            assert list(rep.waiting)[:len(gone)] == gone[::-1]  # older preempted in front
        return joined


class CheckedEngine(Engine):
    """The engine with its block invariants asserted at every step start, composing through
    :class:`CheckedV0` (its log: ``log``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[tuple[int, int, int]] = []
        self.composer = CheckedV0(self)

    def start_step(self, rep, time):
        super().start_step(rep, time)
        state, bs = rep.state, self.blocks.block_size
        assert 0 <= rep.free_blocks
        assert int(state[Row.BLOCKS].sum()) + rep.free_blocks == self.blocks.pool
        decoding = state[Row.PREFILLED] >= state[Row.FILL]
        kv = np.where(decoding, state[Row.PROMPT] + state[Row.POS], state[Row.PREFILLED])
        assert (kv <= state[Row.BLOCKS] * bs).all()  # every cached token has a slot
        running = set(state[Row.UID].tolist())
        assert not running & set(rep.waiting)

    def run(self):
        rec = super().run()
        for rep in self.replicas:
            assert rep.n_running == 0 and rep.free_blocks == self.blocks.pool
        return rec


def run_checked(trace, cost=COST, **kw):
    """simulate() through :class:`CheckedEngine`: (request table, step table, summary, log)."""
    config = load_config(None, scheduler="vllm-v0", trace="synth", kv_mode="paged", **kw)
    workload = cap_workload(config, build_workload(config, trace))
    engine = CheckedEngine(config, trace, workload, cost, make_policy(config, trace.K),
                           capacity=kv_capacity(config, cost))
    rec = engine.run()
    requests, steps = request_table(rec, workload), step_table(rec)
    return requests, steps, summarize(requests, steps), engine.log


def test_hand_made_scenario_preempts_the_newest_first():
    """ar (lookahead 1), block_size 2, pool 6 blocks, three requests of prompt 2 and output 6
    arriving at once. All three are admitted with 2 blocks each (prefill + first token). At
    t = 2 each needs ⌈(2 + 2 + 1) / 2⌉ = 3 blocks: the newest (2) is preempted. At t = 4 the
    two left need 4 each: the newer (1) is preempted. 0 finishes, 1 (older) rejoins first and
    re-prefills 2 + 4 tokens, then 2 re-prefills 2 + 2 tokens."""
    trace = const_trace(n_requests=3, output_len=6, prompt_len=2, depth=2)
    requests, steps, summary, log = run_checked(trace, policy="ar", requests=3, block_size=2,
                                                kv_capacity=12)
    assert log == [(2, 4, 0), (1, 6, 0)]
    assert requests["preemptions"].tolist() == [0, 1, 1]
    assert requests["recomputed_tokens"].tolist() == [0, 6, 4]
    assert summary["preemptions"] == 2 and summary["recomputed_tokens"] == 10
    assert requests["finish"].is_monotonic_increasing
    prefills = steps[steps["prefill_tokens"] > 0]
    assert prefills["prefill_tokens"].tolist() == [6, 6, 4]
    assert prefills["emitted"].tolist() == [3, 0, 0]  # a recomputed prefill emits nothing
    assert (requests["tokens"] == 6).all() and int(steps["emitted"].sum()) == 18


PAGED = [
    dict(policy="fixed", k=3, kv_capacity=300, block_size=16),
    dict(policy="fixed", k=2, kv_capacity=260, block_size=4, enable_chunked_prefill=True,
         max_num_batched_tokens=48),
    dict(policy="fixed", k=4, kv_capacity=400, block_size=8, replicas=2, arrival="poisson",
         rate=40.0, max_num_batched_tokens=100),
    dict(policy="fixed", k=1, kv_capacity=180, block_size=1, max_num_seqs=6, seed=2),
]


@pytest.mark.parametrize("kw", PAGED)
def test_fixed_policy_records_equal_the_reserve_run(synth_trace_natural, kw):
    """Under policy fixed a request's τ sequence depends only on its trace rows and common
    random numbers, so preemption by recomputation (position t kept) leaves its tokens, decode
    steps, drafted, verified and accepted exactly as in the reserve run; the blocks stay
    within the pool and every request finishes once (CheckedEngine)."""
    requests, _, summary, log = run_checked(synth_trace_natural, requests=40, **kw)
    assert summary["preemptions"] > 0
    base = simulate(load_config(None, scheduler="vllm-v0", trace="synth", requests=40,
                                **{k: v for k, v in kw.items() if k not in ("block_size",)}
                                | {"kv_capacity": None}),
                    synth_trace_natural, cost_model=COST)
    pd.testing.assert_frame_equal(requests[RECORDS], base.requests[RECORDS])
    recomputed = np.zeros(40, dtype=np.int64)
    for uid, tokens, _ in log:
        recomputed[uid] += tokens
    assert requests["recomputed_tokens"].tolist() == recomputed.tolist()
    assert summary["recomputed_tokens"] == sum(t for _, t, _ in log)
    assert np.bincount([u for u, _, _ in log], minlength=40).tolist() == \
        requests["preemptions"].tolist()


@pytest.mark.parametrize("kw", [
    dict(policy="tetris", k=2, extra=1, verify="block", kv_capacity=250, block_size=8),
    dict(policy="threshold", k=2, extra=2, kv_capacity=300, block_size=4,
         enable_chunked_prefill=True, max_num_batched_tokens=40, replicas=2),
    dict(policy="dsd", k=4, kv_capacity=240, block_size=16, max_num_seqs=10),
])
def test_vectorised_paged_engine_matches_per_request_reference(synth_trace_natural, kw):
    """Preemption-heavy paged runs: the vectorised engine (block growth, verify) and its
    per-request twin give identical request and step tables."""
    config = load_config(
        None, scheduler="vllm-v0", trace="synth", requests=32, kv_mode="paged", **kw
    )
    fast = simulate(config, synth_trace_natural, cost_model=COST)
    slow = simulate(config, synth_trace_natural, cost_model=COST, reference=True)
    assert fast.summary["preemptions"] > 5
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)


def test_a_large_pool_never_preempts_and_matches_reserve_timing(synth_trace_natural):
    """With room for every request the paged run preempts nothing; its admission then differs
    from reserve only in what it checks, so under an unlimited reserve run the tables agree."""
    kw = dict(trace="synth", requests=30, policy="tetris", extra=1)
    paged = simulate(
        load_config(None, scheduler="vllm-v0", kv_mode="paged", kv_capacity=10**6, **kw),
        synth_trace_natural,
        cost_model=COST,
    )
    reserve = simulate(
        load_config(None, scheduler="vllm-v0", **kw), synth_trace_natural, cost_model=COST
    )
    assert paged.summary["preemptions"] == 0 and paged.summary["recomputed_tokens"] == 0
    pd.testing.assert_frame_equal(paged.requests, reserve.requests)
    pd.testing.assert_frame_equal(paged.steps, reserve.steps)
    assert (paged.summary["kv_mode"], paged.summary["kv_capacity"]) == ("paged", 10**6)
    assert (reserve.summary["kv_mode"], reserve.summary["kv_capacity"]) == ("reserve", None)


@settings(max_examples=50, deadline=None)
@given(
    policy=st.sampled_from(["ar", "fixed", "dsd", "tetris", "threshold", "oracle"]),
    verify=st.sampled_from(["token", "block"]),
    k=st.integers(1, 3),
    block_size=st.sampled_from([1, 3, 16]),
    slack_blocks=st.integers(0, 30),
    max_num_seqs=st.integers(1, 12),
    replicas=st.integers(1, 2),
    chunk=st.sampled_from([None, 5, 64]),
    arrival=st.sampled_from(["burst", "poisson"]),
    seed=st.integers(0, 3),
)
def test_paged_invariants_property(synth_trace_natural, policy, verify, k, block_size,
                                   slack_blocks, max_num_seqs, replicas, chunk, arrival, seed):
    """Any small paged config: blocks held + free = pool at every step, every cached token has
    a slot, preemptions take the newest running requests, all blocks return at the end, and
    every request finishes once with its recorded length."""
    trace = synth_trace_natural
    extra = 1 if policy in ("tetris", "threshold", "oracle") else 0
    depth = 6 if policy == "dsd" else k + extra
    footprint = int((trace.prompt_len + trace.output_len).max()) + depth + 1
    capacity = (-(-footprint // block_size) + slack_blocks) * block_size
    kw = dict(policy=policy, verify=verify, k=k, extra=extra, block_size=block_size,
              kv_capacity=capacity, max_num_seqs=max_num_seqs, replicas=replicas,
              arrival=arrival, rate=30.0, seed=seed, requests=16)
    if chunk is not None:
        kw.update(enable_chunked_prefill=True, max_num_batched_tokens=chunk)
    requests, steps, summary, log = run_checked(trace, **kw)
    assert all(back < max_num_seqs for _, _, back in log)
    assert summary["preemptions"] == len(log)
    assert summary["recomputed_tokens"] == sum(t for _, t, _ in log)
    assert sorted(requests["uid"]) == list(range(16))
    assert (requests["tokens"] == requests["output_len"]).all()
    assert requests["output_len"].tolist() == trace.output_len[requests["trace_index"]].tolist()
    assert int(steps["emitted"].sum()) == int(requests["output_len"].sum())
    assert (requests["first_token"] <= requests["finish"]).all()


def test_capacity_comes_from_the_cost_models_memory():
    """Paged mode without kv_capacity asks the cost model: (tp·M·u − W_t − W_d) / KV bytes."""
    from specbatch.simulator.cost.analytic.memory import kv_capacity_tokens

    h100 = build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m")
    paged = load_config(None, scheduler="vllm-v0", kv_mode="paged", gpu_memory_utilization=0.9)
    assert kv_capacity(paged, h100) == kv_capacity_tokens("h100") == 4244
    assert kv_capacity(paged.replace(gpu_memory_utilization=0.85), h100) < 4244 - 2000
    assert kv_capacity(load_config(None), h100) is None  # reserve: unlimited
    assert kv_capacity(paged.replace(kv_capacity=999), h100) == 999
    tp2 = build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m", tp=2)
    assert kv_capacity(paged.replace(tp=2), tp2) == kv_capacity_tokens("h100", tp=2)
    with pytest.raises(SpecbatchError, match="field kv_capacity: .*no memory information"):
        kv_capacity(paged, COST)
    l40s = build_cost_model("roofline", "l40s", "vicuna-33b", "vicuna-68m")
    with pytest.raises(SpecbatchError, match="field gpu_memory_utilization"):
        kv_capacity(paged.replace(hardware="l40s"), l40s)


def test_one_line_errors(synth_trace_natural):
    trace = synth_trace_natural
    for kw, field in ((dict(kv_mode="blocks"), "kv_mode"), (dict(block_size=0), "block_size"),
                      (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
                      (dict(gpu_memory_utilization=0.0), "gpu_memory_utilization"),
                      (dict(max_model_len=1), "max_model_len")):
        with pytest.raises(SpecbatchError, match=f"field {field}"):
            load_config(None, scheduler="vllm-v0", **kw)
    with pytest.raises(SpecbatchError, match=r"field kv_capacity: .*blocks of 16\), got 100 "
                                             r"tokens = 6 blocks"):
        simulate(
            load_config(
                None,
                scheduler="vllm-v0",
                trace="synth",
                requests=8,
                kv_mode="paged",
                kv_capacity=100,
            ),
            trace,
            cost_model=COST,
        )
    shortest = int(trace.prompt_len.min())
    with pytest.raises(SpecbatchError, match=r"field max_model_len: .*\(\d+ of 8 requests"):
        simulate(
            load_config(
                None, scheduler="vllm-v0", trace="synth", requests=8, max_model_len=shortest
            ),
            trace,
            cost_model=COST,
        )


def test_max_model_len_caps_outputs_and_says_so(synth_trace_natural):
    trace = synth_trace_natural
    limit = int((trace.prompt_len + trace.output_len)[:20].max()) - 10
    for mode in ("reserve", "paged"):
        result = simulate(
            load_config(
                None,
                scheduler="vllm-v0",
                trace="synth",
                requests=20,
                kv_mode=mode,
                kv_capacity=2000,
                max_model_len=limit,
            ),
            trace,
            cost_model=COST,
        )
        req = result.requests
        full = trace.output_len[req["trace_index"]]
        expected = np.minimum(full, limit - req["prompt_len"])
        assert req["output_len"].tolist() == expected.tolist() == req["tokens"].tolist()
        n = int((expected < full).sum())
        assert n > 0 and any(f"{n} of 20 requests' outputs capped" in x for x in result.notes)


def test_chunk_allocation_is_fcfs_and_shrinks_the_first_chunk_that_does_not_fit():
    """block_size 4, 3 free blocks; request a (prefilled 2 of 20, holding 1 block) asks for 6 tokens
    -> ⌈8 / 4⌉ − 1 = 1 more block; b (0 of 9) asks for its 9 tokens and first token -> 3 blocks:
    only 2 are left, so b gets 8 tokens; c gets nothing. A chunk completing its prefill also needs
    its first token's slot, so one ending exactly at a block boundary gives up its last token."""
    from specbatch.simulator.engine.kv import BlockManager
    from specbatch.simulator.engine.request_state import Replica

    blocks = BlockManager(capacity=40, block_size=4, depth=1)
    rep = Replica(0)
    rep.state = np.zeros((len(Row), 3), dtype=np.int64)
    rep.state[[Row.PREFILLED, Row.FILL, Row.BLOCKS]] = [[2, 0, 0], [20, 9, 5], [1, 0, 0]]
    rep.free_blocks = 3
    granted = blocks.allocate_chunks(rep, np.arange(3), np.array([6, 9, 5]))
    assert granted.tolist() == [6, 8, 0] and rep.state[Row.BLOCKS].tolist() == [2, 2, 0]
    assert rep.free_blocks == 0
    rep.state[[Row.PREFILLED, Row.FILL, Row.BLOCKS]] = [[0, 0, 0], [8, 9, 5], [0, 0, 0]]
    rep.free_blocks = 2
    assert blocks.allocate_chunks(rep, np.arange(1), np.array([8])).tolist() == [7]
    assert rep.state[Row.BLOCKS].tolist() == [2, 0, 0] and rep.free_blocks == 0


@pytest.mark.parametrize("kv", [dict(), dict(kv_mode="paged"), dict(kv_capacity=100_000),
                                dict(kv_mode="paged", kv_capacity=100_000)])
def test_models_whose_weights_do_not_fit_are_refused_in_every_kv_mode(kv):
    """Llama-3.1-70B + Llama-3.2-1B in bf16 hold 143.6 GB: more than one H100 gives the engine
    at gpu_memory_utilization 0.9 (72 GB), whatever the KV mode or capacity."""
    config = load_config(
        None, scheduler="vllm-v0", target="llama-3.1-70b", draft="llama-3.2-1b", **kv
    )
    cost = build_cost_model("roofline", "h100", "llama-3.1-70b", "llama-3.2-1b")
    with pytest.raises(SpecbatchError, match=r"field gpu_memory_utilization: expected room for "
                       r"the weights of llama-3\.1-70b \+ llama-3\.2-1b \(143\.6 GB.*got 0\.9 of "
                       r"1 x h100 = 72\.0 GB.*tp >= 2") as err:
        kv_capacity(config, cost)
    assert "\n" not in str(err.value)
    two = config.replace(tp=2)
    kv_capacity(two, build_cost_model("roofline", "h100", "llama-3.1-70b", "llama-3.2-1b", tp=2))


def test_the_weights_check_counts_the_draft_and_a_host_drafter_as_free():
    from specbatch.simulator.cost.analytic.memory import check_weights_fit

    check_weights_fit("h100", "llama-3.1-8b", "ngram", 1, 0.9)  # 16 GB: fits
    check_weights_fit("h100", "vicuna-33b", "vicuna-68m", 1, 0.9)  # 65.2 GB of 72: fits
    with pytest.raises(SpecbatchError, match="weights do not fit"):
        check_weights_fit("h100", "vicuna-33b", "vicuna-68m", 1, 0.8)  # 64 GB


def test_paged_capacity_follows_the_targets_precision():
    """The paged pool next to the weights: an fp8 KV cache holds twice the tokens (to the
    token), fp8 weights free their projections' second byte (simulator.cost.analytic.precision)."""
    from specbatch.simulator.run import build_cost

    def pool(**kw):
        config = load_config(None, kv_mode="paged", target="llama-3.1-8b", draft="llama-3.2-1b",
                             **kw)
        return kv_capacity(config, build_cost(config))

    from specbatch.traces.models.shapes import SHAPES

    base, fp8_kv = pool(), pool(kv_cache_dtype="fp8")
    free = 0.9 * 80e9 - 2 * (SHAPES["llama-3.1-8b"].params + SHAPES["llama-3.2-1b"].params)
    per_element = 2 * 32 * 8 * 128 + 2 * 16 * 8 * 64  # K and V of both models' layers
    assert (base, fp8_kv) == (int(free // (2 * per_element)), int(free // per_element))
    assert (base, fp8_kv) == (326_341, 652_683)
    assert (
        pool(quantization="fp8") > base and pool(cost="calibrated", kv_cache_dtype="fp8") == fp8_kv
    )
    with pytest.raises(SpecbatchError, match="field quantization: expected none"):
        load_config(None, cost="profiled", profile="p.parquet", quantization="fp8")
