"""An early stop checked inside the compiled loop: the events between two steps walked as the
numpy engine pops them (:func:`checked_events`, the twin of
simulator.engine.v1.driver.CompiledEngine.check_stop), and at each check the stop's rule in
numbers (:func:`stop_rule`, simulator.engine.stop_limits; its reference twin is the stop's own
``__call__``, analysis.plan.slo.EarlyStop). The loop (kernel.loop.run_steps) calls these only
when the stop gave its limits (``ints[I_RULE]``); otherwise it returns STOP at each check.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.engine.stop_limits import (
    L_ALLOW,
    L_BEAT,
    L_DUE,
    L_E2E,
    L_EVERY,
    L_GOODPUT,
    L_NEED,
    L_TPOT,
    L_TTFT,
)
from specbatch.simulator.engine.v1.kernel.admission import step_events
from specbatch.simulator.engine.v1.kernel.layout import (
    I_EVERY,
    I_RULE,
    R_POPPED,
    R_SKIP,
    R_TICK,
    STOP,
    STOPPED,
)


@njit(cache=True)
def events_before(arrival, order, arrived, n_req, t, stepped, idle, ints, regs, clock, limits,
                  out, first_token, finish, preemptions):
    """An early stop before the replica's next step (simulator.engine.core's ``tick``): the
    events since its last step start (kernel.admission.step_events) ticked; 0 to go on to the
    step, STOP when a check falls among them and the caller checks (no ``ints[I_RULE]``),
    STOPPED when :func:`checked_events` found the rule ending the run at one of them. After
    STOP the caller sets ``regs[R_SKIP]``: the same events are not counted again."""
    if regs[R_SKIP]:
        regs[R_SKIP] = 0
        return 0
    events = step_events(arrival, order, arrived, n_req, t, stepped, idle)
    if regs[R_TICK] + events < ints[I_EVERY]:
        regs[R_TICK] += events
        return 0
    if not ints[I_RULE]:
        return STOP
    if checked_events(arrival, order, arrived, n_req, t, stepped, idle, ints, regs, clock,
                      limits, out, first_token, finish, preemptions):
        return STOPPED
    return 0


@njit(cache=True)
def stop_rule(time, limits, arrival, out, first_token, finish, preemptions):
    """Whether the rule of ``limits`` stops the run at ``time`` (simulator.engine.stop_limits:
    analysis.plan.slo.EarlyStop's ``__call__`` with the same float operations on each floor):
    arrival, first_token, finish # [N] float64, out # [N] int64 the output lengths,
    preemptions # [N] int64."""
    n = arrival.shape[0]
    preempted = False
    for u in range(n):
        if preemptions[u] != 0:
            preempted = True
            break
    if not preempted and time <= limits[L_DUE]:
        return False
    if preempted and limits[L_ALLOW] == 0.0:
        return True
    if n == 0:
        return False
    need = np.int64(limits[L_NEED])
    b_ttft, b_tpot, b_e2e, beat = limits[L_TTFT], limits[L_TPOT], limits[L_E2E], limits[L_BEAT]
    has_ttft, has_tpot, has_e2e = not np.isnan(b_ttft), not np.isnan(b_tpot), not np.isnan(b_e2e)
    has_beat = not np.isnan(beat)
    over_ttft = over_tpot = over_e2e = bad = over_beat = 0
    for u in range(n):
        finished = finish[u]
        e2e = (time if np.isnan(finished) else finished) - arrival[u]
        miss = False
        if has_ttft or has_tpot:
            first = first_token[u]
            ttft = (time if np.isnan(first) else first) - arrival[u]
            if has_ttft and ttft > b_ttft:
                over_ttft += 1
                miss = True
            if has_tpot:
                tokens = np.float64(out[u])
                tpot = (e2e - ttft) / (tokens - 1.0) if tokens > 1.0 else 0.0
                if tpot > b_tpot:
                    over_tpot += 1
                    miss = True
        if has_e2e and e2e > b_e2e:
            over_e2e += 1
            miss = True
        if miss:
            bad += 1
        if has_beat and e2e > beat:
            over_beat += 1
    if over_ttft >= need or over_tpot >= need or over_e2e >= need:
        return True
    if (has_ttft or has_tpot or has_e2e) and (n - bad) / n < limits[L_GOODPUT]:
        return True
    return has_beat and over_beat >= need


@njit(cache=True)
def checked_events(arrival, order, arrived, n_req, t, stepped, idle, ints, regs, clock,
                   limits, out, first_token, finish, preemptions):
    """Walk the events the numpy engine pops between the replica's last step start and its
    next (those kernel.admission.step_events counts, in order: the arrivals while the last
    step ran, its STEP_END at ``t``, then when ``idle`` the next arrivals and their SCHEDULE),
    ticking ``regs[R_TICK]`` and checking :func:`stop_rule` where it reaches
    ``ints[I_EVERY]`` (the interval becomes ``limits[L_EVERY]`` from the first check on).
    True: the run stops at that event (its time in ``clock[3]``, the arrivals popped before
    it in ``regs[R_POPPED]``); False: go on to the step."""
    i = arrived
    if stepped:
        stopped, i = tick_through(t, i, n_req, arrival, order, ints, regs, clock, limits, out,
                                  first_token, finish, preemptions)
        if stopped:
            return True
    if idle and i == arrived and arrived < n_req:
        stopped, _ = tick_through(arrival[order[i]], i, n_req, arrival, order, ints, regs,
                                  clock, limits, out, first_token, finish, preemptions)
        return stopped
    return False


@njit(cache=True)
def tick_through(bound, i, n_req, arrival, order, ints, regs, clock, limits, out, first_token,
                 finish, preemptions):
    """Walk the arrivals at or before ``bound`` from the ``i``-th in arrival order (``order``),
    each one event ticked at its own arrival time, then the event at ``bound`` itself (the
    last step's STEP_END, or an idle replica's SCHEDULE at its next arrival), ticked there
    with every one of them popped: :func:`checked_events`' two walks. Returns (whether the
    run stops at one of these events, the arrivals popped so far)."""
    while i < n_req and arrival[order[i]] <= bound:
        if tick(arrival[order[i]], i, ints, regs, clock, limits, arrival, out, first_token,
                finish, preemptions):
            return True, i
        i += 1
    return tick(bound, i, ints, regs, clock, limits, arrival, out, first_token, finish,
                preemptions), i


@njit(cache=True)
def tick(time, popped, ints, regs, clock, limits, arrival, out, first_token, finish,
         preemptions):
    """One event at ``time`` (``popped`` arrivals before it): simulator.engine.core's tick,
    and the rule where it reaches the interval; True when the run stops there."""
    regs[R_TICK] += 1
    if regs[R_TICK] < ints[I_EVERY]:
        return False
    regs[R_TICK] = 0
    ints[I_EVERY] = np.int64(limits[L_EVERY])
    if not stop_rule(time, limits, arrival, out, first_token, finish, preemptions):
        return False
    clock[3] = time
    regs[R_POPPED] = popped
    return True
