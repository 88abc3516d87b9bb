"""Runs of identical decode steps of a depth-0 policy (``ar``) in the compiled loop, for an
early stop's event count: where the numpy engine takes J identical decode steps as one event
(simulator.engine.v1.runs.V1Run.decode_run: one STEP_END at the run's end, no event between its
steps), :func:`run_length` finds the same J from the same state. The loop still runs the J
steps one by one (their rows and records are those of single steps, as the numpy engine's
run's are); it counts no event and queues no arrival between them
(:func:`~simulator.engine.v1.kernel.loop.run_steps`), so the early stop is called at the
numpy engine's events with the records as they stand there (the whole run committed).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.engine.v1.kernel.layout import (
    C_POS,
    F_OVERHEAD,
    F_ROWS,
    I_BLOCK_SIZE,
    I_BUDGET,
    I_LOOKAHEAD,
    I_MAX_SEQS,
    I_PAGED,
    I_VERIFY,
    S_BLOCKS,
    S_FILL,
    S_PREFILLED,
    S_UID,
)
from specbatch.simulator.engine.v1.kernel.pricing import host_target, role_time, verify_seconds


@njit(cache=True)
def run_length(arrival, order, arrived, n_req, prompt, out, counts, st, n, free, waiting,
               pending, held, t, ints, floats, tab, tlaw):
    """J, the steps of the run of identical depth-0 decode steps the numpy engine takes at
    ``t`` (V1Run.decode_run), or 0 when it runs a single step. The state is the loop's at
    the step's start, after the arrivals at or before ``t`` were queued: ``n`` running
    requests (``st``), ``free`` blocks (paged), ``waiting`` requests queued (preempted or
    arrived, not admitted), ``pending`` arrivals the async lag hides (``Replica.pending``),
    ``held`` the last step's finished requests holding their slots (``Replica.deferred``).

    No run: nothing running, a request prefilling, pending or held requests, more requests
    than the token budget, or waiting ones the step could admit (fewer than ``max_num_seqs``
    running and budget left). Else J = the fewest tokens a running request has left, cut to
    the steps the free pool holds (paged: :func:`run_blocks`), to the step after which the
    next arrival is due (when the step could admit), then to the longest prefix whose last
    end ``t + (end − t)`` reproduces exactly; under 2 steps, none (V1Run.run_times). Each
    step's end is priced as the loop prices a step of ``n`` one-token decodes."""
    if n == 0 or pending or held:
        return 0
    for i in range(n):
        if st[S_PREFILLED, i] < st[S_FILL, i]:
            return 0
    budget = ints[I_BUDGET]
    if n > budget:
        return 0
    admits = n < ints[I_MAX_SEQS] and n < budget
    if admits and waiting:
        return 0
    steps = -1
    skv = 0
    for i in range(n):
        u = st[S_UID, i]
        left = out[u] - counts[C_POS, u]
        if steps < 0 or left < steps:
            steps = left
        skv += prompt[u] + counts[C_POS, u]
    if steps >= 2 and ints[I_PAGED]:
        steps = run_blocks(prompt, counts, st, n, free, steps, ints)
    if steps < 2:
        return 0
    horizon = arrival[order[arrived]] if admits and arrived < n_req else np.inf
    verify_t = verify_seconds(floats, ints, n, 0, 0, 0) if ints[I_VERIFY] else 0.0
    overhead = floats[F_OVERHEAD]
    draft_t = 0.0
    rows = np.float64(n) - np.float64(0) if floats[F_ROWS] else -1.0
    fn = np.float64(n)
    start = t
    best = 0
    for j in range(steps):
        s = np.float64(skv + j * n)
        target_t = host_target(floats, role_time(floats, 0, fn, fn, s, s, fn, rows, tab, tlaw),
                               n)
        end = start + draft_t + target_t + verify_t + overhead
        start = start + (end - start)  # the engine's push of the step's end
        if j >= 1 and t + (start - t) == start:
            best = j + 1
        if start >= horizon:  # the next step sees the arrival
            break
    return best


@njit(cache=True)
def run_blocks(prompt, counts, st, n, free, steps, ints):
    """Paged mode: how many of the run's first ``steps`` steps the ``free`` blocks hold
    (V1Run.run_blocks): step j grows a request at position t to ⌈(prompt + t + j +
    lookahead) / block_size⌉ blocks, never shrinking; the count of steps whose total growth
    fits (it rises with j)."""
    bs, lookahead = ints[I_BLOCK_SIZE], ints[I_LOOKAHEAD]
    total = 0
    for i in range(n):
        u = st[S_UID, i]
        last = (prompt[u] + counts[C_POS, u] + (steps - 1 + lookahead + bs - 1)) // bs
        if last > st[S_BLOCKS, i]:
            total += last - st[S_BLOCKS, i]
    if total <= free:
        return steps
    for j in range(steps):
        grown = 0
        for i in range(n):
            u = st[S_UID, i]
            slots = (prompt[u] + counts[C_POS, u] + (lookahead + bs - 1) + j) // bs
            if slots > st[S_BLOCKS, i]:
                grown += slots - st[S_BLOCKS, i]
        if grown > free:
            return j
    return steps
