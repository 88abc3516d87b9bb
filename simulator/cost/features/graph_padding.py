"""CUDA-graph padding: a pass runs at the smallest captured size that holds it.

Serving engines capture CUDA graphs for a fixed set of sizes and pad every smaller pass up
to the next one: vLLM V1 captures ``cudagraph_capture_sizes`` counted in tokens per forward
pass (``cuda_graph_sizes = N`` expands to ``[1, 2, 4] + range(8, N + 1, 8)``,
``vllm/config/scheduler.py`` ``SchedulerConfig.cuda_graph_sizes``; spec decode then rounds the
sizes to multiples of K + 1, ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``),
TensorRT-LLM ``cuda_graph_config.batch_sizes`` and SGLang ``--cuda-graph-bs`` count requests.
Here the sizes count tokens per pass (``cuda_graph_sizes``): a draft pass has one token per
request, so its padding is the batch-size padding of all three; a verify pass has Σ(s_i + 1).
The multiple-of-(K + 1) rounding and TensorRT-LLM's padding of every request's drafts to
``max_draft_len`` are not modelled.

:func:`pad_to_graphs` wraps a cost model: a pass of T tokens with T <= the largest size is
priced as T' (the smallest size >= T), the T' − T padding tokens as extra requests of query 1
and no KV (dummy tokens go through every linear layer but attend to nothing); larger passes
run unpadded (vLLM runs them without a graph). Everything else (overhead, memory) is the
wrapped model's.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import sys
from typing import Any

import numpy as np

from specbatch.fields import fail
from specbatch.simulator.cost.interface import SumsCostModel, takes_logit_rows

_SIZES = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*$")


def capture_sizes(text: str, where: str = "config", name: str = "cuda_graph_sizes"
                  ) -> tuple[int, ...]:
    """The captured sizes of ``cuda_graph_sizes``: one integer N gives vLLM's
    ``[1, 2, 4] + range(8, N + 1, 8)`` (capped at N), several give themselves; sorted, unique,
    each >= 1."""
    if not isinstance(text, str) or not _SIZES.match(text):
        fail(where, name, "a size N or comma-separated sizes (tokens per pass), each >= 1", text)
    values = [int(v) for v in text.split(",")]
    if min(values) < 1:
        fail(where, name, "sizes >= 1", text)
    if len(values) == 1:
        n = values[0]
        values = [s for s in (1, 2, 4) if s <= n] + list(range(8, n + 1, 8))
    return tuple(sorted(set(values)))


class PaddedCost:
    """A cost model whose passes are padded to the captured sizes (module docstring)."""

    def __init__(self, inner: Any, sizes: tuple[int, ...]) -> None:
        self.inner = inner
        self.sizes = sizes
        self.largest = sizes[-1]

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def padding(self, tokens: float) -> int:
        """Padding tokens of a pass of ``tokens`` tokens (0 above the largest size)."""
        t = int(tokens)
        if t == 0 or t > self.largest:
            return 0
        return self.sizes[bisect.bisect_left(self.sizes, t)] - t

    @property
    def logit_rows(self) -> bool:
        """Whether the inner model takes the logit rows (interface.takes_logit_rows); padding
        adds none: vLLM's logits_indices name real requests only."""
        return takes_logit_rows(self.inner)

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **rows) -> float:
        query = np.asarray(query)
        pad = self.padding(float(query.sum()))
        if pad:
            query = np.concatenate([query, np.ones(pad, dtype=query.dtype)])
            kv = np.concatenate([np.asarray(kv), np.zeros(pad, dtype=np.asarray(kv).dtype)])
        return self.inner.step_time(role, query, kv, **rows)


class PaddedSumsCost(PaddedCost):
    """:class:`PaddedCost` of a :class:`~simulator.cost.interface.SumsCostModel`, keeping the
    sums fast path: p padding requests of query 1 and KV 0 add p to n, Σq and Σq²."""

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float, **rows) -> float:
        pad = self.padding(sq)
        return self.inner.time_from_sums(role, n + pad, sq + pad, skv, sqkv, sqq + pad, **rows)


def pad_to_graphs(cost: Any, sizes_text: str | None) -> Any:
    """``cost`` padded to the captured sizes of ``cuda_graph_sizes`` (None: unchanged)."""
    if sizes_text is None:
        return cost
    host = sys.modules.get("specbatch.simulator.cost.features.host")
    overlap = sys.modules.get("specbatch.simulator.cost.features.async_overhead")
    if ((host is not None and isinstance(cost, host.HostCost))  # pad the GPU passes only: the
            # host's b n counts the scheduled requests, not the graph's padding slots
            or (overlap is not None and isinstance(cost, overlap.AsyncOverheadCost))):
        # (max(pass, T_o) of the padded pass either way; inside, as the compiled loop reads it)
        return dataclasses.replace(cost, inner=pad_to_graphs(cost.inner, sizes_text))
    passes = sys.modules.get("specbatch.simulator.cost.features.draft_model_pass")
    if passes is not None and isinstance(cost, passes.DraftModelPasses):  # pad inside it: a
        # draft model's pass 1 is padded as its other passes (EagleProposer.propose)
        return dataclasses.replace(cost, inner=pad_to_graphs(cost.inner, sizes_text))
    cls = PaddedSumsCost if isinstance(cost, SumsCostModel) else PaddedCost
    return cls(cost, capture_sizes(sizes_text))
