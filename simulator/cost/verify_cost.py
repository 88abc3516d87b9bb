"""Verification time: the rejection sampler's seconds in one decode step.

A decode step over n requests verifying s_i draft tokens each (S = Σ s_i) reads the verifier's
probability rows, float32 (4 bytes each), V = the target's vocabulary::

    rows_TV = Σ (s_i + 1) + δ · S                       # target rows, then draft rows
    rows_BV = rows_TV + 2 · (1 + δ) · #{i : s_i > 0}
    t       = 4 · V · rows / (mem_bw · memory_eff) + floor

δ = 1 when the draft rows are distributions and 0 for one-hot drafts (greedy drafting,
temperature 0, the n-gram drafter): a one-hot ``Ms(·)`` is its drafted token, no row to read.

- TV (THEORY.md §2): one pass over the inputs, the target rows ``Mb(·|X^i)``, i = 0..s_i, and
  the draft rows ``Ms(·|X^{i-1})``, i = 1..s_i: the byte count of
  ``benchmarks/verify_gpu_bench.py``, ``(2γ + 1)·B·V·itemsize``. A vLLM-style sampler reads
  every position's pair in that pass (its correction token is drawn at every position in
  parallel), so the correction needs no second read.
- BV (THEORY.md §3): the same pass (every ``Z_{i+1} = Σ_x max(p_i Mb − Ms, 0)`` needs only
  ``p_i``, which the drafted tokens' ratios give before the pass; ``theory/
  verify_torch_sync_free.py`` computes them densely in one pass over both tables), then, once
  the backward scan has fixed τ, the extra token's draw from ``max(p_τ Mb − Ms, 0)``:
  ``theory/verify/triton_fused.py``'s two passes (mass, inverse CDF) over the target row and (δ) the
  draft row at τ, for every request that verified a draft (an upper bound: a fully accepted
  draft draws from its bonus row alone).
- On a temperature-0 trace BV is TV (THEORY.md §3) and both are priced as TV.
- Each rule is priced with its catalogue row's ``sampler_cost`` key (simulator.replay.rules):
  the tree rules (specinfer, traversal, gbv) with TV's one pass over the verified nodes' rows.
- A step that verifies nothing (S = 0: ``ar``, or a policy that verifies no draft) runs the
  plain sampler: its n target rows plus the fused floor, whatever the sampler preset.

``floor`` is the sampler preset's (:data:`simulator.cost.gpus.hardware.SAMPLERS`): ``fused``
(default: one kernel launch, assumed 50 µs), ``torch`` (this repo's torch path measured on an H100:
2.28 ms, BV max(2.28 ms, 1.96 ms · max s_i)); ``verify_cost = "none"`` prices verification at 0 s,
the engine without this term (bit-identical results). The bandwidth is one GPU's, with the
hardware preset's efficiency, for every cost model: a latency profile measures forward passes,
not the sampler, so the profiled model uses this modelled term too.

Policies that price steps themselves plan with the same term: ``vllm-dynamic`` builds it in
its ``calibrate``, and a policy with a ``price_verification(sampler)`` method (``dsd``) is
handed the engine's own before the run (:func:`simulator.run.attach_verify_cost`).

Not modelled: a fused BV kernel's sequential scan within one program (one program per request:
with fewer requests than SMs its Z passes run at one SM's bandwidth, not the device's), and
the logits-to-probabilities softmax (temperature, top-k/p) an engine runs before the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.gpus.hardware import FUSED_FLOOR, get_hardware, get_sampler
from specbatch.simulator.replay.rules import SAMPLER_COSTS, rule_entry

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.traces.format.trace import Trace

#: Bytes of one probability (float32 rows, the serving case).
PROB_BYTES = 4
#: Draws of BV's extra token after its scan: mass and inverse-CDF passes (theory/verify_triton).
BV_DRAW_PASSES = 2

try:  # numpy >= 2: the C function without the array-function dispatch
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # pragma: no cover - numpy 1.x
    _count_nonzero = np.count_nonzero


@dataclass(frozen=True)
class VerifyCost:
    """Seconds of one decode step's verification (module docstring) under the sampler-cost
    key ``rule`` (:data:`simulator.replay.rules.SAMPLER_COSTS`: "token" one pass, "block" the
    pass and BV's draws; a rule's key is its catalogue row's ``sampler_cost``) for a target of
    vocabulary ``vocab`` on ``bandwidth`` achieved bytes/s; ``draft_rows`` False for one-hot
    drafts (δ = 0)."""

    rule: str
    vocab: int
    bandwidth: float
    floor: float
    floor_per_position: float = 0.0
    draft_rows: bool = True
    sampler: str = "fused"

    def __post_init__(self) -> None:
        if self.rule not in SAMPLER_COSTS:
            raise SpecbatchError(f"VerifyCost: rule: expected a sampler-cost key "
                                 f"({', '.join(SAMPLER_COSTS)}), got {self.rule!r}")

    def rows(self, n: int, verified_sum: int, verified: np.ndarray) -> int:
        """Probability rows read by a step: n requests, Σ s_i = ``verified_sum``,
        ``verified`` # [n] the s_i."""
        rows = n + verified_sum * (2 if self.draft_rows else 1)
        if self.rule == "block" and verified_sum:
            rows += BV_DRAW_PASSES * (1 + self.draft_rows) * int(_count_nonzero(verified))
        return rows

    def seconds(self, n: int, verified_sum: int, verified: np.ndarray) -> float:
        """The step's verification seconds (0 for an empty batch).  verified # [n]"""
        if n == 0:
            return 0.0
        if verified_sum == 0:
            floor = FUSED_FLOOR
        elif self.rule == "block" and self.floor_per_position:
            floor = max(self.floor, self.floor_per_position * int(verified.max()))
        else:
            floor = self.floor
        nbytes = float(PROB_BYTES * self.vocab * self.rows(n, verified_sum, verified))
        return nbytes / self.bandwidth + floor


def measured_floors(rows, bandwidth: float) -> tuple[float, float]:
    """(TV floor per call, BV floor per draft position), seconds, from timed verify calls:
    ``benchmarks/verify_gpu_bench.py`` rows (batch B, gamma γ, vocab V, tv_ms, bv_ms) of
    float32 inputs with dense draft rows. Per cell the bytes term of this module (TV
    ``(2γ + 1)·B`` rows, BV ``4·B`` more, 4 bytes each, over ``bandwidth`` bytes/s) is
    subtracted from the measured time; TV's floor is the median of the rest, BV's the median
    of the rest over γ (its backward scan costs per position). The derivation of the ``torch``
    preset (simulator.cost.gpus.hardware.SAMPLERS); a GPU run of the fused kernels gives
    ``fused``'s."""
    tv, bv = [], []
    for r in rows:
        b, g, v = int(r["batch"]), int(r["gamma"]), int(r["vocab"])
        row_s = PROB_BYTES * v / bandwidth
        tv.append(1e-3 * r["tv_ms"] - (2 * g + 1) * b * row_s)
        bv.append((1e-3 * r["bv_ms"] - ((2 * g + 1) * b + 2 * BV_DRAW_PASSES * b) * row_s) / g)
    if not tv:
        raise SpecbatchError("verify timings: expected float32 rows, got none")
    return float(np.median(tv)), float(np.median(bv))


def build_verify_cost(sampler: str, rule: str, hardware: str, vocab: int,
                      one_hot: bool = False) -> VerifyCost | None:
    """The :class:`VerifyCost` of a sampler preset on a hardware preset, or None for
    ``sampler = "none"`` (verification takes 0 s)."""
    if str(sampler).lower() == "none":
        return None
    s, hw = get_sampler(sampler), get_hardware(hardware)
    return VerifyCost(rule=rule, vocab=int(vocab), bandwidth=hw.mem_bw * hw.memory_eff,
                      floor=s.floor, floor_per_position=s.floor_per_position,
                      draft_rows=not one_hot, sampler=s.name)


def one_hot_drafts(trace) -> bool:
    """Whether every draft row of ``trace`` is one-hot: every drafted token has draft
    probability 1 (greedy drafting, temperature 0, n-gram drafts and their filler slots)."""
    q = trace.q
    return bool(q.size == 0 or (q == 1.0).all())


def target_vocab(target: str, trace) -> int:
    """V of the target: its shape's (traces.models.shapes: a registry name or a config.json path,
    whose ``vocab_size`` is the model's, e.g. 128,256 for Llama 3), else the vocabulary the
    trace records for its target model (``meta.json`` models.target: ``shape.vocab`` or
    ``vocab``; a synthetic trace's is its toy vocabulary)."""
    from specbatch.traces.models.shapes import find_shape

    shape = find_shape(str(target))
    if shape is not None:
        return int(shape.vocab)
    recorded = ((getattr(trace, "meta", None) or {}).get("models") or {}).get("target") or {}
    vocab = (recorded.get("shape") or {}).get("vocab", recorded.get("vocab"))
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
        return vocab
    raise SpecbatchError(f"config: field verify_cost: the target {target!r} is not a known shape "
                         "and the trace records no target vocabulary; expected a shape name "
                         "or verify_cost = \"none\"")


def verify_notes(config: SimConfig) -> tuple[str, ...]:
    """A note when a profiled cost model runs with a priced verification: its latency profile
    measures forward passes only, so the verification time is this module's modelled term."""
    if config.cost != "profiled" or str(config.verify_cost).lower() == "none":
        return ()
    return (f"verification time is modelled, not measured (the latency profile has no "
            f"sampler rows): probability bytes over the {config.hardware} preset's bandwidth "
            f"+ the {config.verify_cost} sampler's floor per call",)


def greedy_trace(trace) -> bool:
    """Whether ``trace`` was captured at temperature 0, where BV is TV (THEORY.md §3: one-hot
    rows on both sides) and an engine verifies both by comparing argmaxes."""
    temperature = (getattr(trace, "meta", None) or {}).get("temperature")
    return isinstance(temperature, (int, float)) and float(temperature) == 0.0


def verify_cost_for(config: SimConfig, trace: Trace, free_draft: bool) -> VerifyCost | None:
    """The verification cost of a run: ``config.verify_cost`` (sampler preset or "none") under
    ``config.verify``'s sampler-cost key (priced as TV on a temperature-0 trace,
    :func:`greedy_trace`) on
    ``config.hardware``; V of ``config.target`` (:func:`target_vocab`); draft rows are one-hot
    for a drafter without a model (``free_draft``) or a trace whose drafts all are
    (:func:`one_hot_drafts`)."""
    if str(config.verify_cost).lower() == "none":
        return None
    rule = "token" if greedy_trace(trace) else rule_entry(config.verify).sampler_cost
    return build_verify_cost(config.verify_cost, rule, config.hardware,
                             target_vocab(config.target, trace),
                             free_draft or one_hot_drafts(trace))

