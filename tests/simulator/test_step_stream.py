"""The streamed step table: the same file bytes and summary as the table held whole."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from specbatch.simulator import step_stream
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine import steplog
from specbatch.simulator.engine.steplog import StepLog
from specbatch.simulator.metrics import add_schedule_columns, step_frame, step_totals
from specbatch.simulator.run import simulate, simulate_to
from specbatch.simulator.step_stream import StepWriter
from tests.simulator.engine.test_steplog import records

NAMES = ("requests.parquet", "steps.parquet", "summary.json", "config.toml")


def streamed(rows, path, row_group_rows: int) -> tuple[StepLog, StepWriter]:
    log = StepLog()
    writer = StepWriter(path, row_group_rows)
    log.stream_to(writer)
    for row in rows:
        log.append(row)
    return log, writer


@pytest.mark.parametrize("n, group", [(23, 5), (24, 8), (2, 100), (0, 4)])
def test_streamed_file_is_to_parquet_s_bytes(tmp_path, monkeypatch, n, group):
    """Row groups cut at the same rows as to_parquet's: the same bytes (blocks of 3 rows, so
    a row group spans blocks and a block spans row groups), and the same summed columns."""
    monkeypatch.setattr(steplog, "CHUNK", 3)
    rows = records(n, seed=n)
    log, writer = streamed(rows, tmp_path / "s.parquet", group)
    if n % 3:
        assert log[-1] == rows[-1]  # the pending tail stays readable, the rest was streamed
    if n >= 3:
        with pytest.raises(IndexError, match="streamed"):
            log[0]
    with pytest.raises(ValueError, match="streamed"):
        log.columns()
    log.pack()
    totals = writer.close()
    held = add_schedule_columns(step_frame(rows))
    held.to_parquet(tmp_path / "h.parquet", index=False, row_group_size=group)
    assert (tmp_path / "s.parquet").read_bytes() == (tmp_path / "h.parquet").read_bytes()
    assert totals == step_totals(held) and len(log) == n


def test_a_log_streams_from_its_first_row():
    log = StepLog()
    log.append(records(1)[0])
    with pytest.raises(ValueError, match="already holds 1 rows"):
        log.stream_to(StepWriter("unused.parquet"))


def config(**kw):
    return load_config(None, trace="synth", policy="tetris", extra=1, requests=60,
                       arrival="poisson", rate=8.0, replicas=2, speedup=True, seed=3, **kw)


def test_simulate_to_writes_the_files_simulate_writes(tmp_path, synth_trace_natural):
    held = simulate(config(), synth_trace_natural)
    held.write(tmp_path / "held")
    out = simulate_to(tmp_path / "streamed", config(), synth_trace_natural)
    for name in NAMES:
        assert (tmp_path / "held" / name).read_bytes() == (tmp_path / "streamed" / name
                                                           ).read_bytes(), name
    assert out.step_table is None and out.steps_file == tmp_path / "streamed" / "steps.parquet"
    pd.testing.assert_frame_equal(out.steps, held.steps, check_exact=True)
    assert out.summary == held.summary
    out.write(tmp_path / "copy")  # a streamed result writes elsewhere too
    assert (tmp_path / "copy" / "steps.parquet").read_bytes() == out.steps_file.read_bytes()


def test_many_row_groups_read_back_as_the_held_table(tmp_path, monkeypatch, synth_trace_natural):
    monkeypatch.setattr(steplog, "CHUNK", 16)
    monkeypatch.setattr(step_stream, "ROW_GROUP_ROWS", 48)
    held = simulate(config(kv_mode="paged", max_num_seqs=8), synth_trace_natural)
    out = simulate_to(tmp_path / "s", config(kv_mode="paged", max_num_seqs=8),
                      synth_trace_natural)
    import pyarrow.parquet as pq

    assert pq.ParquetFile(out.steps_file).metadata.num_row_groups == -(-len(held.steps) // 48) > 2
    pd.testing.assert_frame_equal(out.steps, held.steps, check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "s" / "requests.parquet"),
                                  held.requests, check_exact=True)
    assert out.summary == held.summary  # the sums of columns read back whole


def test_a_failed_run_leaves_the_folder_as_it_was(tmp_path, monkeypatch, synth_trace_natural):
    old = simulate_to(tmp_path / "r", config(), synth_trace_natural)
    before = {name: (tmp_path / "r" / name).read_bytes() for name in NAMES}
    monkeypatch.setattr(steplog, "CHUNK", 8)

    def crash(self, block):
        raise RuntimeError("killed mid-run")

    monkeypatch.setattr(StepWriter, "add", crash)
    with pytest.raises(RuntimeError, match="killed mid-run"):
        simulate_to(tmp_path / "r", config(), synth_trace_natural)
    assert {name: (tmp_path / "r" / name).read_bytes() for name in NAMES} == before
    assert sorted(os.listdir(tmp_path)) == ["r"]  # no temporary folder left behind
    assert old.steps_file.exists()
