"""The step table written to Parquet while the engine runs, one row group at a time.

A run of 10^7 requests makes ~2.6 × 10^7 engine steps; held whole until the end, its step
log and table cost ~0.7 KB a request (the packed log, its columns, the two schedule columns).
:class:`StepWriter` is the :class:`~simulator.engine.steplog.StepLog` sink a run writing to a
folder uses (``simulate --out``; simulator.run.simulate_to): it gathers the log's packed
blocks until it has one row group of :data:`ROW_GROUP_ROWS` rows, types that group's columns
as :func:`simulator.metrics.step_table` does (int64 counts, float64 seconds, then the
schedule columns) and appends it to the file, so a run holds at most one row group.

The file is byte-for-byte the one ``DataFrame.to_parquet(path, index=False)`` writes of the
whole in-memory table: pandas calls ``pyarrow.parquet.write_table`` (snappy), which cuts a
table into row groups of at most 1024 · 1024 rows; the writer cuts at the same rows, with the
same schema (pandas' metadata included) and the same options, and every statistic, page and
dictionary of Parquet is per row group. tests/simulator/test_step_stream.py checks the bytes.
:meth:`StepWriter.close` then reads the summed columns back one at a time for the summary
(:class:`simulator.metrics.StepTotals`: the same sums as the in-memory table's).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from specbatch.simulator.engine.request_state import FLOAT_STEP_COLUMNS, STEP_COLUMNS
from specbatch.simulator.metrics import (
    SUMMED_STEP_COLUMNS,
    StepTotals,
    add_schedule_columns,
    column_sum,
    frame,
    step_frame,
    step_totals,
)

#: Rows of one row group: pyarrow's ``write_table`` default (its max_row_group_length),
#: which ``DataFrame.to_parquet`` uses; a multiple of simulator.engine.steplog.CHUNK.
ROW_GROUP_ROWS = 1024 * 1024
#: The compression ``DataFrame.to_parquet`` applies by default.
COMPRESSION = "snappy"


class StepWriter:
    """A :class:`~simulator.engine.steplog.StepLog` sink writing the step table to ``path``
    (module docstring). ``add`` a packed block # [len(STEP_COLUMNS), rows] float64; ``close``
    writes the rest and returns the table's :class:`StepTotals`. ``row_group_rows``: rows
    per row group, default :data:`ROW_GROUP_ROWS` (tests use small ones; the file then
    matches ``to_parquet(..., row_group_size=row_group_rows)``)."""

    def __init__(self, path: str | os.PathLike, row_group_rows: int | None = None) -> None:
        rows = ROW_GROUP_ROWS if row_group_rows is None else row_group_rows
        if rows < 1:
            raise ValueError(f"StepWriter: row_group_rows must be >= 1, got {rows}")
        self.path = Path(path)
        self.row_group_rows = int(rows)
        self.blocks: list[np.ndarray] = []  # packed blocks not yet written, < one row group
        self.buffered = 0  # rows in them
        self.rows = 0  # rows written
        self.writer = None  # pyarrow.parquet.ParquetWriter, opened with the first row group

    def add(self, block: np.ndarray) -> None:
        """Take one packed block # [len(STEP_COLUMNS), r]; write every full row group."""
        self.blocks.append(block)
        self.buffered += block.shape[1]
        while self.buffered >= self.row_group_rows:
            self.write_group(self.row_group_rows)

    def write_group(self, rows: int) -> None:
        """Write the first ``rows`` buffered rows as one row group; keep the rest."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        group = frame(add_schedule_columns(self.take_columns(rows)))
        table = pa.Table.from_pandas(group, preserve_index=False)  # the frame's arrays
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, compression=COMPRESSION)
        self.writer.write_table(table, row_group_size=rows)
        self.rows += rows

    def take_columns(self, rows: int) -> dict[str, np.ndarray]:
        """The first ``rows`` buffered rows as typed step columns # [rows] (float64 seconds,
        int64 counts: exact, simulator.engine.steplog), each block let go once copied so that the
        group is not held twice; a block's rows past ``rows`` stay buffered."""
        columns = {name: np.empty(rows, dtype=np.float64 if name in FLOAT_STEP_COLUMNS
                                  else np.int64) for name in STEP_COLUMNS}
        blocks, self.blocks = self.blocks, []
        blocks.reverse()
        start = 0
        while start < rows:
            block = blocks.pop()  # [len(STEP_COLUMNS), r], the oldest first
            used = min(block.shape[1], rows - start)
            for i, column in enumerate(columns.values()):
                column[start:start + used] = block[i, :used]
            if used < block.shape[1]:
                blocks.append(block[:, used:])
            start += used
            del block
        blocks.reverse()
        self.blocks = blocks
        self.buffered -= rows
        return columns

    def close(self) -> StepTotals:
        """Write the buffered rows, close the file, and return its :class:`StepTotals`."""
        if self.buffered:
            self.write_group(self.buffered)
        if self.writer is None:  # no step at all: the in-memory path's empty table
            empty = add_schedule_columns(step_frame([]))
            empty.to_parquet(self.path, index=False)
            return step_totals(empty)
        self.writer.close()
        self.writer = None
        return file_step_totals(self.path)

    def abort(self) -> None:
        """Close the file without finishing it (the caller deletes its folder)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def file_step_totals(path: str | os.PathLike) -> StepTotals:
    """:class:`StepTotals` of a written step table: each summed column is read whole into one
    array # [rows], row group by row group (no second copy of it), and summed as the
    in-memory table's column is (simulator.metrics.column_sum, pandas' ``Series.sum``: numpy's
    pairwise sum of the same contiguous float64 values, so the same float)."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    rows = file.metadata.num_rows
    sums = {}
    for name in SUMMED_STEP_COLUMNS:  # one column held at a time
        column = np.empty(rows, dtype=np.float64)
        start = 0
        for group in range(file.metadata.num_row_groups):
            part = file.read_row_group(group, columns=[name]).column(0).to_numpy()
            column[start:start + part.shape[0]] = part
            start += part.shape[0]
        sums[name] = float(column_sum(column))
        del column
    return StepTotals(steps=int(rows), **sums)


class DropSteps:
    """A :class:`~simulator.engine.steplog.StepLog` sink that keeps no step: for a run whose step
    table nobody reads (``speedup``'s ``ar`` run: only its makespan is used)."""

    def add(self, block: np.ndarray) -> None:
        """Let the packed block go."""

    def close(self) -> None:
        """Nothing was written."""
