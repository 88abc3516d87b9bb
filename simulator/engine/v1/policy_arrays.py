"""The engines' chain policies as the compiled vllm-v1 loop's arrays, and their state back.

The kernel (simulator.engine.v1.kernel) runs a policy's per-step rule on plain arrays; this
module packs what each built-in engine policy decides from, the numpy engine's twin being the
policy object itself (parity: tests/simulator/engine/v1/test_compiled_policies.py):

- ``batch-schedule`` (vLLM's ``num_speculative_tokens_per_batch_size``, TensorRT-LLM's
  ``draft_len_schedule``) and ``vllm-dynamic``: one K per batch size n, the dense table
  ``window`` # [batch + 1] (batch = max_num_seqs, or the requests when fewer) of
  :meth:`BatchSchedule.window` / :meth:`VllmDynamic.best_k` (a pure function of n for a run:
  the batch-size table, or the goodput argmax on the run's cost model and calibration), read
  at n = the step's decoding requests;
- ``ema-adaptive`` (SGLang's ``--speculative-adaptive-config``): its slots'
  (:class:`~simulator.policies.engines.AdaptiveSlot`) settings and state, ``slot_i`` #
  [slots, 6 + candidates] int64 and ``slot_f`` # [slots, 5] float64 (kernel's SL_* / SF_*
  columns), updated in place by the kernel's ema_observe;
- ``vllm-adaptive`` (default knobs: the confidence surrogate, profiled cost tables, stale or
  fresh confidences): the profiled tables D # [max_num_seqs + 1] and V # [max_tokens + 1]
  (simulator.policies.adaptive_tables.build_tables on the run's cost model, what
  VllmAdaptive.table_cost builds on first use) and its stale-survival map keyed by trace row
  (``prev_src`` the trace row whose survival the entry holds, ``prev_stamp`` the map's
  generation that wrote it; # [trace rows + K + 2], a request's next row may pass the trace);
- the row-wise policies ``threshold``, ``specdec++`` and ``entropy-stop`` (each request's
  lengths a function of its trace row's signals, StepView.row_table): ``row_d``, ``row_s`` #
  [trace rows] the policy's own ``decide`` on a view of every trace row (the drafter's
  ``proposed`` cap is the kernel's, as plan_step's).

Every other policy gets one-element placeholders (the kernel reads none of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.policies.registry import Policy
    from specbatch.traces.format.trace import Trace


def policy_arrays(kn: Any, config: SimConfig, policy: Policy, cost: CostModel, trace: Trace,
                  ints: np.ndarray, requests: int) -> list[np.ndarray]:
    """The kernel's policy arrays (module docstring) for ``policy``, in run_steps' order
    (window, slot_i, slot_f, pstate, prev_src, prev_stamp, d_table, v_table, row_d, row_s),
    its int parameters set in ``ints`` (I_WINDOW, I_SLOTS, I_ADAPTIVE, I_ROWS). Each replica
    runs a copy.
    The batch-size table stops at the largest batch the run can hold (``max_num_seqs``, or
    its ``requests`` when fewer): vllm-dynamic prices each entry."""
    i64 = np.int64
    window = np.zeros(1, dtype=i64)
    slot_i = np.zeros((1, 1), dtype=i64)
    slot_f = np.zeros((1, 1))
    pstate = np.zeros(kn.N_PSTATE, dtype=i64)
    pstate[kn.P_CURRENT] = -1
    prev_src = np.zeros(1, dtype=i64)
    prev_stamp = np.full(1, -1, dtype=i64)
    d_table = v_table = np.ones(1)
    row_d = row_s = np.zeros(1, dtype=i64)
    seqs = max(1, min(int(config.max_num_seqs), int(requests)))
    if policy.name == "batch-schedule":
        window = np.array([0] + [policy.window(n) for n in range(1, seqs + 1)], dtype=i64)
    elif policy.name == "vllm-dynamic":  # the goodput argmax of every batch size, as decide
        for n in range(1, seqs + 1):
            if n not in policy.table:
                policy.table[n] = policy.best_k(n, cost)
        window = np.array([0] + [policy.table[n] for n in range(1, seqs + 1)], dtype=i64)
    elif policy.name == "ema-adaptive":
        width = max(len(slot.candidates) for slot in policy.slots)
        slot_i = np.zeros((len(policy.slots), kn.SL_CANDS + width), dtype=i64)
        slot_f = np.zeros((len(policy.slots), kn.SF_EMA + 1))
        for r, (key, slot) in enumerate(zip(policy.keys, policy.slots)):
            slot_i[r, :kn.SL_CANDS] = (key, slot.interval, slot.warmup, len(slot.candidates),
                                       slot.steps, slot.batches)
            slot_i[r, kn.SL_CANDS:kn.SL_CANDS + len(slot.candidates)] = slot.candidates
            slot_f[r] = (slot.alpha, slot.down, slot.up, slot.ceiling_coeff, slot.ema)
        if policy.current is not None:
            pstate[kn.P_CURRENT] = policy.slots.index(policy.current)
        ints[kn.I_SLOTS] = len(policy.slots)
    elif policy.name == "vllm-adaptive":
        from specbatch.simulator.policies.adaptive_tables import build_tables

        if policy.tables is None:  # VllmAdaptive.table_cost's, built on the same cost model
            policy.tables = build_tables(cost, policy.max_reqs, policy.depth, policy.max_tokens,
                                         policy.graph_sizes, policy.context)
        d_table = np.ascontiguousarray(policy.tables.draft, dtype=np.float64)
        v_table = np.ascontiguousarray(policy.tables.verify, dtype=np.float64)
        ints[kn.I_ADAPTIVE] = 1 if policy.stale else 2
        if policy.stale:
            rows = int(trace.n_rows) + policy.depth + 2
            prev_src = np.zeros(rows, dtype=i64)
            prev_stamp = np.full(rows, -1, dtype=i64)
    elif row_wise(policy):
        from specbatch.simulator.policies.view import StepView

        rows = np.arange(int(trace.n_rows), dtype=i64)
        view = StepView(trace, rows, np.zeros_like(rows), None, policy.depth, None, cost)
        drafted, verified = policy.decide(view)
        row_d = np.ascontiguousarray(drafted, dtype=i64)
        row_s = np.ascontiguousarray(verified, dtype=i64)
        ints[kn.I_ROWS] = 1
    elif policy.name == "hindsight":  # s_i from the step's η: the kernel's
        ints[kn.I_ROWS] = 2
    if window.shape[0] > 1:
        ints[kn.I_WINDOW] = window.shape[0]
    return [window, slot_i, slot_f, pstate, prev_src, prev_stamp, d_table, v_table, row_d,
            row_s]


def policy_state_back(kn: Any, policy: Policy, arrays: list[np.ndarray]) -> None:
    """Leave ``policy`` as the numpy engine leaves replica 0's copy, where its state is
    read after a run: ema-adaptive's slots (steps, EMA, batches) and the slot it routed to
    last. (vllm-adaptive's inspection list ``budgets`` and its stale map stay as they were.)"""
    if policy.name != "ema-adaptive":
        return
    _, slot_i, slot_f, pstate, *_ = arrays
    for r, slot in enumerate(policy.slots):
        slot.steps = int(slot_i[r, kn.SL_STEPS])
        slot.batches = int(slot_i[r, kn.SL_BATCHES])
        slot.ema = float(slot_f[r, kn.SF_EMA])
    current = int(pstate[kn.P_CURRENT])
    policy.current = policy.slots[current] if current >= 0 else None


def row_wise(policy: Policy) -> bool:
    """Whether ``policy``'s (d_i, s_i) depend on the request's trace row alone: a built-in
    whose ``lengths`` method builds them row by row for StepView.row_table (threshold,
    specdec++, entropy-stop)."""
    return callable(getattr(policy, "lengths", None))
