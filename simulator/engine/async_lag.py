"""vLLM's async scheduling lag: step S + 1 is scheduled while step S runs, so what happens
during S (an arrival, a request finishing in S) is seen by the schedule of S + 2.

With ``--async-scheduling`` vLLM's engine core runs :func:`step_with_batch_queue`
(vllm/v1/engine/core.py, ``EngineCore.step_with_batch_queue``, a batch queue of depth 2):
it schedules a batch and launches it without blocking; while the queue is not full it returns
at once, and the busy loop's next pass takes the new requests (``_process_input_queue``) and
schedules the next batch; only then does it block on the oldest batch's output and process
it (``Scheduler.update_from_output``: tokens appended, finished requests freed). In the steady
state, then, step k (running from T_k to T_k+1) is scheduled at T_k−1, the start of step k − 1,
right after step k − 2's output was processed. vLLM's ``AsyncScheduler``
(vllm/v1/core/sched/async_scheduler.py, ``_update_after_schedule``) schedules the running
requests of step k − 1 on output placeholders (``num_output_placeholders``: the token step
k − 1 samples is not known yet, and a speculative request's draft tokens are placeholders too:
``spec_token_ids = _spec_token_placeholders``, ``num_spec_tokens_to_schedule`` of them), so a
decoding request runs every step without waiting for its last output. What the lag changes
is what the scheduler sees of the waiting queue and the pool. The rule modelled here, for a
step k that starts when step k − 1 ends (the engine stayed busy):

- **arrivals**: step k admits only requests that arrived at or before T_k−1 (the start of
  step k − 1, when step k was scheduled); one arriving while step k − 1 runs waits for step
  k + 1, so a request arriving at a busy engine joins the second step after it, not the
  next;
- **finished requests**: the requests step k − 1 finished keep their ``max_num_seqs`` slot
  and their KV blocks (or their reservation) while step k is composed: vLLM frees them when
  step k − 1's output is processed, after step k was scheduled. vLLM does not schedule a
  request it knows reaches ``max_tokens`` in the step in flight (``Scheduler.schedule``'s
  placeholder check), and the simulator never schedules a finished request either;
- **an empty schedule**: when the schedule made at T_k−1 is empty (nothing runs but what
  finished in step k − 1, and nothing it may admit), vLLM queues the empty batch, blocks on
  step k − 1's output and schedules again with everything known: the step at T_k then sees
  every arrival and every freed slot (as an idle engine's first step does);
- **an idle engine**: a step that starts later than the last one ended (nothing ran; vLLM
  blocked on its input queue) is scheduled when it starts, with everything known: no lag.

Not modelled: with drafts, vLLM schedules a request that may finish in the step in flight
(when even all drafts rejected do not reach ``max_tokens``) for one more, wasted, step; the
simulator's plan of step k is made on step k − 1's committed outcome (vLLM's drafts and
sampled tokens reach the GPU without the host, and the scheduled counts, 1 + K per request
for a fixed K, are the same). A policy whose per-request s_i depends on the last outcome
(adaptive lengths) could not be run by vLLM's async scheduler as the simulator plans it; the
lag here covers admission and release only. The lag applies where vLLM's async scheduling
does (:func:`lags`); vLLM's DP ranks in lockstep (simulator.engine.lockstep) and the vllm-v0
composer keep the synchronous rule.

The numpy engine (simulator.engine.core) holds arrivals that came while its replica was busy
in ``Replica.pending`` and a finished step's retired columns in ``Replica.deferred``
(simulator.engine.decode.Decode.finish); :func:`lagged_step` composes a step under the rule.
The compiled loop (simulator.engine.v1.kernel.loop.run_steps) keeps the same rule with its
registers (``R_SEEN``, ``R_GHOST_N``, ``R_GHOST_FREE``, ``R_FULL``) and the last step's start
(``clock[2]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.engine.core import Engine
    from specbatch.simulator.engine.request_state import Replica


def lags(config: SimConfig) -> bool:
    """Whether ``config``'s steps are scheduled one step ahead (module docstring): vLLM's
    async scheduling is on for the deployment (``async_scheduling`` as resolved by
    SimConfig.async_setting, simulator.cost.features.async_overhead's rule, which the cost
    model's
    overlap follows too) and the composer is vllm-v1's (the scheduler catalogue's mixed-step
    row)."""
    return config.scheduler_row.mixed_steps and config.async_setting.on


def promote(rep: Replica, arrival, cutoff: float) -> None:
    """Move ``rep``'s pending arrivals that arrived at or before ``cutoff`` (seconds) into its
    waiting queue, in arrival order."""
    pending = rep.pending
    while pending and arrival[pending[0]] <= cutoff:
        rep.waiting.append(pending.popleft())


def lagged_step(engine: Engine, rep: Replica, time: float) -> float | None:
    """Run ``rep``'s step at ``time`` under the lag (module docstring); returns its duration
    (None: nothing runs). A step that starts when the last one ended is composed with the
    arrivals up to the last step's start and the last step's finished requests still
    holding their slots (the composer is told how many: vllm-v1's
    ``V1Step.step(rep, time, held)``, the only composer that lags, :func:`lags`) and blocks;
    when that composes nothing it is composed again with everything known. Any other step
    sees everything."""
    arrival = engine.w.arrival
    composer = engine.composer
    if rep.last_end == time:  # the engine stayed busy: scheduled at the last step's start
        promote(rep, arrival, rep.last_start)
        held = rep.deferred  # kept there while composing: no run of steps (v1.runs)
        duration = composer.step(rep, time, 0 if held is None else int(held.shape[1]))
        if held is not None:
            if rep.deferred is held:  # this step finished nobody
                rep.deferred = None
            composer.release(rep, held)
        if duration is None and (rep.pending or held is not None):
            promote(rep, arrival, float("inf"))  # an empty schedule: again, everything known
            duration = composer.step(rep, time)
    else:  # an idle engine: its output processed, its input queue read
        if rep.deferred is not None:
            held, rep.deferred = rep.deferred, None
            composer.release(rep, held)
        promote(rep, arrival, float("inf"))
        duration = composer.step(rep, time)
    if duration is not None:
        rep.last_end = time + duration
    return duration
