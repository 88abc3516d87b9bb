"""The capacity planner's search space: deployments x speculation settings, and pruning.

A **deployment** is a hardware preset, a tensor-parallel degree tp and a number of
data-parallel replicas; it costs ``tp x replicas`` GPUs, times the preset's price per
GPU-hour when the user gives a price table (:func:`parse_prices`). A **speculation**
setting is a policy with its knobs: ``ar``; ``fixed`` at window k; ``tetris`` at k and
extra e; ``dsd``; each drafting one under token (TV) or block (BV) verification.

Deployments that cannot load their models (weights over ``tp x memory x
gpu_memory_utilization``, :func:`simulator.cost.analytic.memory.weights_shortfall`), whose tp does
not divide the target's attention heads, or whose KV block pool cannot hold the largest request
alone are pruned before anything is simulated (:func:`prune_reason`), with the reason kept for
the report. The rest are grouped into cost levels (:func:`cost_levels`), which the planner
simulates cheapest first.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from specbatch.errors import SpecbatchError

#: Policies the planner searches, and the verification rules of drafting ones.
PLAN_POLICIES = ("ar", "fixed", "tetris", "dsd")
VERIFY_LABELS = {"token": "TV", "block": "BV"}


@dataclass(frozen=True)
class Speculation:
    """One speculation setting: SimConfig's policy, k, extra and verify."""

    policy: str
    k: int | None = None  # None: the policy has no window of its own (ar, dsd)
    extra: int = 0
    verify: str = "token"

    @property
    def label(self) -> str:
        """``ar``, ``fixed k=3 TV``, ``tetris k=2 e=1 BV``, ``dsd TV``."""
        if self.policy == "ar":
            return "ar"
        parts = [self.policy]
        if self.k is not None:
            parts.append(f"k={self.k}")
        if self.extra:
            parts.append(f"e={self.extra}")
        parts.append(VERIFY_LABELS[self.verify])
        return " ".join(parts)

    def fields(self) -> dict:
        """The SimConfig fields of this setting (k and e only where the policy uses them)."""
        out: dict = {"policy": self.policy, "verify": self.verify, "extra": self.extra}
        if self.k is not None:
            out["num_speculative_tokens"] = self.k
        return out


@dataclass(frozen=True)
class Deployment:
    """``replicas`` copies of the target (tensor parallel ``tp``) and draft on ``hardware``."""

    hardware: str
    tp: int
    replicas: int
    price: float = 1.0  # per GPU-hour; 1.0 when costs are counted in GPUs

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas

    @property
    def cost(self) -> float:
        return self.gpus * self.price

    @property
    def label(self) -> str:
        """``2 x h100 (tp 1, 2 replicas)``."""
        reps = f"{self.replicas} replica" + ("s" if self.replicas > 1 else "")
        return f"{self.gpus} x {self.hardware} (tp {self.tp}, {reps})"

    def fields(self) -> dict:
        return {"hardware": self.hardware, "tp": self.tp, "replicas": self.replicas}


@dataclass(frozen=True)
class Space:
    """What the planner searches (module docstring)."""

    hardware: tuple[str, ...] = ("h100",)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    max_gpus: int = 8
    policies: tuple[str, ...] = PLAN_POLICIES
    k: tuple[int, ...] = (1, 2, 3, 4)
    extra: tuple[int, ...] = (1, 2)
    verify: tuple[str, ...] = ("token", "block")
    prices: tuple[tuple[str, float], ...] = ()  # hardware -> price per GPU-hour

    @property
    def priced(self) -> bool:
        """Whether costs are money (a price table was given) rather than GPUs."""
        return bool(self.prices)


def speculations(space: Space) -> list[Speculation]:
    """Every speculation setting of ``space``, in a fixed order (ar first)."""
    out: list[Speculation] = []
    for policy in space.policies:
        if policy == "ar":
            out.append(Speculation("ar"))
        elif policy == "fixed":
            out += [Speculation("fixed", k, 0, v) for k in space.k for v in space.verify]
        elif policy == "tetris":
            out += [Speculation("tetris", k, e, v) for k in space.k for e in space.extra
                    for v in space.verify]
        elif policy == "dsd":
            out += [Speculation("dsd", None, 0, v) for v in space.verify]
        else:
            raise SpecbatchError(f"--policies: expected some of {', '.join(PLAN_POLICIES)}, "
                                 f"got {policy!r}")
    return out


def deployments(space: Space, requests: int | None = None) -> list[Deployment]:
    """Every deployment of at most ``max_gpus`` GPUs and at most ``requests`` replicas,
    cheapest first (ties: fewer GPUs, then the order hardware and tp were given in).

    More replicas than requests would leave replicas without a request: every request is
    already alone on its own replica at ``requests`` replicas, so the latencies cannot
    improve while the cost grows; they are not searched."""
    prices = dict(space.prices)
    top = space.max_gpus if requests is None else min(space.max_gpus, max(1, int(requests)))
    out = [Deployment(hw, tp, r, prices.get(hw, 1.0))
           for hw, tp in itertools.product(space.hardware, space.tp)
           for r in range(1, min(space.max_gpus // tp, top) + 1)]
    return sorted(out, key=lambda d: (d.cost, d.gpus))


#: Most GPUs a plan may search (``--max-gpus``), and most simulations its space may hold in
#: the worst case (every cost level simulated): larger spaces are refused up front instead
#: of searched for hours.
MAX_GPUS = 1024
MAX_RUNS = 5000


def check_space(space: Space, requests: int | None, sources: int = 1) -> None:
    """Refuse (one line naming the flag) a space with no deployment or one too large to
    search: every tp above ``--max-gpus``, ``--max-gpus`` above :data:`MAX_GPUS`, or more
    than :data:`MAX_RUNS` simulations if every level had to run (``sources``: acceptance
    sources searched, 3 with an acceptance band)."""
    if space.max_gpus > MAX_GPUS:
        raise SpecbatchError(f"--max-gpus: expected at most {MAX_GPUS} GPUs, got "
                             f"{space.max_gpus}")
    if min(space.tp) > space.max_gpus:
        raise SpecbatchError(f"--tp: expected a degree <= --max-gpus {space.max_gpus}, got "
                             f"{', '.join(map(str, space.tp))}")
    runs = len(deployments(space, requests)) * len(speculations(space)) * sources
    if runs > MAX_RUNS:
        raise SpecbatchError(f"--max-gpus: the search could need {runs:,} simulations (> "
                             f"{MAX_RUNS:,}); lower --max-gpus or narrow --tp, --hardware, "
                             "--policies, --k or --extra")


def cost_levels(items: Iterable[Deployment]) -> list[tuple[float, list[Deployment]]]:
    """Deployments grouped by cost, cheapest level first."""
    levels: dict[float, list[Deployment]] = {}
    for d in items:
        levels.setdefault(round(d.cost, 9), []).append(d)
    return sorted(levels.items())


#: The question's precision and KV-layout fields (simulator.cost.analytic.precision,
#: simulator.cost.analytic.kv_groups), kept in ``base`` only when set.
PRECISION_FIELDS = ("quantization", "kv_cache_dtype", "disable_hybrid_kv_cache_manager")


def prune_reason(d: Deployment, target: str, draft: str, utilization: float,
                 largest_request: int, block_size: int,
                 precision: dict | None = None) -> str | None:
    """Why ``d`` cannot run the models at all, or None: weights over memory, tp not dividing
    the target's heads, or a KV block pool smaller than the largest request
    (``largest_request`` = prompt + output + K + 1 tokens). ``precision`` holds the
    question's ``quantization`` / ``kv_cache_dtype`` when set
    (simulator.cost.analytic.precision)."""
    from specbatch.simulator.cost.analytic.memory import weights_shortfall
    from specbatch.simulator.cost.gpus.hardware import get_hardware
    from specbatch.traces.models.shapes import find_shape

    precision = precision or {}
    quantization = precision.get("quantization", "none")
    short = weights_shortfall(d.hardware, target, draft, d.tp, utilization,
                              quantization=quantization)
    if short is not None:
        hw = get_hardware(d.hardware)
        need = _weights_gb(d.hardware, target, draft, quantization)
        return (f"memory: weights {need:.1f} GB > {utilization:g} x {d.tp} x "
                f"{hw.memory_bytes / 1e9:.0f} GB = {d.tp * hw.memory_bytes * utilization / 1e9:.1f}"
                " GB")
    shape = find_shape(target)
    if shape is not None and shape.heads % d.tp:
        return f"tp {d.tp} does not divide the target's {shape.heads} attention heads"
    tokens = pool_tokens(d, target, draft, utilization, precision)
    if lone_blocks(d, target, draft, largest_request, block_size, precision) > tokens // block_size:
        return (f"memory: KV pool of {tokens:,} tokens per replica cannot hold the largest "
                f"request alone ({largest_request:,} tokens)")
    return None


def lone_blocks(d: Deployment, target: str, draft: str, largest_request: int, block_size: int,
                precision: dict | None = None) -> int:
    """Blocks the largest request needs alone in ``d``'s pool: ⌈tokens / block_size⌉, or its
    peak over a sliding-window model's KV cache groups (simulator.engine.kv.lone_request_blocks;
    the drafts' slots bounded by the request's own)."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.engine.kv import lone_request_blocks

    config = make_config({"target": target, "draft": draft, **d.fields(), "kv_mode": "paged",
                          "block_size": block_size, **(precision or {})})
    return lone_request_blocks(config, largest_request, 0)


def pool_tokens(d: Deployment, target: str, draft: str, utilization: float,
                precision: dict | None = None) -> int:
    """KV tokens per replica of ``d`` in paged mode: what the cost model's memory leaves next
    to the weights (simulator.engine.kv.kv_capacity; a host-side drafter holds none), in the
    ``precision`` fields given (quantization, kv_cache_dtype)."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.engine.kv import kv_capacity
    from specbatch.simulator.run import build_cost

    config = make_config({"target": target, "draft": draft, **d.fields(), "kv_mode": "paged",
                          "gpu_memory_utilization": utilization, **(precision or {})})
    try:
        return int(kv_capacity(config, build_cost(config)))
    except SpecbatchError:  # no room for one block next to the weights
        return 0


def _weights_gb(hardware: str, target: str, draft: str, quantization: str = "none") -> float:
    from specbatch.simulator.cost.analytic.memory import quantized_weights
    from specbatch.simulator.cost.gpus.hardware import get_hardware, weight_bytes

    hw = get_hardware(hardware)
    quantized = quantized_weights(hw, target, draft, 16, quantization)
    return (weight_bytes(hw, (target, draft)) if quantized is None else quantized[0]) / 1e9


#: Prices per GPU-hour a plan accepts: a cost level is ``GPUs x price``, compared and plotted
#: as a float, so it must stay finite and far from 0 (levels are told apart at 1e-9).
MIN_PRICE, MAX_PRICE = 1e-6, 1e6


def parse_prices(text: str | None, hardware: Iterable[str]) -> tuple[tuple[str, float], ...]:
    """``h100=2.5,h200=3.9`` (price per GPU-hour of each searched preset) as pairs; every
    searched preset needs a price (a missing one would make it look free)."""
    if not text:
        return ()
    from specbatch.simulator.cost.gpus.hardware import get_hardware

    prices: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not sep or not math.isfinite(price) or not MIN_PRICE <= price <= MAX_PRICE:
            raise SpecbatchError(f"--price: expected HARDWARE=PRICE_PER_GPU_HOUR pairs "
                                 f"(e.g. h100=2.5,h200=3.9) with {MIN_PRICE:g} <= price <= "
                                 f"{MAX_PRICE:g}, got {item!r}")
        prices[get_hardware(name.strip()).name] = price
    missing = [h for h in hardware if get_hardware(h).name not in prices]
    if missing:
        raise SpecbatchError(f"--price: expected a price for every searched hardware preset, "
                             f"got none for {', '.join(missing)}")
    return tuple(sorted(prices.items()))
