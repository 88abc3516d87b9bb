"""Decode step: its fast paths give the per-request reference twin's tables exactly."""

from __future__ import annotations

import pandas as pd
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.run import build_cost, simulate
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import StepTimeOnly


@pytest.mark.parametrize("kw", [
    dict(policy="ar", kv_mode="paged", kv_capacity=1500, max_num_seqs=6),
    dict(policy="ar", enable_chunked_prefill=True, max_num_batched_tokens=40),
    dict(policy="fixed", kv_mode="paged", kv_capacity=1500, max_num_seqs=6),
    dict(policy="tetris", extra=1, verify="block"),
])
def test_fast_decode_matches_the_reference_on_a_wrapped_workload(tmp_path, synth_trace_natural,
                                                                  kw):
    """The plan-nothing path of ``ar`` (no view, no plan call, the verify pass priced from two
    sums) and the on-the-fly wrapped trace rows (position t reads row base + t mod L) give the
    reference engine's tables, which runs every policy's ``decide``, reads each row one
    request at a time and prices every pass with its own ``step_time`` call."""
    lens = synth_trace_natural.output_len
    table = pd.DataFrame({"prompt_len": [5, 30, 12, 7, 20, 9, 16, 3],
                          "output_len": [int(lens.max()) * 2, 3, 90, 17, 130, 1, 60, 41]})
    path = tmp_path / "w.csv"
    table.to_csv(path, index=False)
    config = load_config(None, workload=str(path), requests=8, **kw)
    roofline = build_cost(config)
    fast = simulate(config, synth_trace_natural, cost_model=roofline)
    slow = simulate(config, synth_trace_natural, cost_model=StepTimeOnly(roofline),
                    reference=True)
    assert build_workload(config, synth_trace_natural).wrap is not None  # positions wrap
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
