"""The calibrated model's PassTables (simulator.cost.measured.calibrated_table): the tabulated
pass (simulator.cost.tabulated.table_time) equals CalibratedCost.time_from_sums bit for bit.

Each case draws random batches (n requests, integer query and cached lengths) so the sums are
exact integers, as the engine's are, with the LM head at every row (rows None), at none
(0) or at fewer rows than Σq; every table entry is also checked against the scalar path."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.cost.tabulated import table_time

#: (hardware, target, draft, tp, knobs): dense law and table cell, tp 2 on a measured NCCL
#: curve, a MoE target, a quantised target, a 4-bit draft, the eager preset's host floor.
CASES = [
    ("h100", "vicuna-33b", "vicuna-68m", 1, {}),
    ("a100", "vicuna-7b", "vicuna-68m", 2, {}),
    ("a100", "llama-3.1-8b", "llama-3.2-1b", 1, {}),
    ("h100", "qwen3-30b-a3b", "qwen2.5-0.5b", 1, {}),
    ("h100", "llama-3.1-8b", "llama-3.2-1b", 1, {"quantization": "fp8"}),
    ("h100", "llama-3.1-70b", "llama-3.2-1b", 4, {"draft_weight_bits": 4}),
    ("a100", "vicuna-13b", "vicuna-68m", 1, {"execution": "eager"}),
]
#: Σq reach: past every correction grid (4096 on h100) and table cell's last count.
MAX_TOKENS = 5000


def bits(x: float) -> int:
    return int(np.float64(x).view(np.int64))


@pytest.mark.parametrize("hw, target, draft, tp, knobs", CASES,
                         ids=[f"{c[0]}-{c[1]}-tp{c[3]}" for c in CASES])
def test_table_time_is_time_from_sums_bit_for_bit(hw, target, draft, tp, knobs):
    cost = build_cost_model("calibrated", hw, target, draft, tp, **knobs)
    fresh = build_cost_model("calibrated", hw, target, draft, tp, **knobs)  # empty memos
    rng = np.random.default_rng(tp + len(target))
    for role in ("target", "draft"):
        assert cost.table_gap(role) is None
        table = cost.pass_table(role, MAX_TOKENS)
        assert table.max_tokens == MAX_TOKENS
        assert cost.pass_table(role, 100) is table  # built once, reused for fewer tokens
        for _ in range(150):
            n = int(rng.integers(1, 200))
            top = int(rng.choice([2, 16, 600]))
            q = rng.integers(1, top, n)
            if q.sum() > MAX_TOKENS:
                q = np.ones(n, dtype=np.int64)
            kv = rng.integers(0, 20000, n)
            sums = (float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))
            for rows in (None, 0.0, float(n), float(rng.integers(0, q.sum() + 1))):
                want = fresh.time_from_sums(role, n, *sums, rows=rows)
                got = table_time(table, n, *sums, rows=rows)
                assert bits(got) == bits(want), (role, n, sums, rows)
        for q in range(1, MAX_TOKENS + 1, 37):  # every part on its own, every 37th Q
            layers, head, comm = fresh.roles[role].per_token_parts(float(q))
            assert (bits(table.layers[q]), bits(table.head[q]), bits(table.allreduce[q])) == (
                bits(layers), bits(head), bits(comm))


def test_a_pass_past_the_table_and_the_empty_pass():
    cost = build_cost_model("calibrated", "h100", "vicuna-7b", "vicuna-68m", 1)
    table = cost.pass_table("target", 64)
    assert table_time(table, 0, 0.0, 0.0, 0.0, 0.0) == 0.0 == cost.time_from_sums(
        "target", 0, 0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="past the table"):
        table_time(table, 1, 65.0, 0.0, 0.0, 65.0 ** 2)


@pytest.mark.parametrize("hw, target, named", [
    ("h100", "gemma-3-270m", "sliding-window"),
    ("rtx-pro-6000", "mistral-7b-v0.1", "sliding-window"),
])
def test_what_has_no_table_is_named(hw, target, named):
    """Sliding-window layers need the window sums, on the Vidur-profiled GPUs and on the
    LLMServingSim ones (whose other passes are tabulated: test_lss_table.py)."""
    cost = build_cost_model("calibrated", hw, target, target, 1)
    assert named in cost.table_gap("target")
    assert cost.pass_table("target", 16) is None
