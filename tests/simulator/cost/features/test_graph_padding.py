"""CUDA-graph padding: passes priced at the next captured size, the sums fast path equal to
the array path, and the engine's step times on a hand-computed run."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.features.graph_padding import PaddedCost, capture_sizes, pad_to_graphs
from specbatch.simulator.cost.interface import SumsCostModel, batch_sums
from specbatch.simulator.run import build_cost, simulate
from tests.simulator.helpers import LinearCost, const_trace


def test_capture_sizes_expand_one_n_like_vllm():
    assert capture_sizes("20") == (1, 2, 4, 8, 16)
    assert capture_sizes("2") == (1, 2)
    assert capture_sizes("8, 3,1,3") == (1, 3, 8)


@pytest.mark.parametrize("text", ["0", "a", "", "1,,2", "-4"])
def test_bad_capture_sizes_are_a_one_line_error(text):
    with pytest.raises(SpecbatchError, match="config: field cuda_graph_sizes: expected"):
        capture_sizes(text)


def test_a_pass_is_priced_at_the_next_captured_size_and_large_passes_unpadded():
    cost = PaddedCost(LinearCost(), capture_sizes("16"))  # sizes 1, 2, 4, 8, 16
    kv = np.zeros(5, dtype=np.int64)
    assert cost.step_time("draft", np.ones(5, dtype=np.int64), kv) == 0.125 * 8
    assert cost.step_time("target", np.full(5, 3), kv) == 0.25 * 16
    assert cost.step_time("target", np.full(5, 4), kv) == 0.25 * 20  # 20 > 16: no graph
    assert cost.overhead == LinearCost().overhead


def test_the_sums_path_equals_the_padded_arrays():
    inner = build_cost(load_config(None))
    padded = pad_to_graphs(inner, "64")
    assert isinstance(padded, SumsCostModel)
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 30))
        q, kv = rng.integers(1, 5, size=n), rng.integers(0, 3000, size=n)
        for role in ("draft", "target"):
            assert padded.time_from_sums(role, *batch_sums(q, kv)) == padded.step_time(role, q, kv)
    assert not isinstance(pad_to_graphs(LinearCost(), "8"), SumsCostModel)


def test_the_engine_prices_padded_steps():
    """3 requests, prompt 4, fixed k = 1, sizes (1, 2, 4, 8). Prefill: 12 prompt tokens > 8,
    unpadded: 0.25·12 + 0.125·12 + 0.5 = 5.0. First decode step: verify 3·2 = 6 -> 8 tokens,
    draft 3 -> 4: 0.25·8 + 0.125·4 + 0.5 = 3.0 (unpadded 1.5 + 0.375 + 0.5 = 2.375)."""
    trace = const_trace(n_requests=3, output_len=6)
    base = dict(trace="synth", policy="fixed", k=1, requests=3)
    padded = simulate(load_config(None, **base, cuda_graph_sizes="8"), trace,
                      cost_model=LinearCost()).steps
    plain = simulate(load_config(None, **base), trace, cost_model=LinearCost()).steps
    step = padded.iloc[0]
    assert step["end"] - step["time"] == 5.0
    decode = padded.iloc[1]
    assert (decode["target_time"], decode["draft_time"]) == (2.0, 0.5)
    assert plain.iloc[1]["target_time"] == 1.5 and plain.iloc[1]["draft_time"] == 0.375
