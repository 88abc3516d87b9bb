"""The draft's seconds in one decode step: D = max_i d_i sequential passes (THEORY.md §5).

Pass d < D runs over the requests still drafting (d_i > d), each with query 1 and KV c_i + d.
Two tiers priced identically: :func:`draft_seconds` calls the cost model's ``step_time`` once
per pass (any :class:`~simulator.cost.interface.CostModel`), and
:func:`draft_seconds_from_sums` builds each pass's batch sums from integer counts for a
:class:`~simulator.cost.interface.SumsCostModel`, bit for bit the same sum in the same order
(the engine's hot path; parity-tested through the engine's reference twin).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specbatch.simulator.cost.interface import CostModel

_I64 = np.int64


def draft_seconds(cost: CostModel, drafted: np.ndarray, kv: np.ndarray, depth_used: int) -> float:
    """Σ_d of draft pass d < ``depth_used`` over the requests still drafting (query 1, KV
    ``kv + d``), one ``cost.step_time`` call per pass.  drafted, kv # [n]"""
    n = drafted.shape[0]
    draft_t = 0.0
    if depth_used:
        ones = np.ones(n, dtype=_I64)
        uniform = int(drafted.min()) == depth_used  # every request drafts to the end
        for d in range(depth_used):
            if uniform:
                draft_t += float(cost.step_time("draft", ones, kv + d))
            else:
                active = drafted > d
                draft_t += float(cost.step_time("draft", ones[active], kv[active] + d))
    return draft_t


def draft_seconds_from_sums(time_from_sums: Callable, drafted: np.ndarray, kv: np.ndarray,
                            depth_used: int, skv: int, uniform: bool,
                            pass_index: np.ndarray) -> float:
    """:func:`draft_seconds` bit for bit from ``time_from_sums``: pass d has
    n_d = #{i : d_i > d} requests with query 1 and Σc = Σ_{d_i > d} c_i + n_d·d (integers,
    exact in float64), summed in the same order.
    drafted, kv # [n];  skv = Σ kv;  uniform: every request drafts ``depth_used``;
    pass_index = arange(≥ depth_used) # [depth]."""
    if not depth_used:
        return 0.0
    f = time_from_sums
    n = drafted.shape[0]
    draft_t = 0.0
    if uniform:
        fn = float(n)
        for d in range(depth_used):
            c = float(skv + n * d)
            draft_t += float(f("draft", n, fn, c, c, fn))
        return draft_t
    active = drafted[:, None] > pass_index[None, :depth_used]  # [n, depth_used]
    counts = active.sum(axis=0).tolist()
    kv_sums = (kv @ active).tolist()
    for d in range(depth_used):
        m = counts[d]
        c = float(kv_sums[d] + m * d)
        draft_t += float(f("draft", m, float(m), c, c, float(m)))
    return draft_t
