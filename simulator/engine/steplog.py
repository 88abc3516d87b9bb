"""The engine's per-step record log, stored as numbers rather than Python tuples.

A run records one :class:`~simulator.engine.request_state.StepRecord` per engine step, a few
steps per request: kept as tuples of Python ints and floats that is ~300 bytes a step, the largest
allocation of a run of 10^6 requests. :class:`StepLog` takes the same rows (``append``) and
packs every :data:`CHUNK` of them into one float64 block of ``8 · len(STEP_COLUMNS)`` bytes a
row. Every step column holds seconds or counts far below 2^53, so the float64 cells keep each
value exactly, and :meth:`StepLog.columns` returns the same numbers a list of the tuples gives
(int columns as int64).

A log given a sink (:meth:`StepLog.stream_to`, e.g. simulator.step_stream.StepWriter) hands
every packed block to it instead of keeping it, so a run writing its step table to a folder
holds at most one block of rows (the sink holds one Parquet row group): at 10^7 requests
the kept log would be ~3 GB.
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.engine.request_state import FLOAT_STEP_COLUMNS, STEP_COLUMNS, StepRecord

#: Rows packed into one float64 block (~0.4 MB of tuples at a time).
CHUNK = 4096


class ColumnBlock:
    """The log's rows after :meth:`StepLog.columns`: its columns, read as a block
    # [len(STEP_COLUMNS), rows] is (``shape``, ``block[i]`` = column i, ``block[:, j]`` =
    row j), without a float64 copy of them."""

    __slots__ = ("columns",)

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = list(columns.values())

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.columns), self.columns[0].shape[0]

    def __getitem__(self, index):
        if isinstance(index, tuple):  # [:, j]: one row
            j = index[1]
            return np.array([float(column[j]) for column in self.columns])
        return self.columns[index]


class StepLog:
    """Step rows in packed blocks (module docstring): ``append`` a :class:`StepRecord`,
    ``len`` the rows so far, ``log[i]`` one row back, :meth:`columns` the table's columns."""

    __slots__ = ("pending", "blocks", "packed", "sink")

    def __init__(self) -> None:
        self.pending: list[StepRecord] = []  # rows not yet packed, < CHUNK
        self.blocks: list[np.ndarray] = []  # # [len(STEP_COLUMNS), CHUNK] float64 each
        self.packed = 0  # rows in blocks (or handed to the sink)
        self.sink = None  # when set: takes each packed block (module docstring)

    def stream_to(self, sink) -> None:
        """Hand every packed block, # [len(STEP_COLUMNS), rows] float64, to ``sink.add``
        from now on (the log must be empty: rows are never split between the two)."""
        if len(self):
            raise ValueError(f"StepLog.stream_to: the log already holds {len(self)} rows")
        self.sink = sink

    @property
    def streamed(self) -> bool:
        """Whether the packed rows went to a sink (then only the pending ones are held)."""
        return self.sink is not None

    def append(self, row: StepRecord) -> None:
        pending = self.pending
        pending.append(row)
        if len(pending) >= CHUNK:
            self.pack()

    def pack(self) -> None:
        """Move the pending rows into one float64 block (column-major)."""
        if self.pending:
            block = np.array(self.pending, dtype=np.float64).T.copy()
            if self.sink is not None:
                self.sink.add(block)
            else:
                self.blocks.append(block)
            self.packed += len(self.pending)
            self.pending = []

    def __len__(self) -> int:
        return self.packed + len(self.pending)

    def __getitem__(self, index: int) -> StepRecord:
        """Row ``index`` (negative counts from the end) as the :class:`StepRecord` appended."""
        size = len(self)
        i = index + size if index < 0 else index
        if not 0 <= i < size:
            raise IndexError(f"step {index} of a log of {size}")
        if i >= self.packed:
            return self.pending[i - self.packed]
        if self.sink is not None:
            raise IndexError(f"step {index}: streamed to the log's sink (its table's file)")
        for block in self.blocks:
            if i < block.shape[1]:
                return StepRecord(*(float(v) if name in FLOAT_STEP_COLUMNS else int(v)
                                    for name, v in zip(STEP_COLUMNS, block[:, i])))
            i -= block.shape[1]
        raise AssertionError("unreachable: the blocks hold the packed rows")  # pragma: no cover

    def columns(self) -> dict[str, np.ndarray]:
        """Every :data:`STEP_COLUMNS` column # [rows]: float64 seconds, int64 counts.

        The columns are filled block by block, each block let go once copied, so the log
        and its table are never held twice (at 10^7 requests the log is gigabytes); the
        log then holds them as its one block. A streamed log has no columns: its sink's."""
        if self.sink is not None:
            raise ValueError("StepLog.columns: the rows were streamed to the log's sink")
        self.pack()
        rows = self.packed
        columns = {name: np.empty(rows, dtype=np.float64 if name in FLOAT_STEP_COLUMNS
                                  else np.int64) for name in STEP_COLUMNS}
        blocks, self.blocks = self.blocks, []
        blocks.reverse()
        start = 0
        while blocks:
            block = blocks.pop()  # [width, r], the oldest first
            stop = start + block.shape[1]
            for i, column in enumerate(columns.values()):
                column[start:stop] = block[i]  # counts: exact integers in float64
            start = stop
            del block
        self.blocks = [ColumnBlock(columns)] if rows else []
        return columns
