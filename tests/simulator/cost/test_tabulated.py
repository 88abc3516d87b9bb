"""The tabulated pass (simulator.cost.tabulated): its formula on hand-computed numbers."""

import numpy as np
import pytest

from specbatch.simulator.cost.tabulated import (
    TWO_LAUNCHES,
    AttentionLaw,
    PassTable,
    fa2_mixed,
    grid_attention,
    grid_least,
    pack_grid,
    table_time,
    tabulate,
)


def test_attention_law_overlaps_or_adds_compute_and_memory():
    # n = 2 requests, q = (1, 3), c = (10, 4): Σq = 4, Σc = 14, Σq·c = 22, Σq² = 10
    # P = 22 + (10 + 4)/2 = 29 pairs; K = 14 + 8 = 22 KV tokens
    law = AttentionLaw(flops=2.0, flops_rate=1.0, kv=3.0, kv_rate=1.0, floor=1.0,
                       per_request=0.5)
    assert law.seconds(2, 4, 14, 22, 10) == (1.0 + 0.5 * 2) + max(58.0, 66.0)
    added = AttentionLaw(flops=2.0, flops_rate=1.0, kv=3.0, kv_rate=1.0, overlap=False)
    assert added.seconds(2, 4, 14, 22, 10) == 58.0 + 66.0


def test_table_time_sums_layers_attention_allreduce_head_then_launch():
    layers = tabulate(lambda q: 10.0 * q, 8)  # [9]
    table = PassTable(layers=layers, allreduce=np.arange(9.0), head=np.arange(9.0) * 100,
                      attention=AttentionLaw(flops=0.0, flops_rate=1.0, kv=1.0, kv_rate=1.0),
                      fixed=0.25, floor=1000.0)
    # Σq = 4 at one row: L 40 + A (Σc + 2Σq = 3 + 8 = 11) + C 4 + H[1] 100 = 155 < floor 1000
    assert table_time(table, 1, 4, 3, 12, 16, rows=1) == 1000.25
    # every row (rows None): H[4] = 400 -> 40 + 11 + 4 + 400 = 455, still under the floor
    assert table_time(table, 1, 4, 3, 12, 16) == 1000.25
    assert table_time(PassTable(layers, np.zeros(9), np.zeros(9), table.attention), 1, 4, 3,
                      12, 16, rows=0) == 40.0 + 11.0
    assert table_time(table, 0, 0, 0, 0, 0) == 0.0
    with pytest.raises(ValueError, match="past the table"):
        table_time(table, 1, 9, 0, 0, 81)


DECODE = ((1.0, 3.0), (1.0, 11.0), ((2.0, 4.0), (6.0, 10.0)))
PREFILL = ((1.0, 2.0), (1.0, 9.0), ((0.0, 5.0), (0.0, 8.0)))


def hand_grid(mixed: tuple = (0.0,)) -> tuple:
    # decode D over B in (1, 3), c in (1, 11); prefill ΔP over B in (1, 2), s² in (1, 9)
    return pack_grid(DECODE, PREFILL, 0.5, mixed)


def fa2_grid(slots: float = 4.0, u_first: tuple = (3.0, 8.0)) -> tuple:
    # U over CTAs in (2, 6), c in (1, 11); S slots, L2 100 bytes, 10 bytes per token and KV
    # head, G = 2 query heads per KV head, H = 2 query heads, m = 4 query rows per CTA
    return hand_grid(fa2_mixed(slots, 100.0, 10.0, 2.0, 2.0, 4.0,
                               ((2.0, 6.0), (1.0, 11.0), (u_first, (9.0, 20.0)))))


def test_the_grid_law_by_hand():
    g = tuple(hand_grid())
    # 2 decodes over 6 cached tokens: D(2, 6) = bilinear at fx = fy = 1/2 -> (3 + 8) / 2
    assert grid_attention(g, 2, 2, 12, 12, 2) == 5.5
    # one prompt of 3 tokens: D(1, 0 -> clamped to c = 1) = 2, s_p = (9 - 1)/2 - 1 = 3,
    # B_p = 2 / 2 = 1: ΔP(1, 9) = 5
    assert grid_attention(g, 1, 3, 0, 0, 9) == 7.0
    # both in one call, the chunk with 2 cached tokens: n = 3, Σq = 5, Σc = 14, Σq·c = 18,
    # Σq² = 11: s_p = (11 - 3)/2 - 1 = 3, B_p = 1 (the decodes drop out), n_d = 3 - 1 = 2:
    # D(2, 14/2) = 3.2 + (8.4 - 3.2)/2 = 5.8 (fy = 6/10), ΔP(1, 9) = 5, and the chunk's 2
    # further query tokens x 2 cached at x = 0.5: 2
    assert grid_attention(g, 3, 5, 14, 18, 11) == pytest.approx(5.8 + 5 + 2, rel=1e-15)
    law = AttentionLaw(flops=1.0, flops_rate=1.0, kv=1.0, kv_rate=1.0, grid=g)
    assert law.seconds(2, 2, 12, 12, 2) == 5.5 and law.seconds(0, 0, 0, 0, 0) == 0.0


def test_a_negative_prefill_step_counts_only_for_fresh_prompts():
    # the decode floor (2) above a short prompt's cell: ΔP(1, s = 3) = -1
    g = tuple(pack_grid(((1.0, 3.0), (1.0, 11.0), ((2.0, 4.0), (6.0, 10.0))),
                        ((1.0, 2.0), (1.0, 9.0), ((0.0, -1.0), (0.0, -1.0))), 0.0))
    assert grid_attention(g, 1, 3, 0, 0, 9) == 1.0  # a fresh prompt: its own cell, 2 - 1
    # the same prompt next to a decode of 1 cached token: n_d = 1, D(1, 1) = 2, ΔP taken as 0
    # (not -1): the decode alone's price, never below it
    assert grid_attention(g, 2, 4, 1, 1, 10) == grid_attention(g, 1, 1, 1, 1, 1) == 2.0


def test_the_grid_laws_least_value_bounds_every_batch():
    g = tuple(hand_grid())
    assert grid_least(g) == 2.0  # the least decode cell; no prefill step below 0
    # ΔP dips below 0 at s = 3 and rises after (as grid_tables' rows: P less a constant)
    neg = tuple(pack_grid(((1.0, 3.0), (1.0, 11.0), ((2.0, 4.0), (6.0, 10.0))),
                          ((1.0, 2.0), (1.0, 9.0, 25.0), ((0.0, -1.0, 2.0), (0.0, -1.0, 3.0))),
                          0.0))
    assert grid_least(neg) == 1.0  # 2 + (-1): a fresh prompt of 3 tokens reads exactly it
    rng = np.random.default_rng(5)
    for _ in range(300):
        q = rng.integers(1, 40, size=rng.integers(1, 9)).astype(float)
        c = rng.integers(0, 30, size=q.size).astype(float) * rng.integers(0, 2)
        sums = (float(q.size), q.sum(), c.sum(), float(q @ c), float(q @ q))
        assert grid_attention(neg, *sums) >= grid_least(neg)


def test_two_launches_add_the_chunks_own_launch_beside_decodes():
    g = tuple(hand_grid((TWO_LAUNCHES,)))
    # the chunk beside 2 decodes (test_the_grid_law_by_hand's batch): 5.8 + 5 + 2, and the
    # prefill launch's floor D(B_p = 1, c = 1) = 2: the chunk at its own prefill cell
    assert grid_attention(g, 3, 5, 14, 18, 11) == pytest.approx(5.8 + 5 + 2 + 2, rel=1e-15)
    # alone, a decode batch, a fresh prompt and a verification (every request multi-token)
    # are one launch each: as one call
    one = tuple(hand_grid())
    for sums in ((2, 2, 12, 12, 2), (1, 3, 0, 0, 9), (2, 6, 10, 30, 18)):
        assert grid_attention(g, *sums) == grid_attention(one, *sums)


def test_fa2_prices_a_mixed_call_unpacked_by_hand():
    g = tuple(fa2_grid())
    # 2 decodes (c̄ = 7) beside a 3-token chunk with 2 cached: D = 5.8, ΔP = 5, x-term 2 (as
    # one call); N = n_d H = 4 CTAs, U(4, 7) = 6 + (15.6 - 6) / 2 = 10.8, τ = U(2, 7) = 6,
    # W = N / S τ = 6; one KV head's cache 14 x 10 = 140 > L2 100: CTAs per head
    # 2 + 1 x 3 / 4 = 2.75, F = 4 / 2.75, cover (F - 1) / (G - 1) = 5/11, miss =
    # (1 - 100/140)(1 - 5/11) = 12/77; R = 5.8 + 12/77 (10.8 - 5.8); A = R + 5 + 2
    assert grid_attention(g, 3, 5, 14, 18, 11) == pytest.approx(5.8 + 60 / 77 + 7, rel=1e-13)
    # the same call with the decodes' cache inside the L2 (two decodes of 4, a fresh chunk):
    # no miss, D(2, 4) = 4.9 >= W = τ = U(2, 4) = 4.5: 4.9 + 5
    assert grid_attention(g, 3, 5, 8, 8, 11) == pytest.approx(4.9 + 5.0, rel=1e-13)
    # eight slots and a slow first row: every head of a KV head resident (F >= G: no miss),
    # W = 4/8 τ = 18 with τ = U(2, 7) = 36, so 18 + 5 + 2 = 25: one CTA's walk, τ, bounds it
    slow = tuple(fa2_grid(slots=8.0, u_first=(30.0, 40.0)))
    assert grid_attention(slow, 3, 5, 14, 18, 11) == pytest.approx(36.0, rel=1e-15)
    # with four slots the same walks take a whole wave each: W = τ = 36 + ΔP + x
    slow4 = tuple(fa2_grid(u_first=(30.0, 40.0)))
    assert grid_attention(slow4, 3, 5, 14, 18, 11) == pytest.approx(36.0 + 7.0, rel=1e-15)
    # decodes alone keep their packed, split path; a fresh prompt has no cache to walk
    one = tuple(hand_grid())
    for sums in ((2, 2, 12, 12, 2), (1, 3, 0, 0, 9)):
        assert grid_attention(g, *sums) == grid_attention(one, *sums)


def test_fa2_mixed_refuses_a_law_with_nothing_to_unpack():
    with pytest.raises(ValueError, match="groups"):
        fa2_mixed(4.0, 100.0, 10.0, 1.0, 2.0, 4.0, ((2.0, 6.0), (1.0, 11.0),
                                                    ((3.0, 8.0), (9.0, 20.0))))


def test_every_mode_prices_a_batch_no_lower_than_one_call():
    one = tuple(hand_grid())
    rng = np.random.default_rng(11)
    for g in (tuple(hand_grid((TWO_LAUNCHES,))), tuple(fa2_grid()),
              tuple(fa2_grid(slots=8.0, u_first=(30.0, 40.0)))):
        assert grid_least(g) == grid_least(one)
        for _ in range(300):
            q = rng.integers(1, 40, size=rng.integers(1, 9)).astype(float)
            c = rng.integers(0, 30, size=q.size).astype(float) * rng.integers(0, 2)
            sums = (float(q.size), q.sum(), c.sum(), float(q @ c), float(q @ q))
            assert grid_attention(g, *sums) >= grid_attention(one, *sums) >= grid_least(g)


def test_the_kernel_cache_stamp_covers_the_grid_law_source():
    # numba checks a cached kernel's own file only: the kernel's stamp must digest this one
    from specbatch.simulator.cost import tabulated
    from specbatch.simulator.engine.v1 import compiled

    assert compiled.TABULATED_SOURCE.samefile(tabulated.__file__)


def test_the_compiled_grid_law_is_the_same_function_bit_for_bit():
    pytest.importorskip("numba")
    from specbatch.simulator.engine.v1.kernel import grid_attention as compiled

    dip = ((1.0, 2.0), (1.0, 9.0), ((0.0, -1.0), (0.0, -1.0)))  # ΔP(B, s = 3) < 0 (the clamp)
    grids = [pack_grid(DECODE, dip, 0.5, mixed) for mixed in
             ((0.0,), (TWO_LAUNCHES,), fa2_grid()[len(hand_grid()) - 1:],
              fa2_grid(slots=8.0, u_first=(30.0, 40.0))[len(hand_grid()) - 1:])]
    rng = np.random.default_rng(3)
    for g in grids:
        for _ in range(200):
            q = rng.integers(1, 40, size=rng.integers(1, 9)).astype(float)
            c = rng.integers(0, 30, size=q.size).astype(float) * rng.integers(0, 2)
            sums = (float(q.size), q.sum(), c.sum(), float(q @ c), float(q @ q))
            assert compiled(g, *sums) == grid_attention(tuple(g), *sums)
