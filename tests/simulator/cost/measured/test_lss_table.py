"""The LLMServingSim GPUs' PassTables (simulator.cost.measured.lss_table): the tabulated pass
(simulator.cost.tabulated.table_time: the regime law, the sampler at n requests) equals
CalibratedCost.time_from_sums (LssPricer.total) bit for bit.

Random batches with exact integer sums, as the engine's are, the LM head at every row (rows
None), at none (0), at n or at fewer rows than Σq; every table entry against the scalar path."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.cost.tabulated import table_time

#: (hardware, target, draft, tp, knobs): the bundled cells (dense, MoE, tp 2), a dense target
#: and drafts priced from a neighbour's cell (transfer), tp 4 past every bundled tp, the eager
#: preset's host floor.
CASES = [
    ("rtxpro6000", "llama-3.1-8b", "llama-3.2-1b", 1, {}),
    ("rtxpro6000", "Qwen/Qwen3-32B", "vicuna-68m", 2, {}),
    ("rtxpro6000", "qwen3-30b-a3b", "qwen2.5-0.5b", 1, {}),
    ("rtxpro6000", "qwen3-30b-a3b", "qwen2.5-0.5b", 1, {"routing_skew": 0.8}),
    ("rtx4090", "llama-3.1-8b", "vicuna-68m", 1, {"execution": "eager"}),
    ("rtx4090", "Qwen/Qwen3-32B", "llama-3.2-1b", 4, {}),
]
#: Σq reach: past every profile's last measured token count (2048) and logit row.
MAX_TOKENS = 5000


def bits(x: float) -> int:
    return int(np.float64(x).view(np.int64))


@pytest.mark.parametrize("hw, target, draft, tp, knobs", CASES,
                         ids=[f"{c[0]}-{c[1].split('/')[-1]}-tp{c[3]}-{len(c[4])}"
                              for c in CASES])
def test_table_time_is_time_from_sums_bit_for_bit(hw, target, draft, tp, knobs):
    cost = build_cost_model("calibrated", hw, target, draft, tp, **knobs)
    fresh = build_cost_model("calibrated", hw, target, draft, tp, **knobs)  # empty memos
    rng = np.random.default_rng(tp + len(target))
    for role in ("target", "draft"):
        assert cost.table_gap(role) is None
        table = cost.pass_table(role, MAX_TOKENS)
        assert table.max_tokens == MAX_TOKENS and table.sampler is not None
        assert table.attention.regimes == fresh.roles[role].packed
        assert cost.pass_table(role, 100) is table  # built once, reused for fewer tokens
        for _ in range(150):
            n = int(rng.integers(1, 300))
            top = int(rng.choice([2, 5, 16, 600]))
            q = rng.integers(1, top, n)
            if q.sum() > MAX_TOKENS:
                q = np.ones(n, dtype=np.int64)
            kv = rng.integers(0, int(rng.choice([50, 20000])), n)
            sums = (float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))
            for rows in (None, 0.0, float(n), float(rng.integers(0, q.sum() + 1))):
                want = fresh.time_from_sums(role, n, *sums, rows=rows)
                got = table_time(table, n, *sums, rows=rows)
                assert bits(got) == bits(want), (role, n, sums, rows)
        r = fresh.roles[role]
        for q in range(0, MAX_TOKENS + 1, 23):  # every part on its own, every 23rd count
            x = float(q)
            want = (r.layers(x) if q else 0.0, r.allreduce(x) if q else 0.0, r.logits(x),
                    r.sampler_at(x))
            got = (table.layers[q], table.allreduce[q], table.head[q], table.sampler[q])
            assert tuple(map(bits, got)) == tuple(map(bits, want)), (role, q)


def test_the_head_and_sampler_tables_by_hand():
    """H[r] is the measured LogitsProcessor at r rows (its first row at r = 0, np.interp's
    clamp) and S[n] the measured sampler at max(n, 1) sequences."""
    cost = build_cost_model("calibrated", "rtxpro6000", "llama-3.1-8b", "llama-3.2-1b", 1)
    r = cost.roles["target"]
    table = cost.pass_table("target", 64)
    (lm_rows, lm_secs), (s_rows, s_secs) = r.per_seq["lm_head"], r.per_seq["sampler"]
    assert table.head[0] == lm_secs[0] and table.sampler[0] == table.sampler[1] == s_secs[0]
    assert s_rows[0] == lm_rows[0] == 1
    for q in lm_rows[lm_rows <= 64].astype(int):
        assert table.head[q] == lm_secs[list(lm_rows).index(q)]
    for n in s_rows[s_rows <= 64].astype(int):
        assert table.sampler[n] == s_secs[list(s_rows).index(n)]


def test_sliding_window_layers_have_no_table():
    cost = build_cost_model("calibrated", "rtxpro6000", "mistral-7b-v0.1", "llama-3.2-1b", 1)
    assert "sliding-window" in cost.table_gap("target")
    assert cost.pass_table("target", 16) is None
    assert cost.table_gap("draft") is None
