"""The decoding requests' plan in the compiled loop, and what the policies learn from a step.

:func:`plan_decoding` gives every decoding request its (d_i, s_i) before the composition
(simulator.engine.decode.Decode.plan_decode's twin: vLLM's drafts exist before
``Scheduler.schedule``), with the draft-length rules of kernel.policy; :func:`observe_outcome`
feeds the step's τ back to the stateful policies (DynamicSD's α, ema-adaptive's slots,
vllm-adaptive's stale survival map), as the numpy engine's ``observe`` does after verification.

The module imports numba; import it only where numba is installed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.engine.v1.kernel.acceptance import eta
from specbatch.simulator.engine.v1.kernel.layout import (
    C_POS,
    I_ADAPTIVE,
    I_C,
    I_DEPTH,
    I_DSD,
    I_INTERVAL,
    I_K,
    I_KMAX,
    I_LEADING,
    I_POSITIVE,
    I_PROPOSED,
    I_ROWS,
    I_SLOTS,
    I_TETRIS,
    I_WINDOW,
    I_WRAP,
    P_CURRENT,
    P_GEN,
    R_DSTEPS,
    R_KNOW,
    S_FILL,
    S_PREFILLED,
    S_UID,
    SL_KEY,
    SL_STEPS,
)
from specbatch.simulator.engine.v1.kernel.policy import (
    adaptive_plan,
    dsd_goodput,
    ema_observe,
    monotone_topc,
)


@njit(cache=True)
def plan_decoding(n, st, counts, base, wrap, keys, proposed, thr, thr2, conf, prompt, ints,
                  floats, regs, clock, tab, tlaw, decoding, dec_idx, dec_row, values, flat,
                  topc, scores, plan_s, plan_d, window, slot_i, pstate, prev_src, prev_stamp,
                  d_table, v_table, row_d, row_s):
    """Plan every decoding request of the ``n`` running ones (``st``) before the composition,
    as vLLM's drafts exist before ``Scheduler.schedule``: marks ``decoding`` # [n], writes
    the decoding requests' columns and trace rows into ``dec_idx``, ``dec_row`` and each one's
    (d_i, s_i) into ``plan_d``, ``plan_s`` at its column; returns how many decode. The policy
    is the one ``ints`` names (kernel.run_steps' arguments): fixed k, tetris's top-C, dsd's
    goodput scan every interval (its state in ``regs``, α in ``clock[1]``), the engines'
    policies (a window of the batch size, ema-adaptive's slots, vllm-adaptive's top B*, a
    row-wise table, hindsight), each capped by the drafter's proposal."""
    depth, k = ints[I_DEPTH], ints[I_K]
    has_wrap, has_proposed = ints[I_WRAP], ints[I_PROPOSED]
    tetris, c_budget = ints[I_TETRIS], ints[I_C]
    dsd, k_max, interval = ints[I_DSD], ints[I_KMAX], ints[I_INTERVAL]
    leading = ints[I_LEADING]
    n_window, n_slots, adaptive = ints[I_WINDOW], ints[I_SLOTS], ints[I_ADAPTIVE]
    by_row = ints[I_ROWS]
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
    return nd


@njit(cache=True)
def observe_outcome(keep, kept, nd, asum, decoding, tokens, plan_s, last_tau, dec_idx, dec_row,
                    ints, clock, slot_i, slot_f, pstate, prev_src, prev_stamp):
    """What the stateful policies learn from the step's outcome (``keep`` decoding requests
    verified, the first ``kept`` running ones scheduled, ``last_tau`` their τ by column,
    ``asum`` = Σ τ): DynamicSD's α (``clock[1]``), ema-adaptive's routed slot, vllm-adaptive's
    stale survival map (``prev_src``, ``prev_stamp``, generation ``pstate[P_GEN]``)."""
    dsd, n_slots, adaptive = ints[I_DSD], ints[I_SLOTS], ints[I_ADAPTIVE]
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
