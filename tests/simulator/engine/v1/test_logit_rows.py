"""The vllm-v1 composer prices the target pass's LM head at the rows vLLM samples: one per
scheduled request (``logits_indices = query_start_loc[1:] - 1``, a partial prefill chunk
included) plus one per verified draft (vllm/v1/worker/gpu_model_runner.py, _prepare_inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import const_trace

SHAPE = "llama-3.1-8b"


def engine(trace, **kw):
    from specbatch.traces.models.shapes import get_shape

    shape = get_shape(SHAPE)
    cost = RooflineCost(hardware=get_hardware("h100"), target=shape, draft=shape)
    config = load_config(None, trace="synth", kv_mode="paged", requests=trace.n_requests,
                         kv_capacity=1 << 16,
                         enable_prefix_caching=False, **kw)
    eng = Engine(config, trace, build_workload(config, trace), cost,
                 make_policy(config, trace.K), capacity=config.kv_capacity)
    return eng, cost


def test_a_prefill_step_prices_the_head_at_one_row_per_prompt():
    """Two 512-token prompts prefill in one step: Q = 1024 query tokens, R = 2 logit rows."""
    trace = const_trace(n_requests=2, prompt_len=512, output_len=4, depth=1)
    eng, cost = engine(trace, policy="ar")
    assert eng.logit_rows
    eng.run()
    row = eng.rec.step_rows[0]
    assert row.prefill_tokens == 1024
    q, kv = np.array([512, 512]), np.array([0, 0])
    assert row.target_time == pytest.approx(cost.step_time("target", q, kv, rows=2), rel=1e-12)
    assert row.target_time < cost.step_time("target", q, kv)


def test_a_chunked_prompt_still_takes_one_row():
    """A 512-token prompt under a 128-token budget: the first chunk (128 tokens) takes one
    logit row (vLLM samples it and discards the token)."""
    trace = const_trace(n_requests=1, prompt_len=512, output_len=4, depth=1)
    eng, cost = engine(trace, policy="ar", max_num_batched_tokens=128)
    eng.run()
    row = eng.rec.step_rows[0]
    assert row.prefill_tokens == 128
    assert row.target_time == pytest.approx(
        cost.step_time("target", np.array([128]), np.array([0]), rows=1), rel=1e-12)


def test_a_verify_step_next_to_a_chunk_takes_s_plus_one_rows_and_one():
    """Fixed k = 3, budget 2048: a 4-token prompt prefills with the first 2044 tokens of an
    8192-token one; next step it verifies 3 drafts (query 4 over 5 cached tokens: prompt and
    first token) next to the second 2044-token chunk: R = (3 + 1) + 1 = 5 logit rows, not
    Σq = 2048 (compute-bound here, so the head's rows show)."""
    trace = const_trace(n_requests=2, output_len=8, depth=3, prompt_lens=np.array([4, 8192]))
    eng, cost = engine(trace, policy="fixed", k=3, max_num_batched_tokens=2048)
    eng.run()
    row = eng.rec.step_rows[1]
    assert (row.batch, row.verified, row.prefill_tokens) == (1, 3, 2044)
    q, kv = np.array([4, 2044]), np.array([5, 2044])
    assert row.target_time == pytest.approx(cost.step_time("target", q, kv, rows=5), rel=1e-12)
    assert row.target_time < cost.step_time("target", q, kv, rows=2048)
