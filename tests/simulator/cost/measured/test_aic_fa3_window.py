"""FlashAttention 3's tile-granular window sums (simulator.cost.measured.aic_fa3_window): the
key tiles a local call walks are aligned at the window's first key of a query tile's first
row, so a decode reads the W keys its window holds (the exact sums) and a query tile of m
packed positions computes the W + m − 1 keys its rows span, in whole tiles, against the
causal kernel's tiles; a call no request's window binds is the causal kernel and keeps the
exact sums. Every number below is counted by hand."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.cost.analytic.window import window_sums
from specbatch.simulator.cost.measured.aic_fa3_window import (
    fa3_tiles,
    fa3_window_sums,
    tile_pairs,
)


@pytest.mark.parametrize("head_dim, kv_bytes, local, causal, one_mma, tiles", [
    (128, 2.0, True, False, True, (64, 128)),  # a decode (one MMA warp group)
    (128, 2.0, False, True, False, (128, 128)),
    (64, 2.0, True, False, True, (64, 192)),
    (64, 2.0, True, False, False, (192, 160)),  # local or paged non-TMA: 160
    (64, 2.0, False, True, False, (192, 128)),  # causal: 128
    (96, 2.0, True, False, False, (192, 128)),
    (192, 2.0, True, False, False, (128, 96)),
    (256, 2.0, True, False, False, (128, 64)),
    (256, 2.0, False, True, False, (128, 80)),
    (64, 1.0, True, False, True, (192, 160)),  # fp8: no one-warp-group tile
    (128, 1.0, True, False, True, (128, 160)),  # paged non-TMA: 160
    (192, 1.0, True, False, False, (128, 128)),
    (192, 1.0, False, True, False, (128, 160)),
    (256, 1.0, True, False, False, (128, 64)),
    (256, 1.0, False, True, False, (128, 128)),
])
def test_the_tiles_are_tile_size_fwd_sm90s_for_a_paged_non_tma_call(
        head_dim, kv_bytes, local, causal, one_mma, tiles):
    assert fa3_tiles(head_dim, kv_bytes, local, causal, one_mma) == tiles


def test_a_decode_past_the_window_reads_the_keys_the_window_holds():
    # its walk starts at the window's first key and its tile loads no row past the last key:
    # W = 128 over 160-key fp8 tiles reads 128 keys, what the causal kernel reads at c = 127
    one, far = np.array([1]), np.array([4096])
    for window, heads, kv_heads, head_dim, e in ((128, 32, 4, 128, 1.0), (128, 8, 1, 64, 2.0),
                                                 (1024, 32, 4, 128, 1.0)):
        assert fa3_window_sums(one, far, window, heads, kv_heads, head_dim, e) == \
            window_sums(one, far, window) == (window - 1.0, float(window))
    q, c = np.array([1, 1, 0]), np.array([100, 4096, 300])
    assert fa3_window_sums(q, c, 128, 32, 4, 128, 1.0) == window_sums(q, c, 128)


def test_a_call_no_window_binds_keeps_the_exact_sums():
    q, c = np.array([1, 4, 60, 0]), np.array([126, 100, 0, 50])
    assert (q + c).max() <= 128
    assert fa3_window_sums(q, c, 128, 32, 8, 128, 2.0) == window_sums(q, c, 128)


def test_a_query_tile_walks_the_keys_its_rows_span_in_whole_tiles():
    # one query head per KV head, 128-row tiles, 128-key tiles, W = 128
    # q = 256: tile 0 rows 0..127 walk keys 0..127 (1 tile); tile 1 rows 128..255 walk keys
    # 1..255 from key 1 (2 tiles): 128·128 + 128·256, what the causal kernel walks too
    assert tile_pairs([256], [0], 1, 128, 128, 128).tolist() == [49152.0]
    assert tile_pairs([256], [0], 1, 128, 128, None).tolist() == [49152.0]
    # q = 384: tile 2 rows 256..383 walk keys 129..383 (2 tiles); causal keys 0..383 (3)
    assert tile_pairs([384], [0], 1, 128, 128, 128).tolist() == [81920.0]
    assert tile_pairs([384], [0], 1, 128, 128, None).tolist() == [98304.0]
    # 4 query heads packed per KV head: a 128-row tile is 32 positions, spanning
    # W + 32 − 1 = 159 keys, 2 tiles of 128: twice the 64 · 128 pairs the window holds
    assert tile_pairs([64], [1000], 4, 128, 128, 128).tolist() == [16384.0]


def test_a_prompt_past_the_window_pays_the_local_tiles_less_the_causal_ones():
    # bf16, head width 128, H = H_kv: 128 x 128 tiles; q = 384 as above
    q, c = np.array([384]), np.array([0])
    cached, pairs = fa3_window_sums(q, c, 128, 8, 8, 128, 2.0)
    assert cached == 0.0
    assert pairs == 384 * 385 / 2 + 81920 - 98304  # 57536; the window holds 41024
    assert window_sums(q, c, 128) == (0.0, 41024.0)
