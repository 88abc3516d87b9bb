"""The compiled vllm-v1 loop itself: :func:`run_steps` runs many steps of one replica in one
call (admission, KV growth and preemption, planning, acceptance replay, pricing, records).

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

from specbatch.simulator.engine.v1.kernel.acceptance import eta
from specbatch.simulator.engine.v1.kernel.admission import heap_pop, heap_push
from specbatch.simulator.engine.v1.kernel.layout import (
    C_ACCEPTED,
    C_DRAFTED,
    C_POS,
    C_STEPS,
    C_VERIFIED,
    DONE,
    DRAFT_HEAD,
    DRAFT_MODEL_V1,
    DRAFT_NGRAM,
    F_DRAFTER,
    F_OVERHEAD,
    F_ROWS,
    FULL,
    GROW,
    I_ADAPTIVE,
    I_BLOCK_SIZE,
    I_BUDGET,
    I_C,
    I_CAPACITY,
    I_CHUNKED,
    I_DEPTH,
    I_DRAFTS_CHUNKS,
    I_DSD,
    I_EVERY,
    I_INTERVAL,
    I_K,
    I_KMAX,
    I_LAG,
    I_LEADING,
    I_LOOKAHEAD,
    I_MAX_SEQS,
    I_PAGED,
    I_POSITIVE,
    I_PREFIX,
    I_PRIORITY,
    I_PROPOSED,
    I_REPLICA,
    I_ROWS,
    I_SLOTS,
    I_TETRIS,
    I_THRESHOLD,
    I_VERIFY,
    I_WINDOW,
    I_WRAP,
    N_ST,
    P_CURRENT,
    P_GEN,
    R_ADMITTED,
    R_ARRIVED,
    R_DSTEPS,
    R_FINISHED,
    R_FREE,
    R_FRONT,
    R_FULL,
    R_GHOST_FREE,
    R_GHOST_N,
    R_HEAPN,
    R_KNOW,
    R_NAMED,
    R_ROWS,
    R_RUN,
    R_RUNNING,
    R_SEEN,
    R_SKIP,
    R_STEPPED,
    S_BLOCKS,
    S_FILL,
    S_PREFILLED,
    S_UID,
    SL_KEY,
    SL_STEPS,
    STUCK,
    W_BY,
    W_WOKEN,
)
from specbatch.simulator.engine.v1.kernel.policy import (
    adaptive_plan,
    dsd_goodput,
    ema_observe,
    monotone_topc,
)
from specbatch.simulator.engine.v1.kernel.prefix import (
    seg_give,
    seg_park,
    seg_room,
    seg_take,
    seg_touch,
)
from specbatch.simulator.engine.v1.kernel.pricing import (
    decode_draft_seconds,
    draft_time,
    first_pass,
    host_target,
    role_time,
    verify_seconds,
)
from specbatch.simulator.engine.v1.kernel.runs import run_length
from specbatch.simulator.engine.v1.kernel.stop import events_before


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
    depth, k, budget, max_seqs = ints[I_DEPTH], ints[I_K], ints[I_BUDGET], ints[I_MAX_SEQS]
    chunked, capacity, drafts_chunks = ints[I_CHUNKED], ints[I_CAPACITY], ints[I_DRAFTS_CHUNKS]
    has_verify, leading = ints[I_VERIFY], ints[I_LEADING]
    has_wrap, has_proposed = ints[I_WRAP], ints[I_PROPOSED]
    tetris, c_budget = ints[I_TETRIS], ints[I_C]
    paged, bs, lookahead, prefix = (
        ints[I_PAGED], ints[I_BLOCK_SIZE], ints[I_LOOKAHEAD], ints[I_PREFIX])
    threshold = ints[I_THRESHOLD]
    dsd, k_max, interval = ints[I_DSD], ints[I_KMAX], ints[I_INTERVAL]
    priority = ints[I_PRIORITY]
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
    n_window, n_slots, adaptive = ints[I_WINDOW], ints[I_SLOTS], ints[I_ADAPTIVE]
    by_row = ints[I_ROWS]
    scores = np.zeros(max_seqs * max(depth, 1) if adaptive else 1)
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
        nd = 0
        d_all = 0
        for i in range(n):
            decoding[i] = st[S_PREFILLED, i] >= st[S_FILL, i]
            if decoding[i]:
                u = st[S_UID, i]
                pos = counts[C_POS, u]
                dec_idx[nd] = i
                dec_row[nd] = base[u] + (pos % wrap[u] if has_wrap else pos)
                nd += 1
        if tetris and nd:
            for m in range(nd):
                for j in range(depth):
                    values[m, j] = conf[dec_row[m], j]
            c_step = k * nd if c_budget < 0 else c_budget
            monotone_topc(values, nd, depth, c_step, flat, topc, ints[I_POSITIVE] != 0)
            d_all = depth if c_step > 0 or tetris == 2 else 0  # kernelpol: oracle drafts K
        if adaptive and nd:  # kernelpol: VllmAdaptive.decide: d_i = K, s_i the top B* slots
            adaptive_plan(nd, depth, dec_row, conf, proposed, has_proposed, adaptive == 1,
                          prev_src, prev_stamp, pstate[P_GEN], d_table, v_table, values,
                          flat, scores, topc)
            d_all = depth
        k_step = k
        if n_window and nd:  # kernelpol: BatchSchedule.window / VllmDynamic's table of n
            k_step = window[nd if nd < n_window else n_window - 1]
        if n_slots and nd:  # kernelpol: EmaAdaptive.route: the slot of the largest key <= n
            cur = 0
            for r in range(n_slots):
                if slot_i[r, SL_KEY] <= nd:
                    cur = r
            pstate[P_CURRENT] = cur
            k_step = slot_i[cur, SL_STEPS]
        if dsd and nd:  # DynamicSD.decide: re-plan every ``interval`` steps, probe at k = 0
            k_step = regs[R_KNOW]
            if regs[R_DSTEPS] % interval == 0:
                skv_plan = 0
                for m in range(nd):
                    u = st[S_UID, dec_idx[m]]
                    skv_plan += prompt[u] + counts[C_POS, u]
                best_k, best = 0, -np.inf
                for kk in range(k_max + 1):
                    g = dsd_goodput(kk, nd, skv_plan, clock[1], floats, ints, tab, tlaw) * (
                        1.1 if kk == 0 else 1.0)
                    if g < best:
                        break
                    best_k, best = kk, g
                regs[R_KNOW] = k_step = best_k
                if k_step == 0 and k_max >= 1:
                    k_step = 1
            regs[R_DSTEPS] += 1
        for m in range(nd):
            i = dec_idx[m]
            if tetris or adaptive:
                s = topc[m]
                d = d_all
            elif by_row == 1:  # kernelpol: a row-wise policy's lengths (StepView.row_table)
                s = row_s[dec_row[m]]
                d = row_d[dec_row[m]]
            elif by_row == 2:  # kernelpol: Hindsight.decide, under TV τ of s = K, under BV
                u = st[S_UID, i]  # the last m with η_m < p_m
                s = 0
                for j in range(depth):
                    if leading:
                        if eta(keys[u], counts[C_POS, u], j) < thr[dec_row[m], j]:
                            s += 1
                        else:
                            break
                    elif eta(keys[u], counts[C_POS, u], j) < thr2[dec_row[m], j]:
                        s = j + 1
                d = depth
            else:
                s = k_step
                d = k_step
            if has_proposed:
                p = proposed[dec_row[m]]
                if p < d:
                    d = p
                if p < s:
                    s = p
            plan_s[i] = s
            plan_d[i] = d
        # ---- compose: the running requests first, in admission order
        left = budget
        for i in range(n):
            if decoding[i]:
                want = 1 + plan_s[i]
            else:
                want = st[S_FILL, i] - st[S_PREFILLED, i]
            if threshold and want > threshold:  # vLLM caps every running request
                want = threshold
            tok = want if want < left else left
            tokens[i] = tok
            left -= tok
        kept = n
        if paged and n:  # KVCacheManager.allocate_slots, preempting the newest when short
            total_need = 0
            for i in range(n):
                u = st[S_UID, i]
                tok = tokens[i]
                if decoding[i]:
                    ctx = prompt[u] + counts[C_POS, u]
                    computed = ctx - 1
                    done_now[i] = ctx
                else:
                    computed = st[S_PREFILLED, i]
                    done_now[i] = computed + tok
                    if st[S_FILL, i] < done_now[i]:
                        done_now[i] = st[S_FILL, i]
                g = -(-(computed + tok + lookahead) // bs) - st[S_BLOCKS, i]
                if g < 0 or tok == 0:
                    g = 0
                need[i] = g
                total_need += g
            if total_need <= free:
                for i in range(n):
                    st[S_BLOCKS, i] += need[i]
                free -= total_need
                if prefix and total_need:
                    seg_take(total_need, regs, seg_uid, seg_r, parked_seg)
            else:  # V1Composer.preempt_walk
                i = 0
                acc = 0
                while acc + need[i] <= free:
                    acc += need[i]
                    i += 1
                for j in range(i):
                    st[S_BLOCKS, j] += need[j]
                free -= acc
                if prefix and acc:
                    seg_take(acc, regs, seg_uid, seg_r, parked_seg)
                end = n
                while i < end and tokens[i] > 0:
                    while need[i] > free and end > i:
                        end -= 1
                        held = st[S_BLOCKS, end]
                        if prefix:
                            ue = st[S_UID, end]
                            h = done_tok[ue] // bs
                            if hashed[ue] > h:
                                h = hashed[ue]
                            hashed[ue] = 0
                            done_tok[ue] = 0
                            seg_park(ue, held, h, free, regs, seg_uid, seg_r, seg_h,
                                     parked_seg)
                        free += held
                    if end == i:
                        break
                    free -= need[i]
                    st[S_BLOCKS, i] += need[i]
                    if prefix and need[i]:
                        seg_take(need[i], regs, seg_uid, seg_r, parked_seg)
                    i += 1
                for j in range(i, end):
                    tokens[j] = 0
                kept = end
            if prefix:  # cache_scheduled: the tokens each scheduled request has computed
                for i in range(kept):
                    if tokens[i] > 0:
                        done_tok[st[S_UID, i]] = done_now[i]
            for j in range(n - 1, kept - 1, -1):  # park the preempted, newest first
                u = st[S_UID, j]
                front[nfront] = u
                nfront += 1
                preemptions[u] += 1
                recomputed[u] += prompt[u] + counts[C_POS, u]
        total = kept
        # ---- admission: waiting prompts FCFS into what the budget has left
        if kept == n and left > 0 and n < max_seqs - ghost_n:
            room = max_seqs - ghost_n - n
            joined = 0
            while nfront or admitted < seen or heapn:
                if left <= 0 or joined >= room:
                    break
                resumed = nfront > 0
                if priority:
                    u = by_rank[heap[0]]
                else:
                    u = front[nfront - 1] if resumed else order[admitted]
                num_tokens = prompt[u] + counts[C_POS, u] if resumed else prompt[u]
                hits = 0
                if prefix and parked_seg[u] >= 0:
                    at = parked_seg[u]
                    hits = min(seg_r[at], seg_h[at], (num_tokens - 1) // bs)
                computed = hits * bs
                num = num_tokens - computed
                if threshold and num > threshold:
                    num = threshold
                if num > left:
                    if not chunked:
                        break
                    num = left
                held = 0
                if paged:
                    fresh = -(-(computed + num) // bs) - hits
                    if fresh + hits > free:
                        break
                    free -= fresh + hits
                    held = fresh + hits
                    if prefix:
                        if regs[R_NAMED]:
                            seg_touch(u, hits, regs, seg_uid, seg_r, parked_seg)
                        seg_take(fresh, regs, seg_uid, seg_r, parked_seg)
                        full = computed + num
                        if num_tokens < full:
                            full = num_tokens
                        hashed[u] = full // bs
                elif capacity >= 0:
                    fp = footprint[u]
                    if free + fp > capacity:
                        break
                    free += fp
                if priority:
                    heapn = heap_pop(heap, heapn)
                elif resumed:
                    nfront -= 1
                    recomputed[u] -= computed
                else:
                    admitted += 1
                st[S_UID, total] = u
                st[S_PREFILLED, total] = computed
                st[S_FILL, total] = num_tokens
                st[S_BLOCKS, total] = held
                decoding[total] = False
                tokens[total] = num
                total += 1
                joined += 1
                left -= num
        if total == 0:
            if lagged:  # an empty schedule: vLLM schedules again once the last step's output
                regs[R_FULL] = 1  # is processed (async_lag), with everything known
                regs[R_SKIP] = 1 if ints[I_EVERY] > 0 else 0  # the same step's events
                continue
            if nfront or admitted < arrived or heapn or n:  # pragma: no cover - invariant
                code = STUCK
                break
            continue  # nothing runs: wait for the next arrival
        # ---- decode: verify, commit
        keep = 0
        dsum = vsum = asum = emitted = skv = svkv = svv = maxd = snz = smax = 0
        for i in range(kept):
            if not decoding[i] or tokens[i] == 0:
                continue
            u = st[S_UID, i]
            pos = counts[C_POS, u]
            s = plan_s[i]
            d = plan_d[i]
            if tokens[i] - 1 < s:  # cut by the budget
                s = tokens[i] - 1
                if s < d:
                    d = s
            kv = prompt[u] + pos
            tau = 0
            if s:
                row = base[u] + (pos % wrap[u] if has_wrap else pos)
                key = keys[u]
                if leading:
                    for j in range(s):
                        if eta(key, pos, j) < thr[row, j]:
                            tau += 1
                        else:
                            break
                else:
                    for j in range(s):
                        h = thr2[row, j] if j == s - 1 else thr[row, j]
                        if eta(key, pos, j) < h:
                            tau = j + 1
            e = tau + 1
            if out[u] - pos < e:
                e = out[u] - pos
            counts[C_POS, u] = pos + e
            counts[C_STEPS, u] += 1
            counts[C_DRAFTED, u] += d
            counts[C_VERIFIED, u] += s
            counts[C_ACCEPTED, u] += tau
            last_tau[i] = tau
            kept_d[keep] = d
            kept_kv[keep] = kv
            kept_tau[keep] = tau
            keep += 1
            dsum += d
            vsum += s
            asum += tau
            emitted += e
            skv += kv
            svkv += s * kv
            svv += s * s
            if d > maxd:
                maxd = d
            if s > smax:
                smax = s
            if s:
                snz += 1
        if dsd and keep:  # DynamicSD.observe: α ← 0.85 α + 0.15 Σ τ / (Σ τ + #{τ < s})
            successes = 0
            misses = 0
            for i in range(kept):
                if decoding[i] and tokens[i] > 0:
                    s = plan_s[i] if plan_s[i] < tokens[i] - 1 else tokens[i] - 1
                    if s > 0:
                        successes += last_tau[i]
                        if last_tau[i] < s:
                            misses += 1
            trials = successes + misses
            if trials > 0:
                clock[1] = 0.85 * clock[1] + 0.15 * successes / trials
        if n_slots and keep:  # kernelpol: EmaAdaptive.observe: the routed slot's update
            ema_observe(slot_i, slot_f, pstate[P_CURRENT], asum, keep)
        if adaptive == 1 and keep:  # kernelpol: VllmAdaptive.observe (stale confidences)
            old_gen = pstate[P_GEN]
            new_gen = old_gen + 1
            for m in range(keep, nd):  # planned, not run: they keep their entry and row
                row = dec_row[m]
                if prev_stamp[row] == old_gen:
                    prev_stamp[row] = new_gen
            for m in range(keep):  # the ones that ran: their survival under the next row
                row = dec_row[m] + last_tau[dec_idx[m]] + 1
                prev_src[row] = dec_row[m]
                prev_stamp[row] = new_gen
            pstate[P_GEN] = new_gen
        draft_t = 0.0
        verify_t = 0.0
        passes = 0
        sq = sc = sqc = sqq = 0
        if keep:
            sq = vsum + keep
            sc = skv
            sqc = svkv + skv
            sqq = svv + 2 * vsum + keep
            if depth:
                passes = depth if dsum == keep * depth else maxd
                if passes:
                    draft_t = decode_draft_seconds(floats, keep, passes, dsum, asum, skv,
                                                   kept_d, kept_kv, kept_tau, tab, tlaw)
            if has_verify:
                verify_t = verify_seconds(floats, ints, keep, vsum, smax, snz)
        # ---- prefill: the running requests' chunks, then the admitted ones'
        pn = pq = pc = pqc = pqq = 0
        for i in range(total):
            if i < kept and decoding[i]:
                continue
            q = tokens[i]
            if q == 0:
                continue
            c0 = st[S_PREFILLED, i]
            pn += 1
            pq += q
            pc += c0
            pqc += q * c0
            pqq += q * q
            st[S_PREFILLED, i] = c0 + q
        if pn and drafts_chunks:
            draft_t += draft_time(
                floats, np.float64(pn), np.float64(pq), np.float64(pc), np.float64(pqc),
                np.float64(pqq), np.float64(pn) if floats[F_ROWS] else -1.0, tab, tlaw)
        # logit rows n + S: a prefill chunk's last token only (V1Step.run_composed)
        rows = np.float64(sq + pq) - np.float64(pq - pn) if floats[F_ROWS] else -1.0
        target_t = host_target(floats, role_time(  # n: the decoding requests + the chunks
            floats, 0, np.float64(keep + pn), np.float64(sq + pq), np.float64(sc + pc),
            np.float64(sqc + pqc), np.float64(sqq + pqq), rows, tab, tlaw), keep + pn)
        if first:  # a head's or a vLLM V1 draft model's pass 1 or the n-gram proposer, on
            # the target pass's sums
            draft_t += first_pass(floats, np.float64(keep + pn), np.float64(sq + pq),
                                  np.float64(sc + pc), np.float64(sqc + pqc),
                                  np.float64(sqq + pqq), tab, tlaw)
        end_t = t + draft_t + target_t + verify_t + overhead
        if keep == 0 and pq == 0:
            code = STUCK
            break
        completed = 0
        for i in range(total):
            if ((i >= kept or not decoding[i]) and tokens[i] > 0
                    and st[S_PREFILLED, i] >= st[S_FILL, i]):
                u = st[S_UID, i]
                if counts[C_POS, u] == 0:
                    first_token[u] = end_t
                counts[C_POS, u] += 1
                completed += 1
        emitted += completed
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
        n = j
        t = t + (end_t - t)  # the engine's STEP_END event: time + duration, not ``end``
        if regs[R_RUN] > 0:
            regs[R_RUN] -= 1
    regs[R_ARRIVED], regs[R_ADMITTED], regs[R_RUNNING] = arrived, admitted, n
    regs[R_FREE], regs[R_ROWS], regs[R_FRONT] = free, nrows, nfront
    regs[R_SEEN] = seen
    regs[R_HEAPN] = heapn
    clock[0] = t
    return code
