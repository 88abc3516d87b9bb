"""A cost model whose draft role is free: drafters that run no model on the GPU.

vLLM's ``ngram`` method (prompt lookup, :mod:`specbatch.traces.capture.ngram`) proposes draft tokens
by matching the context's last n tokens against earlier text on the host: microseconds per request,
no forward pass, no weights and no KV cache. :class:`FreeDraftCost` prices such a drafter as zero
seconds per draft pass and leaves the target's passes, the per-step overhead and the KV memory (the
target's alone) to the wrapped cost model. ``draft = "ngram"`` in a
:class:`~simulator.config.sim_config.SimConfig` selects it
(:func:`simulator.cost.registry.build_cost_model`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.simulator.cost.interface import WrappedCost

if TYPE_CHECKING:
    from specbatch.simulator.cost.interface import SumsCostModel

@dataclass(frozen=True)
class FreeDraftCost(WrappedCost):
    """``inner``'s target passes and overhead; every draft pass takes 0 s. ``kv_tokens`` is the
    KV capacity function of the target alone (None when ``inner`` has no memory model)."""

    inner: SumsCostModel
    kv_tokens: Callable[[float], int] | None = None

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **rows) -> float:
        """Seconds of one pass: 0 for the draft; ``query``, ``kv`` # [n]."""
        return 0.0 if role == "draft" else float(self.inner.step_time(role, query, kv, **rows))

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float, **rows) -> float:
        """:meth:`step_time` from the batch sums (the inner model's for the target)."""
        if role == "draft":
            return 0.0
        return float(self.inner.time_from_sums(role, n, sq, skv, sqkv, sqq, **rows))

    def __getattr__(self, name: str) -> Any:
        """Everything else (``breakdown``, ``fits``, ``hardware``, ...) is the inner model's;
        ``kv_capacity_tokens`` only when a target-only memory function was given."""
        if name == "kv_capacity_tokens":
            if self.kv_tokens is None:
                raise AttributeError(name)
            return self.kv_tokens
        if name in ("inner", "kv_tokens") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)
