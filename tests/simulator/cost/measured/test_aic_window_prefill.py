"""A sliding layer's multi-token queries priced per query token and per product
(simulator.cost.measured.aic_window_prefill): α_B, β_B are the grid's own causal prefill
cells' split, a request past the window is its first W tokens as the causal prefill they are
plus α per token and β per product past them, and its cached prefix keeps the pairs the
window holds against it."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.cost.analytic.window import window_sums
from specbatch.simulator.cost.measured.aic_window_prefill import (
    TileShape,
    causal_products,
    local_parts,
    local_seconds,
    prefill_split,
)
from specbatch.simulator.cost.tabulated import AttentionLaw, pack_grid

EXACT = TileShape(False)


def test_the_split_of_cells_that_are_alpha_and_beta_is_alpha_and_beta():
    b, s = np.array([1.0, 4.0, 16.0]), np.array([1.0, 64.0, 512.0, 4096.0])
    alpha, beta = np.array([3e-8, 2e-8, 1e-8]), np.array([4e-11, 3e-11, 2e-11])
    pv = b[:, None] * (alpha[:, None] * s + beta[:, None] * s * (s + 1) / 2)
    pv[:, 0] = 0.0  # the s = 1 column (pack_grid)
    dv = np.full((3, 2), 1e-5)
    g = pack_grid((b, np.array([1.0, 1000.0]), dv), (b, s ** 2, pv), 0.0)
    bp, a, be = prefill_split(g, EXACT)
    assert np.array_equal(bp, b)
    assert a == pytest.approx(alpha, rel=1e-6) and be == pytest.approx(beta, rel=1e-6)


def test_causal_products_are_the_causal_pairs_off_fa3_and_whole_tiles_on_it():
    assert causal_products([1, 4, 256], EXACT).tolist() == [1.0, 10.0, 32896.0]
    # FA3, G = 1, head width 128, bf16: 128 x 128 tiles; 256 tokens: two query tiles
    # walking 128 and 256 keys
    fa3 = TileShape(True, 1, 128, 2.0)
    assert causal_products([256], fa3).tolist() == [128 * 128 + 128 * 256]


def test_the_parts_of_a_mixed_pass_by_hand():
    # W = 256: a decode past it, a chunk of 300 over 50 cached, a prompt of 1000
    q, c, w = np.array([1, 300, 1000]), np.array([700, 50, 0]), 256

    def pairs(a, b):
        return window_sums(a, b, w)[1]

    got = local_parts(q, c, w, pairs, EXACT)
    # q' = (1, 256, 256); the chunk's queries past its first see min(50, 255 − j) cached
    # keys: 205 · 50 + 49·50/2; past W: 44 + 744 tokens, 44·256 + 744·256 window pairs
    assert got == (513.0, 1.0 + 2 * 256.0 ** 2, 205 * 50 + 1225.0, 788.0, 788.0 * 256, 2.0)


def test_local_seconds_reads_the_law_then_adds_alpha_and_beta_at_b():
    law = AttentionLaw(flops=1.0, flops_rate=1.0, kv=1.0, kv_rate=1.0, overlap=False)
    split = (np.array([1.0, 4.0]), np.array([2.0, 1.0]), np.array([3.0, 1.0]))
    parts = (513.0, 131073.0, 11475.0, 788.0, 201728.0, 2.0)
    base = law.seconds(3, 513.0, 255.0, 255.0 + 11475.0, 131073.0)
    want = base + (2.0 - 1.0 / 3.0) * 788.0 + (3.0 - 2.0 / 3.0) * 201728.0
    assert local_seconds(law, split, 3, 255.0, parts) == pytest.approx(want, rel=1e-15)
    # no request past the window: the law alone
    assert local_seconds(law, (), 3, 255.0, (*parts[:3], 0.0, 0.0, 0.0)) == base


def test_the_cached_pairs_never_go_below_zero():
    # FA3's tile rounding can count fewer products with a prefix than without; the pairs
    # past each request's first against cached keys are then 0, as a full layer's are >= 0
    def pairs(a, b):
        return 10.0 if int(np.asarray(b).sum()) else 50.0

    assert local_parts(np.array([3]), np.array([5]), 8, pairs, EXACT)[2] == 0.0
