"""The packed step log: the same step table as the list of step records it replaces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.engine import steplog
from specbatch.simulator.engine.request_state import STEP_COLUMNS, step_record
from specbatch.simulator.engine.steplog import StepLog
from specbatch.simulator.metrics import step_frame


def records(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        t = float(rng.random() * 1e4)  # non-dyadic seconds
        rows.append(step_record(
            replica=int(rng.integers(0, 5)), time=t, end=t + 0.1 / 3,
            batch=int(rng.integers(0, 512)),
            prefill_tokens=int(rng.integers(0, 2**40)), drafted=i, verified=2**52 - i,
            accepted=int(rng.integers(0, 99)), emitted=int(rng.integers(0, 99)),
            depth=int(rng.integers(0, 9)), draft_time=float(rng.random()) * 1e-3,
            target_time=float(rng.random()), verify_time=float(rng.random()) * 1e-4,
            overhead_time=1e-4))
    return rows


def test_packed_log_gives_the_list_s_table_exactly(monkeypatch):
    monkeypatch.setattr(steplog, "CHUNK", 3)  # several packed blocks and a pending tail
    rows = records(11)
    log = StepLog()
    for row in rows:
        log.append(row)
    assert len(log) == 11 and len(log.blocks) == 3 and len(log.pending) == 2
    got, want = step_frame(log), step_frame(rows)
    assert list(got.columns) == list(STEP_COLUMNS)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got["verified"].iloc[0] == 2**52  # counts below 2^53 survive the float64 cells
    pd.testing.assert_frame_equal(step_frame(log), want, check_exact=True)  # repeatable
    assert [log[i] for i in range(11)] == rows and log[-1] == rows[-1] and log[-11] == rows[0]
    assert type(log[1].batch) is int and type(log[1].time) is float
    with pytest.raises(IndexError):
        log[11]


def test_empty_log_gives_the_empty_table():
    pd.testing.assert_frame_equal(step_frame(StepLog()), step_frame([]))
