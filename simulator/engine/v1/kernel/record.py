"""What a compiled step leaves: first tokens of the prefills it completed, the finished retired.

:func:`emit_completed` stamps the tokens a completed (re)prefill samples; :func:`retire` takes
the finished requests out of the running batch (simulator.engine.decode.Decode.finish) and
frees their blocks, or holds them one step under the async lag.

The module imports numba; import it only where numba is installed.
"""

from __future__ import annotations

from numba import njit

from specbatch.simulator.engine.v1.kernel.layout import (
    C_POS,
    I_CAPACITY,
    I_LAG,
    I_PAGED,
    I_PREFIX,
    N_ST,
    R_FINISHED,
    R_GHOST_FREE,
    R_GHOST_N,
    S_BLOCKS,
    S_FILL,
    S_PREFILLED,
    S_UID,
)
from specbatch.simulator.engine.v1.kernel.prefix import seg_give


@njit(cache=True)
def emit_completed(total, kept, decoding, tokens, st, counts, first_token, end_t):
    """The scheduled prefilling requests among the first ``total`` whose (re)prefill the
    step completed each sample one token at ``end_t`` (a fresh prompt its first: TTFT);
    returns how many (simulator.engine.v1.step.V1Step.emit_completed)."""
    completed = 0
    for i in range(total):
        if ((i >= kept or not decoding[i]) and tokens[i] > 0
                and st[S_PREFILLED, i] >= st[S_FILL, i]):
            u = st[S_UID, i]
            if counts[C_POS, u] == 0:
                first_token[u] = end_t
            counts[C_POS, u] += 1
            completed += 1
    return completed


@njit(cache=True)
def retire(total, st, counts, out, finish, end_t, free, footprint, ints, regs, seg_uid, seg_r,
           seg_h):
    """Retire the requests among the first ``total`` of ``st`` that reached their output
    length (finish at ``end_t``; the others keep their order) and free their blocks or
    reservations; under vLLM's async scheduling (simulator.engine.async_lag) the last
    step's finished are freed now and this step's are held (``R_GHOST_N``,
    ``R_GHOST_FREE``) until the next composition. Returns (running requests, free)."""
    paged, capacity, prefix = ints[I_PAGED], ints[I_CAPACITY], ints[I_PREFIX]
    lag = ints[I_LAG] != 0
    j = 0
    released = 0
    reserved = 0
    for i in range(total):
        u = st[S_UID, i]
        if counts[C_POS, u] >= out[u]:
            finish[u] = end_t
            regs[R_FINISHED] += 1
            if paged:
                released += st[S_BLOCKS, i]
            elif capacity >= 0:
                reserved += footprint[u]
        else:
            if j != i:
                for r in range(N_ST):
                    st[r, j] = st[r, i]
            j += 1
    if lag:  # async_lag: the last step's finished requests freed, this step's held
        if regs[R_GHOST_N]:
            g = regs[R_GHOST_FREE]
            free += g
            if prefix and g > 0:
                seg_give(g, regs, seg_uid, seg_r, seg_h)
        regs[R_GHOST_N] = total - j
        regs[R_GHOST_FREE] = released - reserved
        released = reserved = 0
    free -= reserved
    if released:
        free += released
        if prefix:
            seg_give(released, regs, seg_uid, seg_r, seg_h)
    return j, free
