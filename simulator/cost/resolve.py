"""The default cost model, ``cost = "auto"``: the best source validated out of sample that
covers the asked GPU and models, with the roofline as the named fallback.

:data:`SOURCES` is the catalogue, one row per measured source, best first (docs/fidelity.md
gives each row's evidence):

1. ``calibrated`` on a GPU with LLMServingSim's per-layer vLLM 0.19 profiles of its own (RTX
   4090, RTX PRO 6000): whole decoder layers measured inside vLLM, and the bundled measured
   vLLM runs on those GPUs replay within 3 % TPOT and e2e with it (aic: -8 to -25 % TPOT);
2. ``aic``: AIConfigurator's per-op vLLM 0.24 kernel tables of the GPU
   (simulator.cost.measured.aic_cost), for the GPUs, model structures (sliding-window layers
   included: the full-attention law at the windowed sums), precisions and head widths those
   tables hold: today's kernels (Vidur's 2024 H100 GEMMs are 17 % slower);
   GEMMs, MoE, all-reduce and attention (its grid law) within 8 % of the tables' rows held
   out, but for L40S's GEMMs (9-10 %: its L2-warm cells are read cold, as a serving pass reads
   its weights) and its MLA (10.7 %); A100's eager MLA rows price nothing;
3. ``calibrated`` on a GPU with Vidur's per-op profiles of its own (A100, H100, A40): where
   the tables above do not reach (e.g. a head width AIConfigurator did not time);
4. ``roofline``: datasheet peaks times assumed efficiencies; covers everything.

A GPU that only borrows another's laws (``proxy`` in the GPU catalogue) is covered by no
``calibrated`` row, and a model the calibrated pricer refuses (a MoE or MLA shape without its
own profile cell on an LLMServingSim GPU) passes to the next row.
:func:`resolve_cost` walks the rows and returns the first that covers the request, with the
reason each earlier row passed, so a run says which source priced it and, when it fell back,
why. Any other ``cost`` name is taken as asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from specbatch.simulator.cost.gpus.catalogue import find_gpu

AUTO = "auto"


@dataclass(frozen=True)
class CostAsk:
    """What a run asks the cost model to price (the SimConfig fields a source's coverage
    depends on)."""

    hardware: str
    target: str
    draft: str
    tp: int = 1
    quantization: str = "none"
    kv_cache_dtype: str = "auto"
    draft_weight_bits: int = 16
    routing_skew: float = 0.0  # a MoE target's Zipf expert loads (theory.moe; 0: uniform)
    expert_parallel: bool = False  # enable_expert_parallel (cost.features.expert_parallel)
    data_parallel: int = 1  # data_parallel_size: with expert_parallel, ep = data_parallel · tp


@dataclass(frozen=True)
class CostChoice:
    """Which registry model prices a run: ``name``; ``asked`` the config's ``cost``;
    ``passed`` one ``"source: reason"`` per catalogue row passed over (empty when the first
    row covered the request, or when the name was asked for)."""

    asked: str
    name: str
    passed: tuple[str, ...] = ()

    @property
    def fallback(self) -> bool:
        """Whether ``auto`` fell back to the roofline."""
        return self.asked == AUTO and self.name == "roofline"

    def line(self) -> str:
        """One line for a run's output: ``auto -> aic`` or ``auto -> roofline (fallback:
        aic: ...; calibrated: ...)``; the bare name when it was asked for."""
        if self.asked != AUTO:
            return self.name
        why = f" ({'fallback: ' if self.fallback else ''}{'; '.join(self.passed)})"
        return f"auto -> {self.name}{why if self.passed else ''}"

    def to_dict(self) -> dict:
        return {"asked": self.asked, "ran": self.name, "passed_over": list(self.passed)}


@dataclass(frozen=True)
class SourceRow:
    """One measured source: the registry name it builds, what validated it, and
    ``covers(ask)``: None when it covers the request, else the reason it does not."""

    name: str
    validated: str
    covers: Callable[[CostAsk], str | None]


def aic_covers(ask: CostAsk) -> str | None:
    """AIConfigurator's tables cover the GPU, the models' structure and precisions
    (simulator.cost.measured.aic_cost.aic_covers)."""
    from specbatch.simulator.cost.measured.aic_cost import aic_covers as covers
    from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS
    from specbatch.traces.models.shapes import get_shape

    if ask.routing_skew:
        return (f"routing_skew {ask.routing_skew:g}: the bundled MoE curves time balanced "
                "routing only")
    if ask.expert_parallel:  # the rank's layout timed by an ep row (aic_ep), else passed over
        from specbatch.simulator.cost.measured.aic_ep import ep_gap

        base = aic_covers(dataclasses.replace(ask, expert_parallel=False))
        return base or ep_gap(ask.hardware, ask.target, ask.tp, ask.data_parallel,
                              ask.quantization)
    drafter = str(ask.draft).lower() in FREE_DRAFTS + HEAD_DRAFTS  # no draft model to price
    return covers(ask.hardware, get_shape(ask.target), None if drafter else get_shape(ask.draft),
                  ask.tp, ask.quantization, ask.kv_cache_dtype,
                  draft_weight_bits=ask.draft_weight_bits)


def own_profiles(ask: CostAsk, source: str) -> str | None:
    """None when the GPU's catalogue row is calibrated by the measured ``source`` of its own
    (not a proxy's) and the calibrated model prices both roles, else the reason."""
    row = find_gpu(ask.hardware)
    if row is None:
        return f"no catalogue row for GPU {ask.hardware!r}"
    if row.profiles != source:
        borrowed = f" (it borrows {row.proxy}'s laws)" if row.proxy else ""
        return f"no {source} profile of {row.name}{borrowed}"
    if ask.expert_parallel and source != "llmservingsim":  # expert_parallel.with_expert_parallel
        return ("enable_expert_parallel: the calibrated model prices it from LLMServingSim's "
                "profiles only")
    return calibrated_refusal(ask)


def calibrated_refusal(ask: CostAsk) -> str | None:
    """The calibrated model's one-line refusal of ``ask`` (None: it prices it), built as
    simulator.cost.registry builds it (a drafter without a model: the target in its place)."""
    from specbatch.errors import SpecbatchError
    from specbatch.simulator.cost.gpus.hardware import get_hardware
    from specbatch.simulator.cost.measured.calibrated import CalibratedCost
    from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS
    from specbatch.traces.models.shapes import get_shape

    drafter = str(ask.draft).lower() in FREE_DRAFTS + HEAD_DRAFTS
    try:
        CalibratedCost(get_hardware(ask.hardware), get_shape(ask.target),
                       get_shape(ask.target if drafter else ask.draft), tp=ask.tp,
                       draft_weight_bits=ask.draft_weight_bits,
                       quantization=ask.quantization, kv_cache_dtype=ask.kv_cache_dtype)
    except SpecbatchError as e:
        return str(e)
    return None


SOURCES: tuple[SourceRow, ...] = (
    SourceRow("calibrated", "the GPU's LLMServingSim per-layer vLLM profiles; the bundled "
              "measured vLLM runs replay within 3 % TPOT and e2e (docs/fidelity.md)",
              lambda ask: own_profiles(ask, "llmservingsim")),
    SourceRow("aic", "per-op leave-one-shape-out on AIConfigurator's vLLM tables; whole "
              "passes against LLMServingSim's and Vidur's profiles (docs/fidelity.md)",
              aic_covers),
    SourceRow("calibrated", "leave-one-shape-out on the GPU's Vidur profiles "
              "(docs/simulate.md)", lambda ask: own_profiles(ask, "vidur")),
    SourceRow("roofline", "not fitted: the named fallback", lambda ask: None),
)


def resolve_cost(cost: str, ask: CostAsk) -> CostChoice:
    """The registry model that prices ``ask`` under ``cost`` (module docstring)."""
    name = str(cost).lower()
    if name != AUTO:
        return CostChoice(asked=name, name=name)
    passed: list[str] = []
    for row in SOURCES:
        reason = row.covers(ask)
        if reason is None:
            return CostChoice(asked=AUTO, name=row.name, passed=tuple(passed))
        passed.append(f"{row.name}: {reason}")
    raise AssertionError("the roofline row covers every request")  # pragma: no cover
