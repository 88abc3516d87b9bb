"""Expert parallelism under the aic cost (simulator.cost.measured.aic_ep): which MoE row and
token count an EP rank reads, the dispatch it pays, the per-rank repricing's parity with the
symmetric price, the tabulated form's, and the refusal where no row times the layout."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.all2all import dispatch_seconds
from specbatch.simulator.cost.features.expert_parallel import (
    rank_pass_seconds,
    with_expert_parallel,
)
from specbatch.simulator.cost.measured.aic_cold import moe_rate
from specbatch.simulator.cost.measured.aic_curves import BUNDLED, CURVES
from specbatch.simulator.cost.measured.lss import PCIE_LINK
from specbatch.simulator.cost.registry import build_cost_model

SYSTEM = "rtx_pro_6000_server"


@pytest.fixture(scope="module")
def ep2():
    cost = build_cost_model(cost="aic", hardware="rtxpro6000", target="qwen3-30b-a3b",
                            draft="qwen3-30b-a3b", tp=1)
    return cost, with_expert_parallel(cost, 2, 1)


def row_seconds(tokens: int, ep: int) -> float:
    """The bundled bf16 MoE row of Qwen3-30B-A3B's experts (2048, 768, 128, 8) at tp 1."""
    d = pd.read_parquet(BUNDLED / CURVES / SYSTEM / "moe.parquet")
    d = d[(d.dtype == "bfloat16") & (d.hidden == 2048) & (d.inter == 768)
          & (d.experts == 128) & (d.topk == 8) & (d.tp == 1) & (d.ep == ep)
          & (d.tokens == tokens)]
    assert len(d) == 1
    return float(d.latency_s.iloc[0])


def test_a_dp2_rank_reads_the_ep2_row_at_both_ranks_tokens_and_pays_the_pcie_dispatch(ep2):
    _, cost = ep2
    p = cost.roles["target"]
    curve = p.curves["experts"][1]
    assert "'tp': 1, 'ep': 2" in curve.source and curve.source.startswith("measured")
    # Q = 2048 tokens on this rank, 2048 on the other: the row at tokens = 4096, ep = 2, as
    # timed (above its 64 local experts' cold read, 64 x 3 x 2048 x 768 x 2 B at the GPU's
    # cold MoE rate, and non-decreasing there, so no envelope moves it); not the row at the
    # rank's own 2048 tokens, nor the tp-1 (ep 1) row
    assert 64 * 3 * 2048 * 768 * 2 / moe_rate(SYSTEM, "bfloat16") < row_seconds(4096, 2)
    assert curve.at(4096.0) == row_seconds(4096, 2)
    _, experts, comm = p.parts(2048.0)
    assert experts == 48 * row_seconds(4096, 2)
    assert experts not in (48 * row_seconds(2048, 2), 48 * row_seconds(2048, 1))
    # t_a2a over the anchor's PCIe link (16 GB/s, 20 us), as the calibrated path, at T = 4096:
    # 2 (N - 1) 20 us + (1/2) 4096 * 2 B * (2 * 2048 + 128) / 16 GB/s per layer
    one = 2 * 20e-6 + 0.5 * 4096 * 2 * (2 * 2048 + 128) / 16e9
    assert PCIE_LINK == (16e9, 20e-6)
    assert comm == pytest.approx(48 * one, rel=1e-12)  # tp 1: no all-reduce


def test_the_rank_pass_at_n_q_tokens_is_the_symmetric_price_and_moves_with_the_real_t(ep2):
    _, cost = ep2
    p = cost.roles["target"]
    sums = (4, 4.0, 4000.0, 4000.0, 4.0)
    sym = cost.time_from_sums("target", *sums)
    assert rank_pass_seconds(cost, sums, 8.0) == sym  # bit for bit
    curve = p.curves["experts"][1]
    moved = rank_pass_seconds(cost, sums, 40.0)  # the other rank sent 36 tokens
    shift = 48 * (curve.at(40.0) - curve.at(8.0)) + 48 * (
        dispatch_seconds(40.0, 2048, 128, 2, *PCIE_LINK)
        - dispatch_seconds(8.0, 2048, 128, 2, *PCIE_LINK))
    assert moved - sym == pytest.approx(shift, rel=1e-9)


def test_the_tabulated_form_is_the_numpy_price_under_ep(ep2):
    _, cost = ep2
    p = cost.roles["target"]
    fast, slow = p.pass_table(300), p.pass_table_slow(300)
    for name in ("layers", "allreduce", "head"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    assert fast.layers[150] == p.parts(150.0)[0] and fast.allreduce[150] == p.parts(150.0)[2]


def test_without_ep_the_pass_is_unchanged(ep2):
    base, cost = ep2
    assert base.roles["target"].curves["experts"][1].source.endswith("'tp': 1, 'ep': 1}")
    assert base.roles["draft"] is cost.roles["draft"]  # the draft keeps its own layout


def test_a_layout_no_row_times_is_refused_in_one_line(ep2):
    base, _ = ep2
    with pytest.raises(SpecbatchError, match=r"cost aic has no bfloat16 MoE row on "
                       r"rtx_pro_6000_server timing .* = \(2048, 768, 128, 8, 1, 3\)"):
        with_expert_parallel(base, 3, 1)
