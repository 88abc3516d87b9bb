"""The engine's per-request state layout, a decode step's outcome layout, the raw output.

A replica's running batch is one int64 matrix ``state`` # [len(Row), n]: one column per
running request, one row per field (:class:`Row`). A decode step's per-request outcome is one
int64 matrix # [len(Outcome), n]. Keeping both as matrices makes admission, retirement and
commit one numpy operation each instead of a Python loop per request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

#: Columns of the per-step table, in order (one tuple per step).
STEP_COLUMNS = (
    "replica", "time", "end", "batch", "prefill_tokens", "drafted", "verified", "accepted",
    "emitted", "depth", "draft_time", "target_time", "overhead_time",
)


@dataclass(frozen=True)
class Records:
    """Raw engine output: per-request arrays # [N] and per-step rows (STEP_COLUMNS)."""

    replica: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    tokens: np.ndarray
    steps: np.ndarray
    drafted: np.ndarray
    verified: np.ndarray
    accepted: np.ndarray
    step_rows: list
    preemptions: np.ndarray  # times each request was preempted (paged KV)
    recomputed: np.ndarray  # tokens its re-admissions prefilled again, Σ (prompt + t)


class Row(IntEnum):
    """Rows of a replica's per-request state matrix ``Replica.state`` # [len(Row), n].

    POS is the tokens emitted so far = the current output position t; PREFILLED the tokens
    this admission has prefilled so far and FILL the tokens it prefills (the prompt; prompt + t
    after a preemption, simulator.kv), so a request decodes once PREFILLED ≥ FILL; BLOCKS the
    KV blocks it holds (paged KV mode, else 0); BASE the trace row of output position 0; KEY the verifier's
    stream key (uint64 bits); N_STEPS the decode steps taken and N_DRAFTED / N_VERIFIED /
    N_ACCEPTED the draft tokens drafted / verified / accepted (Σ τ). The order is what makes
    the decode step one array operation each: (PROMPT, BASE) + t gives (KV length c, trace
    row) in one add, and POS..N_ACCEPTED take one step's increments (:class:`Outcome` rows
    EMITTED..ACCEPTED) and are, at finish, the per-request record (:data:`RECORD_ROWS`).
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
    c_i and trace rows. One Gram product of rows (ONE, VERIFIED) with rows EMITTED..KV gives
    every sum the step table and the cost model need.
    """

    EMITTED = 0
    ONE = 1
    DRAFTED = 2
    VERIFIED = 3
    ACCEPTED = 4
    KV = 5
    ROW = 6


#: Rows of the per-request record matrix (Engine.counts) = state rows POS.. at finish.
RECORD_ROWS = ("tokens", "steps", "drafted", "verified", "accepted")
class Replica:
    """One engine copy. The running batch is one int64 matrix ``state`` # [len(Row), n]
    whose rows are the per-request fields (:class:`Row`), so admission and retirement are a
    single concatenate / column selection; the properties (``rep.pos`` = ``state[Row.POS]``,
    ...) are row views (writes go through).
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.waiting: deque[int] = deque()
        self.state = np.zeros((len(Row), 0), dtype=np.int64)
        self.n_prefilling = 0
        self.kv_reserved = 0  # tokens reserved (reserve mode under a capacity)
        self.free_blocks = 0  # free KV blocks (paged mode)
        self.busy = False
        self.scheduled = False
        self.finishing = 0

    @property
    def n_running(self) -> int:
        return int(self.state.shape[1])

    def keep(self, mask: np.ndarray) -> None:
        """Drop running requests where ``mask`` is False.  mask # [n] bool"""
        self.state = self.state[:, mask]


for _row in Row:
    setattr(Replica, _row.name.lower(),
            property(lambda self, _i=int(_row): self.state[_i],
                     lambda self, value, _i=int(_row): self.state.__setitem__(_i, value)))
