"""Specification of vLLM V1's draft-model proposer in the cost model
(simulator/cost/features/draft_model_pass.py): pass 1 runs the draft model over the target's
whole pass plus one token per request (vllm/v1/spec_decode/draft_model.py,
``set_inputs_first_pass``), then k − 1 one-token passes; where it applies; the engine's steps."""

from __future__ import annotations

import numpy as np
import pytest

import specbatch as sb
from specbatch.simulator.cost.features.draft_model_pass import (
    DraftModelPasses,
    draft_model_passes_apply,
)
from specbatch.simulator.cost.registry import build_cost_model


class Recorder:
    """A sums cost model that records its calls and returns a fixed time."""

    overhead = 0.0
    logit_rows = True

    def __init__(self):
        self.calls = []

    def step_time(self, role, query, kv, **rows):
        self.calls.append(("step", role, np.asarray(query).tolist(), np.asarray(kv).tolist(),
                           rows))
        return 1.0

    def time_from_sums(self, role, n, sq, skv, sqkv, sqq, **rows):
        self.calls.append(("sums", role, n, sq, skv, sqkv, sqq, rows))
        return 2.0


def test_pass_one_sums_by_hand():
    """Two decoding requests verifying k = 3 (q = 4 each) at KV 100 and 200 and a 50-token
    prefill chunk at KV 0: the target pass has n = 3, Σq = 58, Σc = 300, Σq·c = 1,200,
    Σq² = 2,532. Pass 1 has queries 5, 5, 51 over the same KV: Σq' = 61, Σq'·c = 500 + 1,000
    = 1,500, Σq'² = 25 + 25 + 2,601 = 2,651, and 3 logit rows (one per request)."""
    inner = Recorder()
    cost = DraftModelPasses(inner)
    assert cost.first_pass_time(3, 58.0, 300.0, 1200.0, 2532.0) == 2.0
    assert inner.calls[-1] == ("sums", "draft", 3, 61.0, 300.0, 1500.0, 2651.0, {"rows": 3.0})
    assert cost.first_pass_step(np.array([4, 4, 50]), np.array([100, 200, 0])) == 1.0
    assert inner.calls[-1] == ("step", "draft", [5, 5, 51], [100, 200, 0], {"rows": 3.0})
    # every other pass is the inner model's, unchanged
    assert cost.time_from_sums("draft", 2, 2.0, 300.0, 300.0, 2.0) == 2.0
    assert inner.calls[-1] == ("sums", "draft", 2, 2.0, 300.0, 300.0, 2.0, {})


def test_pass_one_is_the_rooflines_pass_over_the_merged_tokens():
    """On the roofline, pass 1 from the sums equals the draft's pass over the arrays
    q_i + 1 with the LM head at n rows."""
    model = build_cost_model(cost="roofline", hardware="h100", target="llama-3.1-8b",
                             draft="llama-3.2-1b")
    cost = DraftModelPasses(model)
    q, c = np.array([4, 4, 50]), np.array([100, 200, 0])
    want = model.step_time("draft", q + 1, c, rows=3.0)
    assert cost.first_pass_time(3, 58.0, 300.0, 1200.0, 2532.0) == pytest.approx(want, rel=1e-12)
    assert cost.first_pass_step(q, c) == want
    assert cost.kv_capacity_tokens(0.9) == model.kv_capacity_tokens(0.9)  # the inner's memory


@pytest.mark.parametrize("knobs, applies", [
    ({}, True),                                          # vllm-v1, a draft model, TV
    ({"verify": "block"}, True),
    ({"scheduler": "vllm-v0"}, False),                   # V0's draft worker: k 1-token passes
    ({"draft": "ngram", "trace": "traces/data/smollm2-ngram"}, False),
    ({"draft": "eagle3", "target": "llama-3.1-8b"}, False),  # a head prices its own pass 1
])
def test_where_it_applies(knobs, applies):
    assert draft_model_passes_apply(sb.load_config(None, **knobs)) is applies


def run(**knobs):
    config = sb.load_config(None, requests=1, policy="fixed", k=3, host="fixed", engine="numpy",
                            target="llama-3.1-8b", draft="llama-3.2-1b",
                            cost="roofline", **knobs)  # the model the tests price by hand
    return sb.simulate(config)


def test_the_engines_steps_price_vllm_v1s_passes():
    """One request of prompt P under vllm-v1: the prefill step's draft time is pass 1 over
    P + 1 tokens (its prompt and the sampled token, one logit row); a decode step that
    verified s = 3 at the engine's KV c and accepted τ is pass 1 over s + 2 tokens at c, then
    2 one-token passes at c + τ + 1 and c + τ + 2."""
    model = build_cost_model(cost="roofline", hardware="h100", target="llama-3.1-8b",
                             draft="llama-3.2-1b")
    result = run()
    steps, p = result.steps, int(result.requests["prompt_len"][0])
    assert steps["prefill_tokens"][0] == p
    assert steps["draft_time"][0] == model.step_time("draft", np.array([p + 1]), np.array([0]),
                                                     rows=1.0)
    c = p + 1  # the engine's KV of the first decode step (prompt + position)
    tau = int(steps["accepted"][1])
    assert steps["verified"][1] == 3 and steps["depth"][1] == 3
    want = (model.step_time("draft", np.array([5]), np.array([c]), rows=1.0)
            + sum(model.step_time("draft", np.array([1]), np.array([c + tau + j]))
                  for j in (1, 2)))
    assert steps["draft_time"][1] == pytest.approx(want, rel=1e-12)


def test_vllm_v0_keeps_the_draft_workers_passes():
    """Under vllm-v0 the same decode step is k = 3 one-token passes at c, c + 1, c + 2."""
    model = build_cost_model(cost="roofline", hardware="h100", target="llama-3.1-8b",
                             draft="llama-3.2-1b")
    result = run(scheduler="vllm-v0")
    steps, p = result.steps, int(result.requests["prompt_len"][0])
    c = p + 1
    want = sum(model.step_time("draft", np.array([1]), np.array([c + d])) for d in range(3))
    assert steps["draft_time"][1] == pytest.approx(want, rel=1e-12)
