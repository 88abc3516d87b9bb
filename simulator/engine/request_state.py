"""The engine's per-request state layout, a decode step's outcome layout, the raw output.

A replica's running batch is one int64 matrix ``state`` # [len(Row), n]: one column per
running request, one row per field (:class:`Row`). A decode step's per-request outcome is one
int64 matrix # [len(Outcome), n]. Keeping both as matrices makes admission, retirement and
commit one numpy operation each instead of a Python loop per request. The row ranges those
operations slice are named below (:data:`CONTEXT_ROWS`, :data:`COMMITTED_ROWS`, ...) and
:func:`check_layout` asserts, at import, the enum orders they rely on.

Every engine step (the simulator's and the live loop's) is recorded as one
:class:`StepRecord`; :data:`STEP_COLUMNS` is its field list.
"""

from __future__ import annotations

import typing
from collections import deque
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import numpy as np


class StepRecord(NamedTuple):
    """One engine step of one replica (a row of the per-step table, simulator.metrics)."""

    replica: int
    time: float  # start, seconds
    end: float
    batch: int  # decoding requests
    prefill_tokens: int
    drafted: int  # Σ d_i
    verified: int  # Σ s_i
    accepted: int  # Σ τ_i
    emitted: int  # tokens emitted (first tokens of completed prompts included)
    depth: int  # draft passes D
    draft_time: float
    target_time: float
    verify_time: float  # the rejection sampler (simulator.cost.verify_cost)
    overhead_time: float


def step_record(*, replica: int, time: float, end: float, batch: int, prefill_tokens: int,
                drafted: int, verified: int, accepted: int, emitted: int, depth: int,
                draft_time: float, target_time: float, verify_time: float,
                overhead_time: float) -> StepRecord:
    """A :class:`StepRecord` from its fields by keyword, every one named: the engines' hot
    path, ~2x cheaper than ``StepRecord(**...)`` (no class call; a test keeps the parameters
    the record's fields, in order)."""
    return _tuple_new(StepRecord, (replica, time, end, batch, prefill_tokens, drafted, verified,
                                   accepted, emitted, depth, draft_time, target_time,
                                   verify_time, overhead_time))


_tuple_new = tuple.__new__
#: Columns of the per-step table, in order: the fields of :class:`StepRecord`.
STEP_COLUMNS: tuple[str, ...] = StepRecord._fields
#: The per-step columns holding seconds (float64); the others are int64 counts.
FLOAT_STEP_COLUMNS: tuple[str, ...] = tuple(
    name for name, kind in typing.get_type_hints(StepRecord).items() if kind is float)


@dataclass(frozen=True)
class Records:
    """Raw engine output: per-request arrays # [N] and per-step rows (:class:`StepRecord`)."""

    replica: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    tokens: np.ndarray
    steps: np.ndarray
    drafted: np.ndarray
    verified: np.ndarray
    accepted: np.ndarray
    step_rows: list[StepRecord]  # or the engine's packed simulator.engine.steplog.StepLog of them
    preemptions: np.ndarray  # times each request was preempted (paged KV)
    recomputed: np.ndarray  # tokens its re-admissions prefilled again, Σ (prompt + t)


class Row(IntEnum):
    """Rows of a replica's per-request state matrix ``Replica.state`` # [len(Row), n].

    POS is the tokens emitted so far = the current output position t; PREFILLED the tokens
    this admission has prefilled so far and FILL the tokens it prefills (the prompt; prompt + t
    after a preemption, simulator.engine.kv), so a request decodes once PREFILLED ≥ FILL; BLOCKS the
    KV blocks it holds (paged KV mode, else 0); BASE the trace row of output position 0; KEY
    the verifier's stream key (uint64 bits); N_STEPS the decode steps taken and N_DRAFTED /
    N_VERIFIED / N_ACCEPTED the draft tokens drafted / verified / accepted (Σ τ). The order is
    what the named ranges below slice (:func:`check_layout`).
    """

    UID = 0
    PREFILLED = 1
    FILL = 2
    BLOCKS = 3
    OUT = 4
    KEY = 5
    PROMPT = 6
    BASE = 7
    POS = 8
    N_STEPS = 9
    N_DRAFTED = 10
    N_VERIFIED = 11
    N_ACCEPTED = 12


class Outcome(IntEnum):
    """Rows of one decode step's outcome matrix # [len(Outcome), n] (int64).

    EMITTED..ACCEPTED are the increments of state rows POS..N_ACCEPTED (emitted tokens
    min(τ + 1, remaining), one step, d_i, s_i, τ_i); KV and ROW are the requests' KV lengths
    c_i and trace rows. The order is what the named ranges below slice (:func:`check_layout`).
    """

    EMITTED = 0
    ONE = 1
    DRAFTED = 2
    VERIFIED = 3
    ACCEPTED = 4
    KV = 5
    ROW = 6


#: State rows (PROMPT, BASE): adding the position t gives :data:`POSITION_OUTCOMES`.
CONTEXT_ROWS = slice(int(Row.PROMPT), int(Row.BASE) + 1)
#: Outcome rows (KV, ROW) = (prompt + t, trace row of position t), one add from CONTEXT_ROWS.
POSITION_OUTCOMES = slice(int(Outcome.KV), int(Outcome.ROW) + 1)
#: State rows a decode step increments (POS..N_ACCEPTED) and the outcome rows it adds.
COMMITTED_ROWS = slice(int(Row.POS), int(Row.N_ACCEPTED) + 1)
INCREMENT_OUTCOMES = slice(int(Outcome.EMITTED), int(Outcome.ACCEPTED) + 1)
#: The same minus POS/EMITTED (the reference twin moves POS itself).
COUNTER_ROWS = slice(int(Row.N_STEPS), int(Row.N_ACCEPTED) + 1)
COUNTER_OUTCOMES = slice(int(Outcome.ONE), int(Outcome.ACCEPTED) + 1)
#: One Gram product ``m[WEIGHT_OUTCOMES] @ m[SUMMED_OUTCOMES].T`` gives, per summed outcome
#: row X (indexed by ``Outcome.X``), Σ_i X_i (first result row, weights ONE) and Σ_i s_i·X_i
#: (second, weights VERIFIED): every sum the step record and the cost model need.
WEIGHT_OUTCOMES = slice(int(Outcome.ONE), int(Outcome.VERIFIED) + 1,
                        int(Outcome.VERIFIED) - int(Outcome.ONE))
SUMMED_OUTCOMES = slice(int(Outcome.EMITTED), int(Outcome.KV) + 1)
#: Per-request record names (Engine.counts) of the committed state rows at finish.
RECORD_ROWS = ("tokens", "steps", "drafted", "verified", "accepted")


def check_layout() -> None:
    """Raise AssertionError unless each named range slices the rows its name says and the
    ranges pair up as the decode step adds them."""
    def require(ok: bool, what: str) -> None:
        if not ok:
            raise AssertionError(f"simulator.engine.request_state layout: {what}")

    rows, outcomes = list(Row), list(Outcome)
    require(rows[CONTEXT_ROWS] == [Row.PROMPT, Row.BASE]
            and outcomes[POSITION_OUTCOMES] == [Outcome.KV, Outcome.ROW],
            "CONTEXT_ROWS must be (PROMPT, BASE) and POSITION_OUTCOMES (KV, ROW)")
    committed, increments = rows[COMMITTED_ROWS], outcomes[INCREMENT_OUTCOMES]
    require(committed == rows[Row.POS:] and increments == outcomes[:Outcome.ACCEPTED + 1]
            and len(committed) == len(increments) == len(RECORD_ROWS),
            "COMMITTED_ROWS must be POS..the last row, INCREMENT_OUTCOMES EMITTED..ACCEPTED, "
            "one per record name")
    require([r - Row.POS for r in committed] == [o - Outcome.EMITTED for o in increments],
            "state rows POS.. and outcome rows EMITTED.. must pair up in order")
    require(rows[COUNTER_ROWS] == committed[1:] and outcomes[COUNTER_OUTCOMES] == increments[1:],
            "COUNTER_ROWS/COUNTER_OUTCOMES must be the committed ranges without POS/EMITTED")
    require(outcomes[WEIGHT_OUTCOMES] == [Outcome.ONE, Outcome.VERIFIED],
            "the Gram product's weight rows must be exactly (ONE, VERIFIED)")
    require(outcomes[SUMMED_OUTCOMES] == outcomes[:Outcome.KV + 1],
            "the summed outcome rows must be EMITTED..KV (results indexed by Outcome)")

check_layout()


class FreshColumns:
    """Every request's state column at admission, # [len(Row), N] as a read-only matrix
    (UID, PROMPT, FILL = prompt, OUT, BASE, KEY; the other rows 0), built on demand from the
    workload's arrays # [N] instead of held: the matrix costs 104 bytes a request (1 GB at
    10^7 requests) and repeats those arrays. It answers the two reads the composers make,
    ``take(uids, axis=1)`` and ``[:, u:u + 1]``, with the columns the matrix would give
    (fresh int64 arrays the caller may write; tests/simulator/test_state.py checks them
    against the matrix)."""

    __slots__ = ("prompt", "out", "base", "key", "n")

    def __init__(self, prompt: np.ndarray, out: np.ndarray, base: np.ndarray,
                 key: np.ndarray) -> None:
        self.prompt, self.out, self.base = prompt, out, base  # [N] int each
        self.key = key.view(np.int64) if key.dtype == np.uint64 else key  # [N] stream keys
        self.n = int(prompt.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        return len(Row), self.n

    def take(self, uids, axis: int = 1) -> np.ndarray:
        """The columns of requests ``uids`` (a sequence of ints)  # [len(Row), len(uids)]."""
        if axis != 1:
            raise ValueError(f"FreshColumns.take: columns only (axis=1), got axis={axis}")
        u = np.asarray(uids, dtype=np.int64)
        new = np.zeros((len(Row), u.shape[0]), dtype=np.int64)
        new[_UID_ROW] = u
        new[_PROMPT_ROW] = new[_FILL_ROW] = self.prompt.take(u)
        new[_OUT_ROW] = self.out.take(u)
        new[_BASE_ROW] = self.base.take(u)
        new[_KEY_ROW] = self.key.take(u)
        return new

    def column(self, u: int) -> np.ndarray:
        """Request ``u``'s column # [len(Row), 1]: the composers' one-join path, from
        scalars (~4x a slice of the held matrix; the general :meth:`take` ~15x)."""
        new = np.zeros((len(Row), 1), dtype=np.int64)
        prompt = self.prompt[u]
        new[_UID_ROW, 0] = u
        new[_PROMPT_ROW, 0] = prompt
        new[_FILL_ROW, 0] = prompt
        new[_OUT_ROW, 0] = self.out[u]
        new[_BASE_ROW, 0] = self.base[u]
        new[_KEY_ROW, 0] = self.key[u]
        return new

    def __getitem__(self, index: tuple[slice, slice | int]) -> np.ndarray:
        """``[:, a:b]``: the columns of requests a..b−1 # [len(Row), b − a];
        ``[:, u]``: request u's column # [len(Row)]."""
        rows, cols = index if isinstance(index, tuple) and len(index) == 2 else (None, None)
        if (type(cols) is slice and cols.step is None and type(cols.start) is int
                and cols.stop == cols.start + 1 and 0 <= cols.start < self.n
                and rows == slice(None)):  # [:, u:u + 1], the hot one
            return self.column(cols.start)
        if rows == slice(None) and isinstance(cols, (int, np.integer)) and 0 <= cols < self.n:
            return self.column(int(cols))[:, 0]
        if rows != slice(None) or not isinstance(cols, slice) or cols.step not in (None, 1):
            raise TypeError(f"FreshColumns: only [:, a:b] and [:, u] read columns, got {index!r}")
        start, stop, _ = cols.indices(self.n)
        if stop == start + 1:
            return self.column(start)
        return self.take(np.arange(start, max(start, stop)))


_UID_ROW, _PROMPT_ROW, _FILL_ROW = int(Row.UID), int(Row.PROMPT), int(Row.FILL)
_OUT_ROW, _BASE_ROW, _KEY_ROW = int(Row.OUT), int(Row.BASE), int(Row.KEY)


class Replica:
    """One engine copy. The running batch is one int64 matrix ``state`` # [len(Row), n]
    whose rows are the per-request fields (:class:`Row`: ``rep.state[Row.POS]`` is every
    running request's position), so admission and retirement are a single concatenate /
    column selection."""

    def __init__(self, index: int, waiting: deque[int] | None = None) -> None:
        self.index = index
        #: uids waiting, head first: a deque (FCFS) or simulator.engine.admission's priority queue
        self.waiting: deque[int] = deque() if waiting is None else waiting
        self.state = np.zeros((len(Row), 0), dtype=np.int64)
        self.n_prefilling = 0
        self.kv_reserved = 0  # tokens reserved (reserve mode under a capacity)
        self.free_blocks = 0  # free KV blocks (paged mode)
        # the prefix cache's blocks (simulator.engine.prefix; vllm-v1 paged mode)
        self.prefix = None
        self.busy = False
        self.scheduled = False
        self.finishing = 0
        # vLLM's async scheduling lag (simulator.engine.async_lag): arrivals while a step ran,
        # not yet seen by the scheduler; the last step's finished columns, not yet freed; the
        # last step's start and end (nan: none yet)
        self.pending: deque[int] = deque()
        self.deferred: np.ndarray | None = None
        self.last_start = float("nan")
        self.last_end = float("nan")

    @property
    def n_running(self) -> int:
        return self.state.shape[1]
