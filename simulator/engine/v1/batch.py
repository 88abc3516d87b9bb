"""What a composed vllm-v1 step runs, as named records (NamedTuples: the hot path builds them
with ``tuple.__new__``, as cheap as a plain tuple).

The composer (simulator.engine.v1.compose), or a fast path where its answer is known
(simulator.engine.v1.fast), decides who runs; :meth:`~simulator.engine.v1.step.V1Step.
run_composed` then runs a :class:`DecodeBatch` (the decoding requests scheduled, with their
plan) next to a :class:`PrefillBatch` (the prompt chunks). The prefill helpers answer with a
:class:`Prefilled`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specbatch.simulator.engine.decode import PlannedDecode


class DecodeBatch(NamedTuple):
    """The decoding requests a composed step runs: the first ``keep`` planned ones."""

    keep: int  # planned decoding requests scheduled (0: nobody decodes this step)
    d_idx: np.ndarray | None  # [nd] their columns of the running batch; None = the leading ones
    planned: PlannedDecode | None  # their plan, cut to what was scheduled (None when nd = 0)
    sub: np.ndarray | None  # [len(Row), keep] their state columns (None when nd = 0)


class Decoding(NamedTuple):
    """The running requests that decode this step, planned
    (:meth:`~simulator.engine.v1.step.V1Step.decoding`), which the fast-path checks read."""

    d_idx: np.ndarray | None  # [nd] their columns of the running batch; None = all of them
    sub: np.ndarray | None  # [len(Row), nd] their state columns (None: nobody runs)
    planned: PlannedDecode | None  # their plan (None when nd = 0)
    tail: bool  # all decode but the newest, which prefills a chunked prompt's rest (d_idx a
    # range, sub a view)


class Admit(NamedTuple):
    """A fast path's admission, done once the decoding requests have committed
    (:meth:`~simulator.engine.v1.fast.V1Fast.admit_after`)."""

    left: int  # budget tokens left after the running requests' base of one token each
    free: int  # free KV blocks (paged) or reserved tokens (reserve) before admission
    held: int  # max_num_seqs slots the step in flight's finished requests hold (async lag)


class Chunk(NamedTuple):
    """The one running request that prefills (the last column), scheduled by a fast path."""

    column: int  # its column of the running batch
    tokens: int  # q: the prompt tokens it prefills this step


class PrefillBatch(NamedTuple):
    """The prompt chunks a composed step runs."""

    tokens: np.ndarray  # [running] the composer's tokens per request (unread on a fast path)
    n_joined: int  # the last ``n_joined`` columns were admitted this step (0 on a fast path)
    admit: Admit | None  # a fast path's admission after the decoding requests commit
    chunk: Chunk | None  # a fast path's prefilling running request


class Prefilled(NamedTuple):
    """The prompt chunks a step prefilled, as the prefill helpers report them."""

    tokens: int  # prompt tokens prefilled
    # columns whose (re)prefill completed (slice: all; int: one)
    completed: np.ndarray | slice | int
    n_completed: int  # how many completed
    sums: tuple  # the chunks' pass sums (n, Σq, Σc, Σq·c, Σq²), exact integers as floats

