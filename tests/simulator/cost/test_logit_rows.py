"""The LM head priced only at the rows vLLM samples (simulator.cost.analytic.roofline's ``rows``).

vLLM computes logits at ``logits_indices = query_start_loc[1:] - 1`` without speculation (one
row per scheduled request) and at s_i + 1 rows per request verifying s_i drafts
(vllm/v1/worker/gpu_model_runner.py, ``_prepare_inputs``)."""

import numpy as np
import pytest

from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.interface import takes_logit_rows
from specbatch.simulator.cost.measured.calibrated import CalibratedCost
from specbatch.traces.models.shapes import get_shape


def test_roofline_prefill_head_at_one_row_by_hand():
    """Llama-3.1-8B, one 2048-token prompt on an H100: the FLOPs drop by 2·h·V·(Q − 1)."""
    hw = get_hardware("h100")
    shape = get_shape("llama-3.1-8b")
    cost = RooflineCost(hardware=hw, target=shape, draft=shape)
    c = cost.consts["target"]
    assert c.head_flops == 2.0 * shape.hidden * shape.vocab  # tp 1
    q, kv = np.array([2048]), np.array([0])
    sq, skv, sqkv, sqq = 2048.0, 0.0, 0.0, 2048.0 ** 2
    flops_all = c.flops_per_token * sq + c.attn_flops * (sqkv + 0.5 * (sqq + sq))
    flops_one = flops_all - 2.0 * shape.hidden * shape.vocab * 2047
    nbytes = c.weight_bytes + c.kv_bytes * (skv + 2 * sq) + c.act_bytes_per_token * sq
    expect = max(flops_one * c.inv_compute, nbytes * c.inv_memory, c.floor) + c.fixed
    assert cost.step_time("target", q, kv, rows=1) == pytest.approx(expect, rel=1e-12)
    assert cost.step_time("target", q, kv) == pytest.approx(
        max(flops_all * c.inv_compute, nbytes * c.inv_memory, c.floor) + c.fixed, rel=1e-12)
    assert cost.step_time("target", q, kv, rows=1) < cost.step_time("target", q, kv)


def test_rows_equal_to_tokens_changes_nothing():
    """A decode batch (one row per request) or a verify batch (k+1 rows each) is unchanged."""
    hw = get_hardware("h100")
    shape = get_shape("llama-3.1-8b")
    cost = RooflineCost(hardware=hw, target=shape, draft=shape)
    q, kv = np.array([4, 4, 1]), np.array([100, 200, 300])
    assert cost.step_time("target", q, kv, rows=9) == cost.step_time("target", q, kv)


def test_calibrated_head_at_sampled_rows():
    hw = get_hardware("h100")
    shape = get_shape("llama-3.1-8b")
    cost = CalibratedCost(hardware=hw, target=shape, draft=shape)
    assert takes_logit_rows(cost)
    q, kv = np.array([2048]), np.array([0])
    r = cost.roles["target"]
    full = r.split(2048.0, 0.0, 0.0, 2048.0 ** 2, 1.0)
    one = r.split(2048.0, 0.0, 0.0, 2048.0 ** 2, 1.0, rows=1.0)
    assert one["lm_head"] == pytest.approx(r.head(1.0))
    assert one["layers"] == full["layers"] and one["attention"] == full["attention"]
    assert cost.step_time("target", q, kv, rows=1) == pytest.approx(
        cost.step_time("target", q, kv) - full["lm_head"] + one["lm_head"], rel=1e-12)
