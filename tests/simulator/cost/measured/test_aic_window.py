"""cost = "aic" on sliding-window layers (simulator.cost.measured.aic_cost's docstring): the
attention law's (L − L_s)/L share at the full sums plus its L_s/L share at the sums a sliding
layer presents (simulator.cost.analytic.window; on an FA3 GPU the keys and pairs its tiles
compute, aic_fa3_window), every other part as the full-attention model prices it; a window no
context reaches changes nothing; such a role is priced from arrays."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.interface import sums_path
from specbatch.simulator.cost.measured.aic_cost import AicCost, aic_covers
from specbatch.simulator.cost.measured.aic_fa3_window import fa3_window_sums
from specbatch.simulator.cost.measured.aic_window_prefill import causal_products, local_products
from specbatch.simulator.engine.v1.compiled import compiled_gap
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import simulate
from specbatch.traces.models.shapes import get_shape

H100 = get_hardware("h100")
DRAFT = get_shape("llama-3.2-1b")
# Llama-3.1-8B with 24 of its 32 layers sliding over 512 tokens
SLID = dataclasses.replace(get_shape("llama-3.1-8b"), name="llama-3.1-8b-w512",
                           sliding_window=512, sliding_layers=24)


def unwindowed(shape):
    return dataclasses.replace(shape, sliding_window=0, sliding_layers=0)


@pytest.fixture(scope="module")
def slid():
    return AicCost(H100, SLID, DRAFT), AicCost(H100, unwindowed(SLID), DRAFT)


def test_a_windowed_pass_is_the_two_shares_of_the_law_by_hand(slid):
    windowed, full = slid
    q, c = np.array([1, 1, 4]), np.array([100, 3000, 2000])
    # the window holds K^W = 100 + 511 + 511, P^W = 101 + 512 + 4·512; H100 runs FA3
    # (aic_fa3_window): the decodes read what the window holds; with G = 4 query heads per KV
    # head in 64-row (one warp group) x 128-key tiles, request 2's tile (4 positions, 16 rows)
    # walks keys 1489..2003, 5 tiles, where the causal kernel walks 16: its pairs are
    # 4·5/2 + 4·2000 + 4·5·128 − 4·16·128 = 2378
    assert fa3_window_sums(q, c, 512, 32, 8, 128, 2.0) == (1122.0, 101 + 512 + 2378)
    cached, pairs = 1122.0, 2991.0
    # no request is longer than W (aic_window_prefill): the queries stay as they are, and the
    # pairs past each request's first against cached keys are 2991 − (1 + 1 + 10) − 1122
    r = windowed.roles["target"]
    got = r.window_sums(q, c, (cached, 2661.0))
    assert got == (cached, pairs, 6.0, 18.0, 1857.0, 0.0, 0.0, 0.0)
    n, sq, skv, sqkv, sqq = 3, 6.0, 5100.0, 100.0 + 3000.0 + 8000.0, 18.0
    law = r.attention
    by_hand = (8 / 32 * law.seconds(n, sq, skv, sqkv, sqq)
               + 24 / 32 * law.seconds(n, sq, cached, cached + 1857.0, sqq))
    parts = windowed.breakdown("target", q, c)
    assert parts["attention"] == pytest.approx(by_hand, rel=1e-12)
    assert windowed.time_from_sums("target", n, sq, skv, sqkv, sqq, window=got) \
        == windowed.step_time("target", q, c)
    # every other part is the full-attention model's; the window makes this pass cheaper
    other = full.breakdown("target", q, c)
    for part in ("layers", "experts", "allreduce", "lm_head"):
        assert parts[part] == other[part]
    assert parts["attention"] < other["attention"]
    with pytest.raises(SpecbatchError, match="window sums"):
        windowed.time_from_sums("target", n, sq, skv, sqkv, sqq)


def test_the_tile_rule_is_fa3s_other_backends_keep_the_exact_window_sums(slid):
    windowed, _ = slid
    q, c = np.array([1, 1, 4]), np.array([100, 3000, 2000])
    exact = (1122.0, 2661.0)
    assert windowed.roles["target"].window_sums(q, c, exact)[:2] == (1122.0, 2991.0)  # FA3
    a100 = AicCost(get_hardware("a100"), SLID, unwindowed(SLID))  # FlashAttention 2
    assert a100.roles["target"].window_sums(q, c, exact)[:2] == exact


def test_a_prompt_past_the_window_pays_its_first_w_tokens_then_alpha_and_beta(slid):
    # aic_window_prefill: two prompts of 2048 tokens under W = 512 are the grid's causal
    # prefill of 512 tokens each, plus α per token and β per local tile product past them
    windowed, full = slid
    r = windowed.roles["target"]
    q, c = np.array([2048, 2048]), np.array([0, 0])
    got = r.window_sums(q, c, (0.0, 0.0))
    rest = 2 * (local_products([2048], 512, r.tile_shape())[0]
                - causal_products([512], r.tile_shape())[0])
    assert got[2:] == (1024.0, 2 * 512.0 ** 2, 0.0, 2 * 1536.0, rest, 2.0)
    bp, alpha, beta = r.prefill_split()
    a, b = np.interp(2.0, bp, alpha), np.interp(2.0, bp, beta)
    law = r.attention
    local = law.seconds(2, 1024.0, 0.0, 0.0, 2 * 512.0 ** 2) + a * 3072.0 + b * rest
    share = 8 / 32 * law.seconds(2, 4096.0, 0.0, 0.0, 2 * 2048.0 ** 2) + 24 / 32 * local
    assert windowed.breakdown("target", q, c)["attention"] == pytest.approx(share, rel=1e-12)
    assert 0 < share < full.breakdown("target", q, c)["attention"]


def test_the_breakdown_sums_to_the_pass(slid):
    windowed, _ = slid
    for q, c in (([1] * 8, [300] * 8), ([4] * 3 + [512], [900, 20, 0, 0]),
                 ([1] * 16, [40000] * 16)):
        q, c = np.array(q), np.array(c)
        for rows in (None, 2.0):
            parts = windowed.breakdown("target", q, c, rows=rows)
            assert sum(parts.values()) == pytest.approx(
                windowed.step_time("target", q, c, rows=rows), rel=1e-12)


@pytest.mark.parametrize("name, tp", [("mistral-7b-v0.1", 1), ("google/gemma-3-1b-it", 1),
                                      ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 4)])
def test_a_window_every_request_fits_in_prices_as_full_attention(name, tp):
    shape = get_shape(name)
    windowed, full = AicCost(H100, shape, DRAFT, tp=tp), AicCost(H100, unwindowed(shape),
                                                                 DRAFT, tp=tp)
    w = shape.sliding_window
    for q, c in (([1, 1, 4, 64], [300, w - 1, 200, 0]), ([1] * 32, [w - 1] * 32),
                 ([w], [0])):
        q, c = np.array(q), np.array(c)
        assert (q + c).max() <= w
        assert windowed.step_time("target", q, c) == pytest.approx(
            full.step_time("target", q, c), rel=1e-12)
    ones, long = np.ones(32, dtype=np.int64), np.full(32, 4 * w)  # past it: cheaper
    assert windowed.step_time("target", ones, long) < full.step_time("target", ones, long)


def test_coverage_admits_sliding_windows_and_keeps_the_other_refusals():
    for name in ("mistral-7b-v0.1", "gemma-3-270m", "google/gemma-3-1b-it"):
        assert aic_covers("h100", get_shape(name), DRAFT, 1) is None
    scout = get_shape("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert aic_covers("h100", scout, DRAFT, 4) is None
    static_fp8 = type(scout)(**{**scout.__dict__, "quantization": "fp8",
                                "quant_scheme": "static"})  # the fp8 MoE rows' scheme
    assert aic_covers("h100", static_fp8, DRAFT, 2) is None
    assert "awq" in aic_covers("h100", get_shape("mistral-7b-v0.1"), None, 1,
                               quantization="awq")


def test_a_windowed_role_is_priced_from_arrays_by_the_numpy_engine(slid):
    windowed, full = slid
    assert windowed.windowed and not full.windowed
    assert not sums_path(windowed) and sums_path(full)
    assert "sliding-window" in windowed.table_gap("target")
    assert windowed.pass_table("target", 64) is None
    assert windowed.table_gap("draft") is None  # the draft has no window: its table stands
    config = load_config(None, trace="synth", policy="fixed", requests=8)
    gap = compiled_gap(config, make_policy(config, 8), windowed)
    assert gap is not None and "sliding-window" in gap


def test_the_engine_prices_a_window_no_context_reaches_as_full_attention(synth_trace_natural):
    # every layer slides (L_s = L): the array path must give the run of the sums path on the
    # unwindowed shape, byte for byte
    wide = dataclasses.replace(get_shape("mistral-7b-v0.1"), sliding_window=10**6)
    config = load_config(None, trace="synth", policy="fixed", requests=16, seed=3)
    a = simulate(config, synth_trace_natural, cost_model=AicCost(H100, wide, DRAFT))
    b = simulate(config, synth_trace_natural,
                 cost_model=AicCost(H100, unwindowed(wide), DRAFT))
    assert a.summary == b.summary and a.summary["engine_ran"] == "numpy"
    assert a.steps.equals(b.steps)
    narrow = dataclasses.replace(wide, sliding_window=16)
    c = simulate(config, synth_trace_natural, cost_model=AicCost(H100, narrow, DRAFT))
    assert c.summary["target_time"] < a.summary["target_time"]
