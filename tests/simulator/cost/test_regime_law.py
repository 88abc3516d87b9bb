"""The two-regime attention law in packed form (simulator.cost.tabulated.regime_attention) and
the sampler term of a PassTable: hand-computed numbers, the fused dot product against exact
rational arithmetic, the compiled copy bit for bit."""

from fractions import Fraction

import numpy as np
import pytest

from specbatch.simulator.cost.tabulated import (
    R_CHUNKED,
    R_DECODE,
    R_LENGTH,
    AttentionLaw,
    PassTable,
    pack_regimes,
    regime_attention,
    regime_least,
    table_time,
)

#: decode (1, n, B_kv) and chunked (1, n, F, B_H, E, B_miss) coefficients of a hand law
DECODE = (1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0)
CHUNKED = (1.0, 1.0, 0.0, 5.0, 7.0, 11.0, 13.0)


def hand_law(sms: float = 0.0, l2: float = 0.0) -> tuple:
    # 2 layers, 4 query heads, 2 KV heads, d = 8, 2-byte KV, 4 query rows per CTA:
    # 2b H_kv d = 64, 4 H d = 128, 2b H d = 128, 2b d = 32, 2b (H - H_kv) d = 64
    return pack_regimes(2, 4.0, 2.0, 8, 2, 4, sms, l2, DECODE, CHUNKED)


def test_the_packed_constants():
    g = hand_law(32.0, 1000.0)
    assert len(g) == R_LENGTH
    assert g[:R_DECODE] == (2.0, 4.0, 64.0, 128.0, 128.0, 32.0, 1000.0, 32.0, 64.0, 4.0)
    assert g[R_DECODE:R_CHUNKED] == DECODE and g[R_CHUNKED:] == CHUNKED
    with pytest.raises(ValueError, match="7 coefficients"):
        pack_regimes(2, 4.0, 2.0, 8, 2, 4, 0.0, 0.0, DECODE[:6], CHUNKED)


def test_a_decode_batch_by_hand():
    # 3 decodes over 10, 20, 30 cached tokens: Σq = Σq² = 3 (decode regime), Σc = Σq·c = 60;
    # B_kv = 64 (60 + 3) 1e-9 GB; A = L (1 + 2·3 + 3 B_kv)
    g = hand_law()
    want = 2 * (1 + 2 * 3 + 3 * 64 * 63e-9)
    assert regime_attention(g, 3, 3, 60, 60, 3) == pytest.approx(want, rel=1e-15)
    # n < 1 is priced at n' = 1 (LssPricer.parts), an empty pass at 0
    assert regime_attention(g, 0, 1, 10, 10, 1) == regime_attention(g, 1, 1, 10, 10, 1)
    assert regime_attention(g, 0, 0, 0, 0, 0) == 0.0


def chunk_batch() -> tuple:
    # a chunk of 8 tokens over 4 cached beside 2 decodes over 10 each: n = 3, Σq = 10,
    # Σc = 24, Σq·c = 32 + 20 = 52, Σq² = 64 + 2 = 66 (chunked: Σq² > Σq)
    return 3, 10, 24, 52, 66


def test_a_chunk_beside_decodes_by_hand():
    g = hand_law()
    # F = 128 (52 + (66 + 10)/2) 1e-12 = 11520e-12; B_H = 128 (24 + 10) 1e-9 = 4352e-9;
    # the longest query 10/3 + sqrt((66 - 100/3)(2/3)) = 10/3 + 14/3 = 8: 2 tiles of 4 rows,
    # the grid 3 · 2 = 6 tiles per head against Σ ceil(q_i / 4) = 2 + 1 + 1 = 4: E = 4 · 2 ·
    # 1e-6; no GPU named: ω = 1, no misses
    want = 2 * (1 + 3 + 5 * 11520e-12 + 7 * 4352e-9 + 11 * 8e-6)
    assert regime_attention(g, *chunk_batch()) == pytest.approx(want, rel=1e-15)


def test_occupancy_and_l2_misses_by_hand():
    g = hand_law(sms=32.0, l2=1000.0)
    # 4 heads x 4 tiles = 16 CTAs on 32 SMs: ω = 2 on F and B_H; one KV head's slab 32 · 34 =
    # 1088 bytes > 1000 of L2: resident 1000/1088, B_miss = 64 · 34 · (88/1088) 1e-9 = 176e-9
    want = 2 * (1 + 3 + 5 * 2 * 11520e-12 + 7 * 2 * 4352e-9 + 11 * 8e-6 + 13 * 176e-9)
    assert regime_attention(g, *chunk_batch()) == pytest.approx(want, rel=1e-15)
    # 8 SMs: the 16 CTAs fill them, ω = 1; a 2000-byte L2 holds the slab: no misses
    full = hand_law(sms=8.0, l2=2000.0)
    assert regime_attention(full, *chunk_batch()) == regime_attention(hand_law(),
                                                                      *chunk_batch())


def exact_fma(a: float, b: float, c: float) -> float:
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def test_the_dot_product_is_a_chain_of_fused_multiply_adds():
    # decode law over one layer with c = (c0, c1, c2): A = fma(B_kv, c2, fma(n, c1, c0)), each
    # step rounded once (exact rationals), where plain products and sums round three times
    rng = np.random.default_rng(7)
    fused_differs = 0
    for _ in range(3000):
        c = tuple(float(v) for v in rng.random(3) * 10.0 ** rng.integers(-7, 0, 3))
        g = pack_regimes(1, 4.0, 2.0, 8, 2, 4, 0.0, 0.0, (*c, 0, 0, 0, 0), CHUNKED)
        n = float(rng.integers(1, 400))
        skv = float(rng.integers(0, 100000))
        kv = 64.0 * (skv + n) * 1e-9
        want = exact_fma(kv, c[2], exact_fma(n, c[1], c[0]))
        assert regime_attention(g, n, n, skv, skv, n) == want
        fused_differs += want != (c[0] + n * c[1]) + kv * c[2]
    assert fused_differs > 0  # the test tells the fused chain from plain arithmetic


def test_the_fused_step_breaks_ties_by_the_products_low_part():
    # c0 + 3·c1 with c1 near 2^-53 / 3: the rounded product 3·c1 is 2^-53, a tie from c0 = 1
    # (rounds to even: 1) or c0 = 1 + 2^-52 (to 1 + 2^-51); the exact product, just above
    # 2^-53 (c1 one ulp above 2^-53 / 3 rounded) or just below (c1 = 2^-53 / 3 rounded), sends
    # each the other way, as one fused rounding does
    third = 2.0 ** -53 / 3
    for c0, c1, fused, plain in ((1.0, float(np.nextafter(third, 1.0)), 1 + 2.0 ** -52, 1.0),
                                 (1 + 2.0 ** -52, third, 1 + 2.0 ** -52, 1 + 2.0 ** -51)):
        assert 3.0 * c1 == 2.0 ** -53 and c0 + 3.0 * c1 == plain
        assert exact_fma(3.0, c1, c0) == fused
        g = pack_regimes(1, 4.0, 2.0, 8, 2, 4, 0.0, 0.0, (c0, c1, 0, 0, 0, 0, 0), CHUNKED)
        assert regime_attention(g, 3.0, 3.0, 0.0, 0.0, 3.0) == fused


def test_the_least_value_bounds_every_batch():
    g = hand_law(32.0, 1000.0)
    assert regime_least(g) == 2 * min(1.0 + 2.0, 1.0 + 1.0)
    rng = np.random.default_rng(5)
    for _ in range(300):
        q = rng.integers(1, 40, size=rng.integers(1, 9)).astype(float)
        c = rng.integers(0, 3000, size=q.size).astype(float)
        assert regime_attention(g, float(q.size), q.sum(), c.sum(), float(q @ c),
                                float(q @ q)) >= regime_least(g)
    bad = pack_regimes(2, 4.0, 2.0, 8, 2, 4, 0.0, 0.0, DECODE, (*CHUNKED[:6], -1.0))
    assert regime_least(bad) == -np.inf


def test_the_law_prices_by_its_regimes():
    law = AttentionLaw(flops=0.0, flops_rate=1.0, kv=0.0, kv_rate=1.0, regimes=hand_law())
    assert law.seconds(*chunk_batch()) == regime_attention(hand_law(), *chunk_batch())


def test_table_time_adds_the_sampler_at_n_beside_the_head():
    law = AttentionLaw(flops=0.0, flops_rate=1.0, kv=1.0, kv_rate=1.0)
    table = PassTable(layers=np.arange(9.0) * 10, allreduce=np.zeros(9),
                      head=np.arange(9.0) * 100 + 7, attention=law,
                      sampler=np.arange(9.0) * 1000)
    # Σq = 4 over n = 3 requests, Σc = 3: L 40 + A (3 + 8) + C 0 + (H[4] 407 + S[3] 3000)
    assert table_time(table, 3, 4, 3, 12, 16) == 40.0 + 11.0 + (407.0 + 3000.0)
    # at r = 0 rows the head's own H[0] (7), and S[0] at n = 0
    assert table_time(table, 0, 4, 3, 12, 16, rows=0) == 51.0 + 7.0
    with pytest.raises(ValueError, match="requests is past"):
        table_time(table, 9, 4, 3, 12, 16)


def test_the_compiled_regime_law_is_the_same_function_bit_for_bit():
    pytest.importorskip("numba")
    from specbatch.simulator.engine.v1.kernel import regime_attention as compiled

    rng = np.random.default_rng(3)
    for g in (hand_law(), hand_law(32.0, 1000.0), hand_law(8.0, 5e4)):
        packed = np.array(g)
        for _ in range(300):
            q = rng.integers(1, int(rng.choice([2, 9, 300])), size=rng.integers(1, 30))
            c = rng.integers(0, 3000, size=q.size)
            sums = (float(q.size), float(q.sum()), float(c.sum()), float(q @ c), float(q @ q))
            got, want = compiled(packed, *sums), regime_attention(g, *sums)
            assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64)
