"""What a tree run adds to the decode step (simulator.engine.decode): the per-request
reference twin of τ on the verified subtree, and the draft passes of a tree.

Functions of the run's :class:`~simulator.replay.tree.TreeTables` (the engine's ``tree``;
chain runs never call these); the vectorised τ is ``TreeTables.tau``.

Pricing a tree: the draft model runs D = the tree's depth sequential passes; pass d takes, per
request, the w_d nodes at depth d as query tokens (the root for d = 0: the last verified token)
with KV c_i + d, and proposes their children. The verify pass carries s_i + 1 query tokens per
request (the verified nodes and the root), priced like a chain's; a tree attention mask is not
priced separately.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.simulator.engine.request_state import Row
from specbatch.simulator.replay.chain import uniforms_scalar
from specbatch.simulator.replay.tree import tau_reference

if TYPE_CHECKING:
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.replay.tree import TreeTables
    from specbatch.traces.format.trace import Trace

_I64 = np.int64
_KEY, _OUT, _POS = int(Row.KEY), int(Row.OUT), int(Row.POS)


def verify_tree_reference(trace: Trace, tree: TreeTables, rule: str, state: np.ndarray,
                          d_idx: np.ndarray | None, rows: np.ndarray, mask: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Per-request loop twin of ``TreeTables.tau`` + emit (scalar hash, the trace's TreeStats
    per row) for the decoding requests at columns ``d_idx`` of the running ``state`` (None =
    all): rows # [n], mask # [n, N]; moves their POS itself. Returns τ and emitted # [n]."""
    n = rows.shape[0]
    tau = np.zeros(n, dtype=_I64)
    emitted = np.zeros(n, dtype=_I64)
    need = tree.uniforms_needed(rule)
    for i in range(n):
        j = i if d_idx is None else int(d_idx[i])
        p = int(state[_POS, j])
        key = int(state[_KEY, j:j + 1].view(np.uint64)[0])
        stats = trace.tree.stats(int(rows[i]))
        kept = {int(u) for u in np.flatnonzero(mask[i])}
        t = tau_reference(stats, rule, kept, uniforms_scalar(key, p, need))
        e = min(t + 1, int(state[_OUT, j]) - p)
        state[_POS, j] = p + e
        tau[i], emitted[i] = t, e
    return tau, emitted


def tree_draft_seconds(tree: TreeTables, cost: CostModel, kv: np.ndarray) -> float:
    """Σ_d of draft pass d < D over every decoding request, query w_d, KV c_i + d
    (module docstring).  kv # [n]"""
    n = kv.shape[0]
    total = 0.0
    if not n:
        return total
    for d, width in enumerate(tree.widths.tolist()):
        total += float(cost.step_time("draft", np.full(n, width, dtype=_I64), kv + d))
    return total
