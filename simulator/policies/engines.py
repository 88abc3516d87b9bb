"""The draft-length policies serving engines ship, by their own knob names.

One K for the whole batch, chosen from the batch size or from past acceptance (what vLLM,
TensorRT-LLM and SGLang run; none allocates drafts per request across a batch):

- ``vllm-dynamic``: vLLM's dynamic speculative decoding, K by goodput from offline
  per-position acceptance (:class:`VllmDynamic`);
- ``batch-schedule``: K from a batch-size table, vLLM's ``num_speculative_tokens_per_batch_size``
  or TensorRT-LLM's ``draft_len_schedule`` (:class:`BatchSchedule`);
- ``ema-adaptive``: SGLang's adaptive ``speculative_num_steps`` from an EMA of accepted
  lengths (:class:`EmaAdaptive`).

Per-request early stopping from draft-side signals lives in :mod:`simulator.policies.stops`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.simulator.policies.base import Policy
from specbatch.simulator.policies.calibration import position_acceptance
from specbatch.simulator.policies.schedules import (
    parse_sglang_config,
    parse_trt_schedule,
    parse_vllm_table,
    trt_draft_len,
    vllm_lookup,
)
from specbatch.simulator.policies.view import StepView

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.cost.verify_cost import VerifyCost


def uniform(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every request drafts and verifies k."""
    s = np.full(n, k, dtype=np.int64)
    return s, s


class VllmDynamic(Policy):
    """``vllm-dynamic``: vLLM's dynamic speculative decoding (PR vllm-project/vllm#32374),
    ``vllm/v1/spec_decode/dynamic/manager.py``
    ``DynamicSpeculativeDecodingManager._compute_optimal_num_speculative_tokens``.

    For a batch of n requests, K = argmax over K = 0..k of ``goodput(K) = (1 + Σ_{i<K} a_i) / ITL(n,
    K)`` (the first maximum: ties go to the smaller K), with ``a_i`` the per-position acceptance
    rates (``acceptance_rate_per_pos``) and ITL the step time. vLLM measures both offline
    (``generate_config.py``: an offline spec-decode pass for a_i, ``vllm bench sweep serve`` for the
    median ITL per batch size and K); here a_i is
    :func:`simulator.policies.calibration.position_acceptance` on the calibration split
    (``calibrate``) and ITL the active cost model's step (K draft passes, one verify pass of query K
    + 1, the rejection sampler, the overhead) at the calibration split's mean context length, one
    table entry per batch size, computed on first use. The online refresh of a_i (``is_online``) is
    not modelled. Reads: ``cost`` and the calibration split. Ignores the budget.
    """

    name = "vllm-dynamic"
    budgeted = False
    reads = ("cost",)

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        return int(config.num_speculative_tokens)

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.rates: np.ndarray | None = None
        self.context = 0
        self.sampler: VerifyCost | None = None
        self.table: dict[int, int] = {}

    def calibrate(self, trace: Any) -> None:
        """Per-position acceptance and mean context length of the calibration requests."""
        self.rates = position_acceptance(trace, self.depth, self.rule)
        positions = np.arange(trace.n_rows) - np.repeat(trace.offsets[:-1], trace.output_len)
        self.context = int(round(float(np.mean(trace.prompt_len[trace.row_request] + positions))))
        self.table = {}

    def price_verification(self, sampler: VerifyCost | None) -> None:
        """Plan with the rejection sampler the engine charges this run (a
        :class:`simulator.cost.verify_cost.VerifyCost`, None: 0 s), handed over before it starts
        (:func:`simulator.run.attach_verify_cost`)."""
        self.sampler = sampler
        self.table = {}

    def itl(self, n: int, k: int, cost: CostModel) -> float:
        """Seconds of one step of n requests at window k and the calibration context: k draft
        passes, the verify pass, the rejection sampler, the overhead (what vLLM's measured
        ITL holds)."""
        ones = np.ones(n, dtype=np.int64)
        kv = np.full(n, self.context, dtype=np.int64)
        t = cost.overhead + cost.step_time("target", ones * (k + 1), kv)
        for d in range(k):
            t += cost.step_time("draft", ones, kv + d)
        if self.sampler is not None:
            t += self.sampler.seconds(n, n * k, ones * k)
        return float(t)

    def best_k(self, n: int, cost: CostModel) -> int:
        """The goodput argmax for a batch of n (class docstring)."""
        if self.rates is None:
            raise RuntimeError("vllm-dynamic: calibrate() was not called")
        best_k, best = 0, -1.0
        accepted = 1.0 + np.concatenate([[0.0], np.cumsum(self.rates)])
        for k in range(self.depth + 1):
            goodput = accepted[k] / self.itl(n, k, cost)
            if goodput > best:
                best_k, best = k, goodput
        return best_k

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        k = self.table.get(view.n)
        if k is None:
            k = self.table[view.n] = self.best_k(view.n, view.cost)
        return uniform(view.n, k)

    def schedule(self, max_batch: int, cost: CostModel) -> str:
        """The choices for batch sizes 1..max_batch as vLLM's
        ``num_speculative_tokens_per_batch_size`` (``"lo-hi:K,..."``): the table vLLM's
        ``generate_config.py`` derives offline, for this trace and cost model."""
        ks = [self.table[n] if n in self.table else self.best_k(n, cost)
              for n in range(1, max_batch + 1)]
        parts, lo = [], 1
        for n in range(2, max_batch + 2):
            if n > max_batch or ks[n - 1] != ks[lo - 1]:
                parts.append(f"{lo}-{n - 1}:{ks[lo - 1]}")
                lo = n
        return ",".join(parts)

    def run_notes(self, config: SimConfig, cost: CostModel) -> tuple[str, ...]:
        """What a run tells the user to set in vLLM."""
        table = self.schedule(int(config.max_num_seqs), cost)
        return (f"vllm-dynamic's choices as vLLM's batch-size table: "
                f"num_speculative_tokens_per_batch_size = \"{table}\"",)


class BatchSchedule(Policy):
    """``batch-schedule``: K from the batch size by a table, the engines' static dynamic-SD.

    - vLLM ``num_speculative_tokens_per_batch_size`` ``[(lo, hi, K)]``: the scheduler's
      ``num_spec_tokens_to_schedule = dynamic_sd_lookup[batch size]``
      (``vllm/v1/core/sched/scheduler.py``), the dense table of
      :func:`simulator.policies.schedules.vllm_lookup` (K clamped to ``num_speculative_tokens``).
    - TensorRT-LLM ``draft_len_schedule`` ``{batch size: draft_len}``:
      :func:`simulator.policies.schedules.trt_draft_len` (0 past the largest key).

    At most one of the two knobs is set; with neither, K = ``num_speculative_tokens`` at every
    batch size (vLLM with dynamic SD off; TensorRT-LLM's lookup without a schedule returns
    ``max_draft_len``). The batch size is the step's decoding requests
    (vLLM counts every scheduled request, prefill chunks included, issue vllm#49548). Reads
    nothing but n. Ignores the budget.
    """

    name = "batch-schedule"
    budgeted = False

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        return int(config.num_speculative_tokens)

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        check_batch_schedule(config, "config")
        vllm = config.num_speculative_tokens_per_batch_size
        self.dense = None
        self.schedule: dict[int, int] = {}
        if vllm is not None:
            entries = parse_vllm_table(vllm, "config", "num_speculative_tokens_per_batch_size")
            self.dense = vllm_lookup(entries, int(config.max_num_seqs), self.depth)
        elif config.draft_len_schedule is not None:
            self.schedule = parse_trt_schedule(config.draft_len_schedule, "config",
                                               "draft_len_schedule", self.depth)

    def window(self, n: int) -> int:
        """K for a batch of n decoding requests."""
        if self.dense is not None:
            return int(self.dense[min(n, self.dense.shape[0] - 1)])
        if self.schedule:
            return trt_draft_len(self.schedule, n)
        return self.depth

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        return uniform(view.n, self.window(view.n))


def check_batch_schedule(config: SimConfig, where: str) -> None:
    """At most one table knob for ``batch-schedule`` (one-line error)."""
    from specbatch.fields import fail

    vllm, trt = config.num_speculative_tokens_per_batch_size, config.draft_len_schedule
    if vllm is not None and trt is not None:
        fail(where, "num_speculative_tokens_per_batch_size", "none when draft_len_schedule is "
             "set (policy batch-schedule reads one table)", vllm)


class AdaptiveSlot:
    """SGLang's ``AdaptiveStepSlot`` (``python/sglang/srt/speculative/adaptive_spec_params.py``):
    an EMA of the batch-mean accepted draft tokens, re-planned every ``update_interval``
    batches after ``warmup_batches``.

    ``update(accepted)``: when the current step count is > 0,
    ``ema ← (1 − α) ema + α · mean(accepted)``; the batch counter grows either way.
    ``recompute`` (``_recompute_params``): from 0 steps, probe the next candidate; otherwise
    walk down while ``ema <= (0.5 if prev == 0 else prev − 0.5) + down_hysteresis``, and if it
    did not move down, walk up while ``ema > current − 0.5 + up_hysteresis``; a positive
    ``ceiling_coeff`` caps a non-rising target at ``max(1, ceil(ema · coeff))``. The EMA starts
    at ``steps − 1`` of the initial steps (``initial_steps`` if a candidate, else the middle
    candidate).
    """

    def __init__(self, initial_steps: int, settings: dict) -> None:
        self.candidates = sorted(set(settings["candidate_steps"]))
        self.alpha = float(settings["ema_alpha"])
        self.interval = int(settings["update_interval"])
        self.warmup = int(settings["warmup_batches"])
        self.down = float(settings["down_hysteresis"])
        self.up = float(settings["up_hysteresis"])
        self.ceiling_coeff = float(settings["ceiling_coeff"])
        self.steps = (initial_steps if initial_steps in self.candidates
                      else self.candidates[len(self.candidates) // 2])
        self.ema = float(self.steps - 1)
        self.batches = 0

    def update(self, accepted: np.ndarray) -> None:
        if accepted.shape[0] == 0:
            return
        if self.steps > 0:
            self.ema = (1 - self.alpha) * self.ema + self.alpha * float(accepted.mean())
        self.batches += 1
        if self.batches > self.warmup and (self.batches - self.warmup) % self.interval == 0:
            self.recompute()

    def recompute(self) -> None:
        c, old = self.candidates, self.steps
        i = c.index(old)
        if old == 0:
            i = min(i + 1, len(c) - 1)
            if c[i] > 0 and self.ema < 0:
                self.ema = float(c[i] - 1)
            self.steps = c[i]
            return
        start = i
        while i > 0:
            prev = c[i - 1]
            if self.ema <= (0.5 if prev == 0 else prev - 0.5) + self.down:
                i -= 1
            else:
                break
        if i == start:
            while i < len(c) - 1 and self.ema > c[i] - 0.5 + self.up:
                i += 1
        if self.ceiling_coeff > 0:
            ceiling = max(1, int(np.ceil(self.ema * self.ceiling_coeff)))
            if ceiling < c[i] <= old:
                while i > 0 and c[i] > ceiling:
                    i -= 1
        self.steps = c[i]


class EmaAdaptive(Policy):
    """``ema-adaptive``: SGLang's adaptive speculative decoding (``--speculative-adaptive``,
    ``AdaptiveSpeculativeParams`` in ``python/sglang/srt/speculative/adaptive_spec_params.py``):
    one :class:`AdaptiveSlot` per batch-size key of ``speculative_adaptive_config``; a batch
    of n requests is routed to the largest key <= n (``AdaptiveStepRouter.
    batch_size_key_for_batch``, without its CUDA-graph padding of n), drafts and verifies that
    slot's current steps, and feeds the slot the accepted draft tokens of every request
    (``on_verify_complete``). ``num_speculative_tokens`` is the initial
    ``speculative_num_steps``; the depth is the largest candidate. Reads: past acceptance.
    Ignores the budget.
    """

    name = "ema-adaptive"
    budgeted = False

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        slots = parse_sglang_config(config.speculative_adaptive_config, "config",
                                    "speculative_adaptive_config")
        return max(max(s["candidate_steps"]) for s in slots.values())

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        slots = parse_sglang_config(config.speculative_adaptive_config, "config",
                                    "speculative_adaptive_config")
        self.keys = list(slots)
        self.slots = [AdaptiveSlot(self.k, settings) for settings in slots.values()]
        self.current: AdaptiveSlot | None = None

    def route(self, n: int) -> AdaptiveSlot:
        """The slot of the largest key <= n (the smallest key below every key)."""
        i = int(np.searchsorted(self.keys, n, side="right")) - 1
        return self.slots[max(i, 0)]

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        self.current = self.route(view.n)
        return uniform(view.n, self.current.steps)

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        if self.current is not None:
            self.current.update(accepted)
