"""vLLM V1's step composer (simulator.engine.v1.compose, ``scheduler = "vllm-v1"``, the default).

Hand-computed scenarios pin each rule (one token budget with running requests first, V1's KV
slots per drafter kind, admission blocks, a chunk that preempts rather than shrinks, what a
recompute emits), and a hypothesis test holds the vectorised composer to its per-request
reference twin (simulator.engine.v1.reference) step by step.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import V1_DEFAULT_BATCHED_TOKENS, load_config
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.request_state import Row
from specbatch.simulator.metrics import request_table
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import simulate
from specbatch.simulator.workload.arrivals import build_workload, read_workload_file
from tests.simulator.helpers import LinearCost, const_trace

COST = LinearCost()


def make_engine(trace, reference=False, prefix=None, **kw) -> Engine:
    """An engine over ``trace``'s own requests (burst unless ``arrival`` says), paged KV
    unless ``kv_mode`` says, capacity ``kv_capacity``, no prefix caching unless asked."""
    kw = {"kv_mode": "paged", "requests": trace.n_requests, "enable_prefix_caching": False,
          **kw}
    config = load_config(None, trace="synth", **kw)
    workload = build_workload(config, trace)
    if prefix is not None:
        workload = dataclasses.replace(workload, prefix_group=prefix[0], prefix_len=prefix[1])
    return Engine(config, trace, workload, COST, make_policy(config, trace.K),
                  capacity=config.kv_capacity, reference=reference)


def running(engine: Engine, uids, pos, prefilled=None, blocks=None):
    """Put requests ``uids`` in replica 0's running batch at output positions ``pos``
    (decoding: prompt prefilled) with ``blocks`` blocks each; the pool loses those blocks."""
    rep = engine.replicas[0]
    state = engine.initial.take(list(uids), axis=1)
    state[Row.POS] = pos
    state[Row.PREFILLED] = state[Row.FILL] if prefilled is None else prefilled
    state[Row.BLOCKS] = blocks if blocks is not None else 0
    rep.state = state
    rep.n_prefilling = int(np.count_nonzero(state[Row.PREFILLED] < state[Row.FILL]))
    rep.free_blocks -= int(state[Row.BLOCKS].sum())
    return rep


def queued(engine: Engine, uids):
    rep = engine.replicas[0]
    rep.waiting.extend(uids)
    return rep


# ---------------------------------------------------------------- item 1: the token budget

def test_running_requests_first_then_waiting_chunks_under_one_budget():
    """Budget 10, three decoding requests each verifying 3 drafts (asking 4): they get 4, 4
    and 2 (the third verifies 1 draft), and the waiting request gets nothing. With budget 16
    two decoders take 8 and the waiting prompt of 20 gets a chunk of the 8 left; without
    chunked prefill it does not fit and waits."""
    trace = const_trace(n_requests=4, prompt_len=20, output_len=30)
    eng = make_engine(trace, kv_capacity=10_000, max_num_batched_tokens=10)
    rep = running(eng, [0, 1, 2], [5, 5, 5], blocks=[2, 2, 2])
    queued(eng, [3])
    comp = eng.composer.compose(rep, np.array([4, 4, 4]))
    assert (comp.kept, comp.joined, comp.tokens.tolist()) == (3, (), [4, 4, 2])

    eng = make_engine(trace, kv_capacity=10_000, max_num_batched_tokens=16)
    rep = running(eng, [0, 1], [5, 5], blocks=[2, 2])
    queued(eng, [2, 3])
    comp = eng.composer.compose(rep, np.array([4, 4]))
    assert (comp.joined, comp.tokens.tolist()) == ((2,), [4, 4, 8])

    eng = make_engine(trace, kv_capacity=10_000, max_num_batched_tokens=16,
                      enable_chunked_prefill=False)
    rep = running(eng, [0, 1], [5, 5], blocks=[2, 2])
    queued(eng, [2, 3])
    assert eng.composer.compose(rep, np.array([4, 4])).joined == ()


def test_a_budget_cut_request_verifies_only_the_drafts_that_fit():
    """Fixed k = 3 on a const trace, budget 6, two requests decoding: the first asks and gets
    4 tokens, the second gets 2 (1 draft verified): the step verifies 3 + 1 drafts."""
    trace = const_trace(n_requests=2, prompt_len=4, output_len=40, depth=3)
    eng = make_engine(trace, kv_mode="reserve", policy="fixed", k=3, max_num_batched_tokens=6)
    running(eng, [0, 1], [1, 1])
    eng.start_step(eng.replicas[0], 0.0)
    row = eng.rec.step_rows[-1]
    assert (row.batch, row.verified, row.prefill_tokens) == (2, 4, 0)


def test_steps_are_mixed_and_never_schedule_more_than_the_budget(synth_trace_natural):
    config = load_config(None, trace="synth", requests=40, arrival="poisson", rate=40.0,
                         max_num_batched_tokens=96)
    result = simulate(config, synth_trace_natural, cost_model=COST)
    steps = result.steps
    assert result.summary["scheduler"] == "vllm-v1"
    assert int(steps["scheduled_tokens"].max()) <= 96
    assert ((steps["prefill_tokens"] > 0) & (steps["decode_requests"] > 0)).any()
    assert (steps["scheduled_tokens"]
            == steps["prefill_tokens"] + steps["verified"] + steps["batch"]).all()
    assert (result.requests["tokens"] == result.requests["output_len"]).all()


def test_the_default_budget_is_vllm_serves_and_v0_is_kept_apart():
    config = load_config(None)
    assert config.scheduler == "vllm-v1" and config.chunked
    assert config.token_budget == V1_DEFAULT_BATCHED_TOKENS == 8192
    v0 = load_config(None, scheduler="vllm-v0")
    assert v0.token_budget is None and not v0.chunked


# ---------------------------------------------------------------- item 2: slots per decode step

@pytest.mark.parametrize("draft, lookahead", [("ngram", 0), ("vicuna-68m", 3)])
def test_decode_slots_are_computed_plus_tokens_plus_lookahead(draft, lookahead):
    """Block size 16, prompt 10: at t = 6 the computed KV is 10 + 6 − 1 = 15 slots in 1 block.
    n-gram (no lookahead) proposing nothing asks 15 + 1 = 16 slots: still 1 block (V0 asked
    ⌈(16 + K + 1)/16⌉ = 2). Verifying 3 drafts: 19 slots, 2 blocks; a k = 3 draft model adds
    3 lookahead slots: 22, still 2. At t = 3 (computed 12) the drafter kinds differ: n-gram
    with 3 drafts asks 16 slots (1 block), the draft model 19 (2 blocks)."""
    trace = const_trace(n_requests=1, prompt_len=10, output_len=40, depth=3)
    cases = [(6, 0, 16), (6, 3, 19), (3, 3, 16)]
    for t, drafts, slots in cases:
        eng = make_engine(trace, kv_capacity=16 * 8, block_size=16, draft=draft, k=3)
        assert eng.lookahead == lookahead
        rep = running(eng, [0], [t], blocks=[1])
        comp = eng.composer.compose(rep, np.array([1 + drafts]))
        assert comp.tokens.tolist() == [1 + drafts]
        assert comp.blocks.tolist() == [-(-(slots + lookahead) // 16)], (t, drafts)


def test_ngram_asks_for_the_drafts_it_proposed():
    """A trace whose n-gram drafter proposed 1 token at every row: fixed k = 3 verifies 1
    draft, so each decoding request asks 2 tokens."""
    trace = const_trace(n_requests=2, prompt_len=8, output_len=20, depth=3)
    trace = dataclasses.replace(trace, proposed=np.ones(trace.n_rows, np.int64))
    eng = make_engine(trace, kv_mode="reserve", draft="ngram", policy="fixed", k=3)
    eng.compositions = []
    running(eng, [0, 1], [2, 2])
    eng.start_step(eng.replicas[0], 0.0)
    assert eng.compositions[0][3] == (2, 2)


# ---------------------------------------------------------------- item 3: admission blocks

def test_admission_needs_only_the_blocks_of_the_tokens_scheduled():
    """Block size 16: a fresh prompt of 16 needs 1 block (V0 asked ⌈17/16⌉ = 2); with a budget
    of 8 its first chunk needs 1; a request preempted at t = 5 (prompt 16) resumes with
    ⌈21/16⌉ = 2 blocks. A pool of 1 free block admits the 16-token prompt and no more."""
    trace = const_trace(n_requests=3, prompt_len=16, output_len=20)
    eng = make_engine(trace, kv_capacity=16 * 4, block_size=16)
    comp = eng.composer.compose(queued(eng, [0, 1, 2]), np.zeros(0, np.int64))
    assert comp.joined == (0, 1, 2) and comp.blocks.tolist() == [1, 1, 1]

    eng = make_engine(trace, kv_capacity=16 * 4, block_size=16, max_num_batched_tokens=8)
    comp = eng.composer.compose(queued(eng, [0, 1]), np.zeros(0, np.int64))
    assert (comp.joined, comp.tokens.tolist(), comp.blocks.tolist()) == ((0,), [8], [1])

    eng = make_engine(trace, kv_capacity=16 * 4, block_size=16)
    rep = queued(eng, [0])
    col = eng.initial[:, 0].copy()
    col[Row.POS], col[Row.FILL] = 5, 21
    eng.parked[0] = col
    comp = eng.composer.compose(rep, np.zeros(0, np.int64))
    assert (comp.tokens.tolist(), comp.blocks.tolist()) == ([21], [2])

    eng = make_engine(trace, kv_capacity=16 * 4, block_size=16)
    rep = running(eng, [2], [3], blocks=[3])  # 1 block left
    comp = eng.composer.compose(queued(eng, [0, 1]), np.array([1]))
    assert comp.joined == (0,)


# ---------------------------------------------------------------- item 4: chunks preempt

def test_a_running_chunk_preempts_the_newest_instead_of_shrinking():
    """Block size 4, pool 6 blocks, all held (2 each). Request 0 is mid-prefill (8 of 16
    prompt tokens), requests 1 and 2 decode (prompt 4, t = 1). Budget 9: request 0's next
    chunk is 8 tokens, 16 slots = 4 blocks, 2 more than it holds and none free, so the newest
    (request 2, beyond the budget anyway) is preempted and the chunk stays 8 (V0 shrank it to
    the free pool); request 1 needs 4 + 1 = 5 slots, the 2 blocks it holds."""
    trace = const_trace(n_requests=3, output_len=10, prompt_lens=[16, 4, 4], depth=2)
    eng = make_engine(trace, kv_capacity=24, block_size=4, policy="ar", k=0,
                      max_num_batched_tokens=9)
    rep = running(eng, [0, 1, 2], [0, 1, 1], prefilled=[8, 4, 4], blocks=[2, 2, 2])
    comp = eng.composer.compose(rep, np.array([8, 1, 1]))
    assert comp.kept == 2 and comp.tokens.tolist() == [8, 1]
    assert comp.blocks.tolist() == [4, 2] and comp.free == 0
    eng.composer.apply(rep, comp)
    assert list(rep.waiting) == [2] and eng.rec.preemptions[2] == 1
    assert eng.parked[2][Row.FILL] == 4 + 1  # it recomputes prompt + t


def test_a_request_whose_only_victim_is_itself_stops_the_running_loop():
    """Pool 4 blocks of 2, two ar requests of prompt 2 holding 2 blocks each. At t = 2 both
    need 2 + 2 − 1 + 1 = 4 slots: nothing moves. Request 1 at t = 3 needs a third block with
    none free: the newest running request is itself, so it is preempted and frees its 2.
    Request 0 at t = 3 instead preempts request 1 and takes one of the 2 freed blocks."""
    trace = const_trace(n_requests=2, output_len=10, prompt_len=2, depth=2)
    for pos, kept, tokens, blocks, free in (([2, 2], 2, [1, 1], [2, 2], 0),
                                            ([2, 3], 1, [1], [2], 2),
                                            ([3, 2], 1, [1], [3], 1)):
        eng = make_engine(trace, kv_capacity=8, block_size=2, policy="ar", k=0)
        rep = running(eng, [0, 1], pos, blocks=[2, 2])
        comp = eng.composer.compose(rep, np.array([1, 1]))
        assert (comp.kept, comp.tokens.tolist(), comp.blocks.tolist(), comp.free) == (
            kept, tokens, blocks, free), pos


# ---------------------------------------------------------------- item 5: recompute

def test_a_completed_recompute_emits_the_next_token():
    """A request preempted at t = 5 recomputes prompt + 5 tokens; the step that completes
    them samples token 6 (position 5 -> 6), as a fresh prefill samples its first; its
    first-token time is the one from before the preemption."""
    trace = const_trace(n_requests=1, prompt_len=8, output_len=20, depth=2)
    eng = make_engine(trace, kv_capacity=64, block_size=4, policy="ar", k=0)
    rep = queued(eng, [0])
    col = eng.initial[:, 0].copy()
    col[Row.POS], col[Row.FILL] = 5, 13
    eng.parked[0] = col
    eng.rec.first_token[0] = 1.5
    eng.start_step(rep, 10.0)
    row = eng.rec.step_rows[-1]
    assert (row.prefill_tokens, row.emitted, row.batch) == (13, 1, 0)
    assert int(rep.state[Row.POS, 0]) == 6 and eng.rec.first_token[0] == 1.5


def test_preemption_under_v1_finishes_every_request_with_its_output():
    trace = const_trace(n_requests=6, output_len=24, prompt_len=6, depth=3)
    result = simulate(load_config(None, trace="synth", requests=6, kv_mode="paged",
                                  kv_capacity=64, block_size=4, policy="fixed", k=2),
                      trace, cost_model=COST)
    assert result.summary["preemptions"] > 0
    assert (result.requests["tokens"] == 24).all()
    assert int(result.steps["emitted"].sum()) == 6 * 24


def test_a_pool_too_small_for_v1s_last_step_is_a_one_line_error():
    trace = const_trace(n_requests=1, output_len=20, prompt_len=10, depth=3)
    with pytest.raises(SpecbatchError, match="kv_capacity.*vllm-v1"):
        simulate(load_config(None, trace="synth", requests=1, kv_mode="paged",
                             kv_capacity=32, block_size=16, k=3), trace, cost_model=COST)
    with pytest.raises(SpecbatchError, match="max_num_batched_tokens"):
        simulate(load_config(None, trace="synth", requests=1, max_num_batched_tokens=16,
                             enable_chunked_prefill=False), trace, cost_model=COST)


# ---------------------------------------------------------------- prefix caching

def prefix_engine(trace, groups, shared, **kw):
    return make_engine(trace, enable_prefix_caching=True, block_size=4,
                       prefix=(np.asarray(groups), np.asarray(shared)), **kw)


def test_a_readmitted_request_finds_its_freed_blocks_unless_evicted():
    """Block size 4, prompt 16: admitted, its 4 full blocks are hashed when scheduled. Freed
    (preempted) and readmitted at once it finds ⌊(16 − 1)/4⌋ = 3 of them (the last token is
    always recomputed): 4 tokens to prefill, 12 cached, 4 blocks held. If another request
    took the free pool's blocks meanwhile (LRU: its freed tail blocks go first), it
    recomputes everything."""
    trace = const_trace(n_requests=2, prompt_len=16, output_len=8, depth=2)
    for pool, hits in ((8, 3), (4, 0)):
        eng = prefix_engine(trace, [-1, -1], [0, 0], kv_capacity=4 * pool, policy="ar", k=0)
        rep = queued(eng, [0])
        eng.composer.apply(rep, eng.composer.compose(rep, np.zeros(0, np.int64)))
        assert rep.state[Row.BLOCKS].tolist() == [4]
        rep.prefix.materialise(rep.state[Row.UID], rep.state[Row.BLOCKS])  # a preemption
        rep.prefix.release(0)  # preempted: its blocks back to the queue's tail
        rep.state = rep.state[:, :0]
        rep.n_prefilling = 0
        col = eng.initial[:, 0].copy()
        eng.parked[0] = col
        rep.waiting.append(0)
        if pool == 4:  # request 1 takes the whole pool first, evicting request 0's hashes
            rep.prefix.allocate(1, 4)
            rep.prefix.release(1)
        comp = eng.composer.compose(rep, np.zeros(0, np.int64))
        assert comp.cached == (4 * hits,) and comp.tokens.tolist() == [16 - 4 * hits]
        assert comp.blocks.tolist() == [4]


def test_requests_of_one_prefix_group_share_its_full_blocks():
    """Prompts of 16 sharing a 10-token prefix, block size 4: the first admitted hashes 2
    shared blocks (10 // 4) and 2 of its own; the second, admitted in the same step, finds
    the 2 shared blocks (8 tokens) and takes 2 new ones: 6 blocks of the pool in use."""
    trace = const_trace(n_requests=2, prompt_len=16, output_len=8, depth=2)
    eng = prefix_engine(trace, [0, 0], [10, 10], kv_capacity=4 * 10, policy="ar", k=0)
    comp = eng.composer.compose(queued(eng, [0, 1]), np.zeros(0, np.int64))
    assert comp.joined == (0, 1) and comp.cached == (0, 8)
    assert comp.tokens.tolist() == [16, 8] and comp.blocks.tolist() == [4, 4]
    assert comp.free == 10 - 6


def test_prefix_caching_runs_to_completion_and_saves_prefill(synth_trace_natural):
    kw = dict(trace="synth", requests=24, kv_mode="paged", kv_capacity=600)
    off = simulate(load_config(None, enable_prefix_caching=False, **kw), synth_trace_natural,
                   cost_model=COST)
    on = simulate(load_config(None, **kw), synth_trace_natural, cost_model=COST)
    assert (on.requests["tokens"] == on.requests["output_len"]).all()
    assert on.summary["preemptions"] > 0
    assert on.steps["prefill_tokens"].sum() < off.steps["prefill_tokens"].sum()
    assert on.summary["recomputed_tokens"] < off.summary["recomputed_tokens"]


def test_the_workload_file_names_prefix_groups(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("prompt_len,output_len,prefix_group,prefix_len\n"
                    "20,5,sys-a,12\n30,5,,0\n25,5,sys-a,12\n18,5,sys-b,16\n")
    data = read_workload_file(path)
    assert data["prefix_group"].tolist() == [0, -1, 0, 1]
    assert data["prefix_len"].tolist() == [12, 0, 12, 16]
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt_len,output_len,prefix_group\n20,5,a\n")
    with pytest.raises(SpecbatchError, match="prefix_len"):
        read_workload_file(bad)


# ---------------------------------------------------------------- the reference twin

@st.composite
def workloads(draw):
    n = draw(st.integers(1, 10))
    prompts = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.5, 2.0, 7.0]), min_size=n, max_size=n))
    policy = draw(st.sampled_from(["fixed", "ar", "tetris"]))
    k = 0 if policy == "ar" else draw(st.integers(1, 3))
    extra = 1 if policy == "tetris" else 0
    draft = draw(st.sampled_from(["vicuna-68m", "ngram"]))
    block = draw(st.sampled_from([1, 2, 4, 8, 16]))
    mode = draw(st.sampled_from(["paged", "paged", "reserve"]))
    chunked = draw(st.booleans())
    longest = max(p + o for p, o in zip(prompts, outputs))
    budget = draw(st.integers(1, 64)) if chunked else draw(st.integers(longest, longest + 40))
    depth = k + extra
    lookahead = depth if policy != "ar" and draft != "ngram" else 0
    need = -(-(longest - 1 + depth + lookahead) // block)
    capacity = (need + draw(st.integers(0, 8))) * block
    if mode == "reserve":
        capacity = longest + depth + 1 + draw(st.integers(0, 60))
    groups = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
    shared = draw(st.lists(st.integers(0, 40), min_size=3, max_size=3))
    kw = dict(policy=policy, k=k, extra=extra, draft=draft, block_size=block, kv_mode=mode,
              enable_prefix_caching=draw(st.booleans()),
              kv_capacity=capacity, enable_chunked_prefill=chunked,
              max_num_batched_tokens=budget, max_num_seqs=draw(st.integers(1, 6)),
              long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 8])),
              arrival="trace")
    trace = const_trace(n_requests=n, output_lens=outputs, prompt_lens=prompts, depth=4,
                        arrival=np.cumsum(gaps))
    prefix = (np.asarray(groups, dtype=np.int64),
              np.asarray([shared[g] if g >= 0 else 0 for g in groups], dtype=np.int64))
    return trace, kw, prefix


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=workloads())
def test_the_composer_matches_its_reference_twin_at_every_step(case):
    """Who runs, the tokens each, the blocks each holds, who is preempted, the pool left and
    the prefix-cache hits of the admitted: identical at every step of the vectorised composer
    and the per-request twin."""
    trace, kw, prefix = case
    logs, tables = [], []
    for reference in (False, True):
        eng = make_engine(trace, reference=reference, prefix=prefix, **kw)
        eng.compositions = []
        rec = eng.run()
        logs.append(eng.compositions)
        tables.append(request_table(rec, eng.w))
        for comp in eng.compositions:
            assert sum(comp[3]) <= kw["max_num_batched_tokens"]
        for rep in eng.replicas:  # every block back in the pool, shared ones included
            if rep.prefix is not None:
                assert rep.prefix.n_free == rep.free_blocks == eng.blocks.pool
    assert logs[0] == logs[1]
    event("preempted" if any(comp[5] for comp in logs[0]) else "no preemption")
    event("prefix hit" if any(any(c[7]) for c in logs[0]) else "no prefix hit")
    assert tables[0].equals(tables[1])
    assert (tables[0]["tokens"] == tables[0]["output_len"]).all()
