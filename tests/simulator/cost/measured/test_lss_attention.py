"""The attention law of the LLMServingSim-profiled GPUs (simulator.cost.measured.lss_attention):
fitted per regime to a GPU's measured attention calls, checked on the held-out models' tables,
its chunked features counting FlashAttention-2's empty CTAs, occupancy and L2 misses."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.cost.measured.lss_attention import (
    AttentionLaw,
    attention_check,
    attention_features,
    fit_attention,
    fitted_attention,
    longest_query,
)
from specbatch.traces.models.shapes import get_shape

LLAMA = get_shape("llama-3.1-8b")


def test_fit_attention_recovers_a_law_that_generated_its_rows():
    shape, rng = LLAMA, np.random.default_rng(0)
    nd = rng.integers(1, 200, 400).astype(float)
    pc = np.where(rng.random(400) < 0.5, 0.0, rng.integers(2, 2048, 400))
    kp, kd = rng.integers(0, 4096, 400) * (pc > 0), rng.integers(16, 8192, 400)
    sums = (nd + (pc > 0), pc + nd, kp + nd * kd, pc * kp + nd * kd, pc * pc + nd)
    true = AttentionLaw((8e-6, 1e-7, 7e-4, 0.0, 0.0, 0.0, 0.0),
                        (9e-6, 2e-7, 0.0, 4e-3, 3e-4, 2e-3, 2e-4), "synthetic", "rtxpro6000")
    law = fit_attention(shape, 1, sums, true.seconds(shape, 1, *sums), "synthetic",
                        "rtxpro6000")
    assert np.allclose(law.decode, true.decode, rtol=1e-6, atol=1e-12)
    assert np.allclose(law.chunked, true.chunked, rtol=1e-6, atol=1e-12)


def test_a_chunk_in_the_batch_slows_the_decodes_as_measured():
    # RTX PRO 6000, Llama-3.1-8B, one layer: 128 decodes of 1024 cached tokens take 404.9 us
    # alone and 671.7 us next to a 16-token prefill chunk (attention.csv rows)
    law = fitted_attention("rtxpro6000")
    alone = float(law.seconds(LLAMA, 1, 128, 128, 128 * 1024, 128 * 1024, 128))
    mixed = float(law.seconds(LLAMA, 1, 129, 144, 128 * 1024, 128 * 1024, 256 + 128))
    assert alone == pytest.approx(404.9e-6, rel=0.1)
    assert mixed == pytest.approx(671.7e-6, rel=0.15)


def test_the_attention_law_transfers_to_the_held_out_models():
    checks = attention_check("rtxpro6000")
    held = {k: v for k, v in checks.items() if v["held_out"]}
    assert {k.rsplit("|", 1)[0] for k in held} == {"qwen3-32b|tp1", "qwen3-32b|tp2",
                                                   "qwen3-30b-a3b|tp1"}
    for key, v in held.items():  # time-weighted errors (docs/fidelity.md)
        assert abs(v["serving_weighted"]) < 0.04, (key, v)  # the rows a serving step reaches
        if key.endswith("decode"):
            assert abs(v["weighted"]) < 0.05, (key, v)
        else:  # long decodes next to a chunk past L2 and single long CTAs: under-priced
            assert -0.10 < v["weighted"] < 0.0, (key, v)


def test_the_longest_query_is_exact_for_a_chunk_among_decodes_and_for_equal_lengths():
    # one 1024-token chunk and 128 decodes; 8 verifications of 4 tokens
    assert longest_query(129.0, 1152.0, 1024.0**2 + 128) == pytest.approx(1024.0)
    assert longest_query(8.0, 32.0, 128.0) == pytest.approx(4.0)
    # two 500-token chunks among 100 decodes: an upper bound (about 706), below the 1000 tokens
    # of one chunk holding both
    assert 700.0 < longest_query(102.0, 1100.0, 500100.0) < 710.0


def test_the_chunked_features_count_empty_ctas_occupancy_and_l2_misses():
    # Llama-3.1-8B tp 1 (32 query heads, 8 KV heads, d 128) on the RTX PRO 6000 (188 SMs,
    # 128 MB L2); FlashAttention-2's split-KV grid: ceil(q_max / 64) CTAs per (request, head)
    x = attention_features(LLAMA, 1, 129, 1152, 128 * 1024, 128 * 1024, 1024**2 + 128,
                           "rtxpro6000")
    # 16 m-blocks for 129 requests, 128 + 16 of them busy: 32 (129 · 16 − 144) empty CTAs
    assert x[5] == pytest.approx(32 * (129 * 16 - 144) * 1e-6)
    assert x[6] == 0.0  # 512 B · (Σc + Σq) = 67 MB of one KV head's K and V fits the L2
    # 8 verifications of 4 tokens: no empty CTA, 256 CTAs fill the 188 SMs (ω = 1)
    v = attention_features(LLAMA, 1, 8, 32, 8000, 8000, 128, "rtxpro6000")
    assert v[5] == 0.0
    assert v[4] == pytest.approx(2 * 2 * 32 * 128 * 8032 * 1e-9)
    # one request of 2 tokens: 32 CTAs on 188 SMs, each SM's tile work 188 / 32 times longer
    one = attention_features(LLAMA, 1, 1, 2, 100, 100, 4, "rtxpro6000")
    assert one[4] == pytest.approx(2 * 2 * 32 * 128 * 102 * 1e-9 * 188 / 32)
    # Σc + Σq = 500k tokens: a 256 MB slab, half resident; 24 of 32 heads re-read the missed half
    big = attention_features(LLAMA, 1, 2, 500, 499500, 499500, 250000 + 249 ** 2 + 1,
                             "rtxpro6000")
    assert big[6] == pytest.approx(2 * 2 * 24 * 128 * 500000 * 0.5 * 1e-9)
