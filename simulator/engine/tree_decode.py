"""The decode-step verbs a tree run adds to the engine: τ on the verified subtree, its
per-request reference twin, and the draft passes of a tree.

A part of :class:`~simulator.engine.core.Engine`; ``self.tree`` is the run's
:class:`~simulator.replay.tree.TreeTables` (None for chain runs, which never call these).

Pricing a tree: the draft model runs D = the tree's depth sequential passes; pass d takes, per
request, the w_d nodes at depth d as query tokens (the root for d = 0: the last verified token)
with KV c_i + d, and proposes their children. The verify pass carries s_i + 1 query tokens per
request (the verified nodes and the root), priced like a chain's; a tree attention mask is not
priced separately.
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.engine.request_state import Replica, Row
from specbatch.simulator.engine.state import EngineState
from specbatch.simulator.replay.chain import uniforms_scalar
from specbatch.simulator.replay.tree import tau_reference

_I64 = np.int64
_KEY, _OUT, _POS = int(Row.KEY), int(Row.OUT), int(Row.POS)


class TreeDecode(EngineState):
    """Tree verbs of the engine (module docstring)."""

    def tree_tau(self, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        """τ_i of each request's verified subtree.  rows # [n], mask # [n, N], eta # [n, U]"""
        return self.tree.tau(self.rule, rows, mask, eta)

    def verify_tree_reference(self, rep: Replica, d_idx: np.ndarray | None, rows: np.ndarray,
                              mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-request loop twin of :meth:`tree_tau` + emit (scalar hash, the trace's
        TreeStats per row); moves the requests' POS itself. Returns τ and emitted # [n]."""
        n = rows.shape[0]
        tau = np.zeros(n, dtype=_I64)
        emitted = np.zeros(n, dtype=_I64)
        state = rep.state
        need = self.tree.uniforms_needed(self.rule)
        for i in range(n):
            j = i if d_idx is None else int(d_idx[i])
            p = int(state[_POS, j])
            key = int(state[_KEY, j:j + 1].view(np.uint64)[0])
            stats = self.trace.tree.stats(int(rows[i]))
            kept = {int(u) for u in np.flatnonzero(mask[i])}
            t = tau_reference(stats, self.rule, kept, uniforms_scalar(key, p, need))
            e = min(t + 1, int(state[_OUT, j]) - p)
            state[_POS, j] = p + e
            tau[i], emitted[i] = t, e
        return tau, emitted

    def tree_draft_seconds(self, kv: np.ndarray) -> float:
        """Σ_d of draft pass d < D over every decoding request, query w_d, KV c_i + d
        (module docstring).  kv # [n]"""
        n = kv.shape[0]
        total = 0.0
        if not n:
            return total
        for d, width in enumerate(self.tree.widths.tolist()):
            total += float(self.cost.step_time("draft", np.full(n, width, dtype=_I64), kv + d))
        return total
