"""vLLM adaptive verification's cost tables: D(N) and V(t), profiled the way vLLM profiles them.

vLLM (PR vllm-project/vllm#47808, ``vllm/v1/worker/gpu/spec_decode/adaptive_verification.py``
at commit 057929c3632766486896597cf27e1425fd838e63) prices the budget rule of THEORY.md §7,
``B* = argmax_B (N + Σ_{j≤B} S_(j)) / (D(N) + V(T + B))``, from two tables built at start-up:

1. ``AdaptiveVerificationManager.batches_to_profile``: dummy steps at every CUDA-graph capture
   size plus a tail past the largest one (1.5 × the limit, then doublings up to
   ``max_num_batched_tokens``), each replayed ``_PROFILE_REPLAYS = 5`` times at a synthetic KV
   context ``VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN`` (8192 by default).
2. ``set_initial_cost_curves``: the median of the replays per key: the drafter's time keyed by
   the step's request count (D), the target forward keyed by its token count (V).
3. ``build_cost_tables_from_curves``: each curve forced monotone (``np.maximum.accumulate``),
   a step function at and below the capture limit (a size is priced at the next profiled size,
   ``searchsorted(side="left")``: graph padding), linear interpolation between profiled points
   past the limit, linear extrapolation past the last point; D ≥ 0, V ≥ 1e-6.

Here "profiling" asks the simulator's active cost model (graph-padded when
``cuda_graph_sizes`` is set) for those dummy steps. Assumptions, where the source does not say:
a dummy step of t tokens is ``min(max_num_seqs, ⌈t / (K + 1)⌉)`` requests sharing the t tokens
evenly (uniform decode shape; the tail shape of PR vllm-project/vllm#54065's description), all at
the profile context; its drafter time is the specbatch draft model's K passes of one token per
request (simulator.cost.interface) and its forward time one target pass; without
``cuda_graph_sizes`` the capture sizes are vLLM's expansion of ``cuda_graph_sizes = 512``
(simulator.cost.features.graph_padding.capture_sizes). The cost model is deterministic, so the five
replays agree; the median still groups the tail shapes whose request counts collide (N =
max_num_seqs). The tables hold neither the step overhead nor the rejection sampler (vLLM times the
drafter and the forward only).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.simulator.cost.features.graph_padding import capture_sizes

#: ``_PROFILE_REPLAYS`` of adaptive_verification.py: dummy steps per profiled size.
PROFILE_REPLAYS = 5
#: ``VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN``'s default (vllm/envs.py).
PROFILE_CONTEXT_LEN = 8192
#: The capture sizes assumed when ``cuda_graph_sizes`` is unset (vLLM's 512 expansion).
DEFAULT_CAPTURE = "512"


@dataclass(frozen=True)
class CostTables:
    """D and V as dense tables (milliseconds, as vLLM keeps them).

    draft:  # [max_reqs + 1] D(N), the drafter's time for N requests
    verify: # [max_tokens + 1] V(t), the target forward of t tokens
    """

    draft: np.ndarray
    verify: np.ndarray

    def verify_at(self, tokens: np.ndarray) -> np.ndarray:
        """V at token counts ``tokens`` # [m] (past the table: its last slope continued)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        last = self.verify.shape[0] - 1
        slope = self.verify[-1] - self.verify[-2] if last >= 1 else 0.0
        inside = self.verify[np.minimum(tokens, last)]
        return np.where(tokens > last, self.verify[-1] + slope * (tokens - last), inside)


def profile_sizes(capture: tuple[int, ...], max_num_tokens: int) -> list[int]:
    """``batches_to_profile``'s token counts: the capture sizes, then 1.5 × the largest and
    doublings up to ``max_num_tokens`` (the sizes not captured)."""
    size = capture[-1] if capture else 0
    tail: set[int] = set()
    if size:
        tail.add(min(size + size // 2, max_num_tokens))
        while size < max_num_tokens:
            size = min(size * 2, max_num_tokens)
            tail.add(size)
        tail -= set(capture)
    return list(capture) + sorted(tail)


def dummy_shape(tokens: int, max_reqs: int, k: int) -> np.ndarray:
    """The per-request queries of a dummy step of ``tokens`` tokens (module docstring).
    returns # [n] int64 summing to ``tokens``"""
    n = max(1, min(max_reqs, math.ceil(tokens / (k + 1))))
    query = np.full(n, tokens // n, dtype=np.int64)
    query[: tokens % n] += 1
    return query


def profile_samples(cost: Any, sizes: Iterable[int], max_reqs: int, k: int, context: int
                    ) -> Iterator[tuple[int, float, int, float]]:
    """(requests, drafter ms, tokens, forward ms) of each dummy step, ``PROFILE_REPLAYS`` per
    size, priced by ``cost`` at KV context ``context``."""
    for tokens in sizes:
        query = dummy_shape(tokens, max_reqs, k)
        n = query.shape[0]
        kv = np.full(n, context, dtype=np.int64)
        ones = np.ones(n, dtype=np.int64)
        for _ in range(PROFILE_REPLAYS):
            drafter = sum(cost.step_time("draft", ones, kv + d) for d in range(k))
            forward = cost.step_time("target", query, kv)
            yield n, 1e3 * float(drafter), tokens, 1e3 * float(forward)


def median_curve(points: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    """``set_initial_cost_curves``'s ``median_curve``: the median value per key, keys sorted."""
    grouped: defaultdict[int, list[float]] = defaultdict(list)
    for key, value in points:
        grouped[key].append(value)
    return [(key, float(np.median(values))) for key, values in sorted(grouped.items())]


def stepped_table(curve: list[tuple[int, float]], size: int, limit: int) -> np.ndarray:
    """``build_cost_tables_from_curves``'s ``build_table``: the curve forced monotone, stepped
    to the next profiled key up to the capture ``limit``, interpolated past it between keys past
    it, extrapolated past the last key.  returns # [size + 1]"""
    xs, ys = np.asarray(curve, dtype=np.float64).T
    ys = np.maximum.accumulate(ys)
    values = np.arange(size + 1)
    result = ys[np.minimum(np.searchsorted(xs, values, side="left"), len(xs) - 1)]
    if limit:
        smooth, above = values > limit, xs > limit
        if smooth.any() and above.any():
            result[smooth] = np.interp(values[smooth], xs[above], ys[above])
    if len(xs) > 1:
        after = values > xs[-1]
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        result[after] = ys[-1] + slope * (values[after] - xs[-1])
    return result


def build_tables(cost: Any, max_reqs: int, k: int, max_tokens: int, graph_sizes: str | None,
                 context: int = PROFILE_CONTEXT_LEN) -> CostTables:
    """Profile ``cost`` and build vLLM's two tables (module docstring, steps 1-3).

    max_reqs: ``max_num_seqs``; k: drafts per request; max_tokens: the largest pass
    (``max_num_batched_tokens``); graph_sizes: ``cuda_graph_sizes`` (None: vLLM's 512)."""
    capture = capture_sizes(graph_sizes or DEFAULT_CAPTURE)
    capture = tuple(s for s in capture if s <= max_tokens) or (max_tokens,)
    samples = list(profile_samples(cost, profile_sizes(capture, max_tokens), max_reqs, k,
                                   context))
    draft_curve = median_curve((n, d) for n, d, _, _ in samples)
    verify_curve = median_curve((t, f) for _, _, t, f in samples)
    limit = capture[-1]
    draft = np.maximum(stepped_table(draft_curve, max_reqs, limit), 0.0)
    verify = np.maximum(stepped_table(verify_curve, max_tokens, limit), 1e-6)
    return CostTables(draft, verify)
