"""Specification of an EAGLE / MTP head's passes in the engine (simulator.engine.decode,
simulator.cost.features.draft_head): per step, pass 1 over every token of the target's pass
(decoding requests' 1 + s_i and prefill chunks together, no separate chunk pass), then passes 2..D
of one token for each request still drafting over c_i + τ_i + j cached tokens."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.interface import batch_sums
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.run import simulate
from tests.simulator.helpers import LinearCost, const_trace


@dataclass(frozen=True)
class LinearHead(LinearCost):
    """LinearCost's target and later draft passes; pass 1 = 1 + n/2 + Σq/16 + per_kv Σc
    (dyadic: sums stay exact)."""

    def first_pass_time(self, n, sq, skv, sqkv, sqq) -> float:
        return 1.0 + 0.5 * n + 0.0625 * sq + self.per_kv * skv

    def first_pass_step(self, query, kv) -> float:
        return self.first_pass_time(*batch_sums(query, kv))


@dataclass(frozen=True)
class LinearHeadSums(LinearHead):
    """:class:`LinearHead` with the batch-sums fast path."""

    def time_from_sums(self, role, n, sq, skv, sqkv, sqq) -> float:
        if sq <= 0:
            return 0.0
        if role == "target":
            return self.fixed + self.per_token * sq + self.per_kv * skv
        return self.draft_fixed + self.draft_per_token * sq + self.per_kv * skv


COST = dict(per_kv=0.0078125, draft_fixed=0.25)


@pytest.mark.parametrize("cost", [LinearHead(**COST), LinearHeadSums(**COST)])
def test_a_step_with_a_prefill_chunk_prices_the_heads_passes_by_hand(cost):
    """Prompts 20 and 100, budget 64, k = 3, every draft accepted (α = 1). Step 0: A's
    prompt and B's first 44 tokens in one target pass; the head's pass 1 over the same
    64 tokens of 2 requests, nothing after (no request decodes yet). Step 1: A verifies
    q = 4 tokens at its c_A cached ones (pinned by the target's time), B's 56-token chunk
    at 44 cached; the head's pass 1 over both, then passes 2 and 3 for A alone over
    c_A + τ + 1 and c_A + τ + 2 cached tokens (τ = 3)."""
    trace = const_trace(n_requests=2, output_len=30, prompt_lens=np.array([20, 100]), alpha=1.0)
    config = load_config(None, requests=2, max_num_batched_tokens=64, policy="fixed", k=3,
                         draft="eagle3", target="llama-3.1-8b")
    steps = simulate(config, trace, cost_model=cost).steps
    s0, s1 = steps.iloc[0], steps.iloc[1]
    assert (s0.prefill_tokens, s0.batch) == (64, 0)
    assert s0.draft_time == 1.0 + 0.5 * 2 + 0.0625 * 64
    c_a = 21  # prompt + t after the prefill's first token (the engine's KV convention)
    assert (s1.prefill_tokens, s1.batch, s1.verified, s1.accepted, s1.depth) == (56, 1, 3, 3, 3)
    assert s1.target_time == 0.25 * (4 + 56) + COST["per_kv"] * (c_a + 44)
    first = 1.0 + 0.5 * 2 + 0.0625 * (4 + 56) + COST["per_kv"] * (c_a + 44)
    later = sum(0.25 + 0.125 * 1 + COST["per_kv"] * (c_a + 3 + j) for j in (1, 2))
    assert s1.draft_time == first + later


def test_a_separate_draft_model_still_prefills_chunks_in_its_own_pass():
    """The same steps with a draft model (no ``first_pass_time``): step 0's draft time is
    the chunk prefill pass of LinearCost's draft, not a head's pass."""
    trace = const_trace(n_requests=2, output_len=30, prompt_lens=np.array([20, 100]), alpha=1.0)
    config = load_config(None, requests=2, max_num_batched_tokens=64, policy="fixed", k=3)
    steps = simulate(config, trace, cost_model=LinearCost(**COST)).steps
    assert steps.iloc[0].draft_time == 0.25 + 0.125 * 64


class ArraysOnly:
    """A head cost model without ``time_from_sums``: the engine's per-pass array path."""

    def __init__(self, cost):
        self.cost, self.overhead = cost, cost.overhead

    def step_time(self, role, query, kv):
        return self.cost.step_time(role, query, kv)

    def first_pass_time(self, *sums):
        return self.cost.first_pass_time(*sums)

    def first_pass_step(self, query, kv):
        return self.cost.first_pass_step(query, kv)


@pytest.mark.parametrize("kw", [dict(), dict(policy="tetris", extra=1),
                                dict(scheduler="vllm-v0", enable_chunked_prefill=True,
                                     max_num_batched_tokens=96)])
def test_the_sums_path_matches_the_array_path_and_the_reference(synth_trace_natural, kw):
    """EAGLE-3 on the roofline: the sums fast path, the per-pass array path and the reference
    engine give bit-identical step and request tables."""
    config = load_config(None, requests=24, max_num_seqs=8, target="llama-3.1-8b",
                         draft="eagle3", **{"max_num_batched_tokens": 128, **kw})
    cost = build_cost_model("roofline", "h100", "llama-3.1-8b", "eagle3")
    fast = simulate(config, synth_trace_natural, cost_model=cost)
    slow = simulate(config, synth_trace_natural, cost_model=ArraysOnly(cost), reference=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert (fast.steps.draft_time > 0).all()
