"""The compiled vllm-v1 loop itself: :func:`run_steps` runs many steps of one replica in one
call. It drives them: the events before a step (an early stop's checks, arrivals, the async
lag's view of them), then the step's pieces in order (kernel.plan: the decoding requests'
plan; kernel.compose: who runs with how many tokens; kernel.verify: acceptance replay and
commit; kernel.passes: pricing and the chunks' prefill; kernel.record: first tokens and the
finished retired), and the step's row of the step log.

The step, as :meth:`~simulator.engine.v1.step.V1Step.composed_step` composes it (vLLM's
``Scheduler.schedule``): the decoding requests are planned first; running requests in
admission order take min(ask, budget left) tokens (ask = 1 + s_i decoding, the rest of the
prompt prefilling, both capped by the threshold), then, in a step that preempted nobody,
waiting prompts in queue order into what is left (chunked, or stopping at the first that
does not fit without chunked prefill); a decoding request cut by the budget verifies got − 1
drafts. η comes from the request's key and position (SplitMix64,
simulator.replay.chain.uniforms). Arrivals at or before a step's start are queued before it
(the engine's tie-break: arrivals, then step ends, then starts), and the next step starts at
time + duration, the engine's STEP_END event time. Under vLLM's async scheduling (``I_LAG``,
simulator.engine.async_lag) a step that follows a step sees only the arrivals up to that
step's start (``clock[2]``; ``R_SEEN`` of them), and that step's finished requests keep their
slots and blocks (``R_GHOST_N``, ``R_GHOST_FREE``) until it is composed; an empty lagged
composition is made again with everything known (``R_FULL``).

The module imports numba; import it only where numba is installed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.engine.v1.kernel.admission import heap_push
from specbatch.simulator.engine.v1.kernel.compose import admit_waiting, schedule_running
from specbatch.simulator.engine.v1.kernel.layout import (
    DONE,
    DRAFT_HEAD,
    DRAFT_MODEL_V1,
    DRAFT_NGRAM,
    F_DRAFTER,
    F_OVERHEAD,
    FULL,
    GROW,
    I_ADAPTIVE,
    I_DEPTH,
    I_EVERY,
    I_LAG,
    I_MAX_SEQS,
    I_PREFIX,
    I_PRIORITY,
    I_REPLICA,
    R_ADMITTED,
    R_ARRIVED,
    R_FREE,
    R_FRONT,
    R_FULL,
    R_GHOST_FREE,
    R_GHOST_N,
    R_HEAPN,
    R_ROWS,
    R_RUN,
    R_RUNNING,
    R_SEEN,
    R_SKIP,
    R_STEPPED,
    STUCK,
    W_BY,
    W_WOKEN,
)
from specbatch.simulator.engine.v1.kernel.passes import step_passes
from specbatch.simulator.engine.v1.kernel.plan import observe_outcome, plan_decoding
from specbatch.simulator.engine.v1.kernel.prefix import seg_give, seg_room
from specbatch.simulator.engine.v1.kernel.record import emit_completed, retire
from specbatch.simulator.engine.v1.kernel.runs import run_length
from specbatch.simulator.engine.v1.kernel.stop import events_before
from specbatch.simulator.engine.v1.kernel.verify import verify_commit


@njit(cache=True)
def run_steps(arrival, order, prompt, out, base, keys, wrap, footprint, proposed, thr, thr2,
              conf, ints, floats, limits, st, regs, clock, first_token, finish, counts, steps,
              preemptions, recomputed, front, hashed, done_tok, parked_seg, seg_uid, seg_r,
              seg_h, rank, by_rank, heap, tab, tlaw,
              # kernelpol: the engines' chain policies
              window, slot_i, slot_f, pstate, prev_src, prev_stamp, d_table, v_table, row_d,
              row_s):
    """Run steps until every request finished (returns DONE) or ``steps`` # [14, cap] is
    full (FULL: call again after taking its rows); GROW when the segment arrays need room;
    STUCK when a step would schedule nothing; STOP (``ints[I_EVERY]`` > 0, an early stop)
    before the next step when its events (:func:`step_events`) would bring ``regs[R_TICK]``
    to the check interval: the caller walks them, calling the rule, and calls again with
    ``regs[R_SKIP]`` = 1 (and the events' ticks in R_TICK) to go on; with ``ints[I_RULE]``
    the loop walks them itself with the rule's ``limits`` (kernel.stop.checked_events) and
    returns only STOPPED, when the rule ends the run at one of them. Under an early stop a
    depth-0 policy's run of identical decode steps (kernel.runs.run_length) is one event unit,
    as the numpy engine's: no event is counted and no arrival queued between its steps.

    arrival # [N] float64, order # [N] its stable argsort; prompt, out, base, footprint,
    wrap # [N] int64; keys # [N] uint64; proposed # [rows] int64 (unread without I_PROPOSED);
    thr # [rows, K] TV's min(1, r) or BV's h, thr2 BV's p; conf # [rows, K] tetris's
    cumulative confidence; limits # [N_LIMITS] an early stop's rule (simulator.engine.
    stop_limits; read under I_RULE); st # [4, max_seqs] the running batch; regs # [N_REGS];
    clock # [4] the replica's time, dsd's α, the last step's start, a stop's time;
    first_token, finish # [N]; counts # [5, N] RECORD_ROWS (position t and counters, live);
    preemptions, recomputed # [N]; front # [N] preempted uids waiting before the arrivals
    (top = head of the queue); hashed, done_tok, parked_seg # [N] the counting prefix
    cache's per-request numbers; seg_uid, seg_r, seg_h # [cap] its segments; rank, by_rank,
    heap # [N] under priority admission: each request's (priority, arrival, uid) rank, the
    uid of each rank, the waiting ranks' min-heap (simulator.engine.admission); tab # [6,
    Q_max + 1] and tlaw # [2, N_TLAW] the roles' PassTables (:func:`role_time`; T_MODE 0:
    the roofline of ``floats``).

    The engines' policies (simulator.engine.v1.policy_arrays; placeholders for the others):
    window # [max_seqs + 1] int64 K by decoding batch size (I_WINDOW its length); slot_i #
    [slots, 6 + candidates] int64, slot_f # [slots, 5] ema-adaptive's slots (SL_*, SF_*; state
    updated in place); pstate # [N_PSTATE] int64 (P_GEN, P_CURRENT); prev_src, prev_stamp #
    [trace rows + K + 2] int64 vllm-adaptive's stale survival map (the row whose survival the
    entry holds, the generation that wrote it); d_table # [max_seqs + 1], v_table #
    [max_tokens + 1] float64 its profiled D(n) and V(t) in ms; row_d, row_s # [trace rows]
    int64 a row-wise policy's drafted and verified lengths of every trace row."""
    n_req = order.shape[0]  # this replica's requests (round-robin: every R-th arrival)
    depth, max_seqs = ints[I_DEPTH], ints[I_MAX_SEQS]
    prefix, priority = ints[I_PREFIX], ints[I_PRIORITY]
    heapn = regs[R_HEAPN]
    overhead = floats[F_OVERHEAD]
    arrived, admitted, n, free, nrows = (regs[R_ARRIVED], regs[R_ADMITTED], regs[R_RUNNING],
                                         regs[R_FREE], regs[R_ROWS])
    nfront = regs[R_FRONT]
    seen = regs[R_SEEN]  # async_lag: arrivals the scheduler has seen (all of them without it)
    lag = ints[I_LAG] != 0
    t = clock[0]
    cap = steps.shape[1]
    tokens = np.zeros(max_seqs, dtype=np.int64)
    need = np.zeros(max_seqs, dtype=np.int64)
    done_now = np.zeros(max_seqs, dtype=np.int64)
    plan_s = np.zeros(max_seqs, dtype=np.int64)
    plan_d = np.zeros(max_seqs, dtype=np.int64)
    kept_d = np.zeros(max_seqs, dtype=np.int64)
    kept_kv = np.zeros(max_seqs, dtype=np.int64)
    kept_tau = np.zeros(max_seqs, dtype=np.int64)
    first = (floats[F_DRAFTER] == DRAFT_HEAD or floats[F_DRAFTER] == DRAFT_NGRAM
             or floats[F_DRAFTER] == DRAFT_MODEL_V1)
    decoding = np.zeros(max_seqs, dtype=np.bool_)
    dec_idx = np.zeros(max_seqs, dtype=np.int64)
    dec_row = np.zeros(max_seqs, dtype=np.int64)
    values = np.zeros((max_seqs, max(depth, 1)))
    flat = np.zeros(max_seqs * max(depth, 1))
    topc = np.zeros(max_seqs, dtype=np.int64)
    last_tau = np.zeros(max_seqs, dtype=np.int64)
    # kernelpol: the engines' chain policies
    scores = np.zeros(max_seqs * max(depth, 1) if ints[I_ADAPTIVE] else 1)
    code = DONE
    runs = depth == 0 and ints[I_EVERY] > 0  # ar under an early stop: its runs are events
    while True:
        if nrows >= cap:
            code = FULL
            break
        if prefix and not seg_room(regs, seg_uid, seg_r, seg_h, parked_seg, 2 * max_seqs + 8):
            code = GROW
            break
        in_run = regs[R_RUN] > 0  # inside a run (kernel.runs): no event before this step
        if ints[I_EVERY] > 0 and not in_run:  # an early stop: the events before this step
            code = events_before(arrival, order, arrived, n_req, t, regs[R_STEPPED],
                                 n == 0 and admitted == arrived and nfront == 0 and heapn == 0,
                                 ints, regs, clock, limits, out, first_token, finish,
                                 preemptions)
            if code:  # STOP (the caller walks them) or STOPPED (the rule ended the run)
                break
        woken = -1  # the arrival that wakes an idle replica (its place in ``order``)
        idle = n == 0 and admitted == arrived and nfront == 0 and heapn == 0
        if idle:
            if arrived == n_req:
                code = DONE
                break
            a = arrival[order[arrived]]
            if a > t or not regs[R_STEPPED]:
                woken = arrived
            if a > t:
                t = a
        while not in_run and arrived < n_req and arrival[order[arrived]] <= t:
            arrived += 1
        # ---- what the scheduler sees (simulator.engine.async_lag.lagged_step): a step after
        # a step was scheduled at that step's start, before its finished requests were freed
        lagged = lag and regs[R_STEPPED] != 0 and not idle and regs[R_FULL] == 0
        regs[R_FULL] = 0
        ghost_n = 0
        cutoff = t
        if lagged:
            ghost_n = regs[R_GHOST_N]
            cutoff = clock[2]  # the last step's start
        elif regs[R_GHOST_N]:  # everything known: the last step's finished requests freed
            g = regs[R_GHOST_FREE]
            free += g
            if prefix and g > 0:
                seg_give(g, regs, seg_uid, seg_r, seg_h)
            regs[R_GHOST_N] = 0
            regs[R_GHOST_FREE] = 0
        while seen < arrived and (not lagged or arrival[order[seen]] <= cutoff):
            if priority:  # queued by rank (PriorityWaiting); ``admitted`` follows ``seen``
                heapn = heap_push(heap, heapn, rank[order[seen]])
                admitted += 1
            seen += 1
        if runs and not in_run:  # the run the numpy engine takes from here (1 step: none)
            regs[R_RUN] = run_length(arrival, order, arrived, n_req, prompt, out, counts, st, n,
                                     free, nfront > 0 or admitted < seen or heapn > 0,
                                     seen < arrived, ghost_n > 0, t, ints, floats, tab, tlaw)
        # ---- plan: every decoding request's (d_i, s_i), before the composition
        nd = plan_decoding(n, st, counts, base, wrap, keys, proposed, thr, thr2, conf, prompt,
                           ints, floats, regs, clock, tab, tlaw, decoding, dec_idx, dec_row,
                           values, flat, topc, scores, plan_s, plan_d, window, slot_i, pstate,
                           prev_src, prev_stamp, d_table, v_table, row_d, row_s)
        # ---- compose: the running requests first, in admission order, then the waiting
        left, kept, free, nfront = schedule_running(
            n, st, counts, prompt, decoding, plan_s, tokens, need, done_now, free, nfront, front,
            preemptions, recomputed, hashed, done_tok, parked_seg, seg_uid, seg_r, seg_h, ints,
            regs)
        total, free, nfront, admitted, heapn = admit_waiting(
            n, kept, left, ghost_n, free, nfront, admitted, seen, heapn, st, counts, prompt,
            order, footprint, front, recomputed, by_rank, heap, hashed, parked_seg, seg_uid,
            seg_r, seg_h, decoding, tokens, ints, regs)
        if total == 0:
            if lagged:  # an empty schedule: vLLM schedules again once the last step's output
                regs[R_FULL] = 1  # is processed (async_lag), with everything known
                regs[R_SKIP] = 1 if ints[I_EVERY] > 0 else 0  # the same step's events
                continue
            if nfront or admitted < arrived or heapn or n:  # pragma: no cover - invariant
                code = STUCK
                break
            continue  # nothing runs: wait for the next arrival
        # ---- decode: verify, commit; the policies observe the outcome
        keep, dsum, vsum, asum, emitted, skv, svkv, svv, maxd, snz, smax = verify_commit(
            kept, decoding, tokens, st, counts, plan_s, plan_d, prompt, out, base, wrap, keys,
            thr, thr2, ints, last_tau, kept_d, kept_kv, kept_tau)
        observe_outcome(keep, kept, nd, asum, decoding, tokens, plan_s, last_tau, dec_idx,
                        dec_row, ints, clock, slot_i, slot_f, pstate, prev_src, prev_stamp)
        # ---- the passes priced, the prompt chunks prefilled
        draft_t, target_t, verify_t, passes, pq = step_passes(
            keep, dsum, vsum, asum, skv, svkv, svv, maxd, snz, smax, kept_d, kept_kv, kept_tau,
            total, kept, decoding, tokens, st, first, ints, floats, tab, tlaw)
        end_t = t + draft_t + target_t + verify_t + overhead
        if keep == 0 and pq == 0:
            code = STUCK
            break
        emitted += emit_completed(total, kept, decoding, tokens, st, counts, first_token, end_t)
        row_out = steps[:, nrows]
        row_out[0] = ints[I_REPLICA]
        row_out[W_WOKEN] = 1.0 if woken >= 0 else 0.0
        row_out[W_BY] = woken
        regs[R_STEPPED] = 1
        clock[2] = t
        row_out[1] = t
        row_out[2] = end_t
        row_out[3] = keep
        row_out[4] = pq
        row_out[5] = dsum
        row_out[6] = vsum
        row_out[7] = asum
        row_out[8] = emitted
        row_out[9] = passes
        row_out[10] = draft_t
        row_out[11] = target_t
        row_out[12] = verify_t
        row_out[13] = overhead
        nrows += 1
        # ---- retire the finished requests (the others keep their order)
        n, free = retire(total, st, counts, out, finish, end_t, free, footprint, ints, regs,
                         seg_uid, seg_r, seg_h)
        t = t + (end_t - t)  # the engine's STEP_END event: time + duration, not ``end``
        if regs[R_RUN] > 0:
            regs[R_RUN] -= 1
    regs[R_ARRIVED], regs[R_ADMITTED], regs[R_RUNNING] = arrived, admitted, n
    regs[R_FREE], regs[R_ROWS], regs[R_FRONT] = free, nrows, nfront
    regs[R_SEEN] = seen
    regs[R_HEAPN] = heapn
    clock[0] = t
    return code
