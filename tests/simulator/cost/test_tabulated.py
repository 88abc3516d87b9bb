"""The tabulated pass (simulator.cost.tabulated): its formula on hand-computed numbers."""

import numpy as np
import pytest

from specbatch.simulator.cost.tabulated import AttentionLaw, PassTable, table_time, tabulate


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
