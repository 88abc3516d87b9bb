"""Set-up arrays of the compiled loop kept across runs in a process: a deployment's pass
tables (simulator.engine.v1.pass_tables) and a trace's confidence surrogate depend only on a
shared object (the cost model, the trace) and a few integers, and the planner runs many runs
per deployment. The kernel only reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.simulator.engine.v1.pass_tables import (
    max_pass_tokens,
    pass_tables,
    priced_roles,
    tabulated,
)

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.policies.registry import Policy
    from specbatch.traces.format.trace import Trace

#: Set-up arrays that depend only on a shared object (a deployment's cost model, a trace) and
#: a few integers, kept across runs in a process (the planner runs many runs per deployment):
#: key -> (the object, so its id is not reused, the arrays). The kernel only reads them.
_SETUP: dict[tuple, tuple] = {}
_SETUP_MAX = 64


def remembered(key: tuple, owner: object, build):
    """``build()``, once per ``key`` while ``owner`` (the object the key names by id) is kept."""
    hit = _SETUP.get(key)
    if hit is not None and hit[0] is owner:
        return hit[1]
    value = build()
    if len(_SETUP) >= _SETUP_MAX:
        _SETUP.pop(next(iter(_SETUP)))
    _SETUP[key] = (owner, value)
    return value


def shared_pass_tables(config: SimConfig, policy: Policy, base, sizes: tuple[int, ...],
                 roles: tuple[str, ...] | None = None):
    """:func:`pass_tables`, once per cost model, Q_max and priced roles (all it reads)."""
    if not tabulated(base):
        return pass_tables(config, policy, base, sizes, roles=roles)
    key = ("pass", id(base), max_pass_tokens(config, policy, sizes),
           roles if roles is not None else priced_roles(policy))
    return remembered(key, base, lambda: pass_tables(config, policy, base, sizes, roles=roles))


def shared_confidence(tables_cls, trace: Trace, depth: int) -> np.ndarray:
    """The trace's confidence surrogate up to ``depth`` # [rows, depth], once per trace."""
    return remembered(("conf", id(trace), int(depth)), trace, lambda: np.ascontiguousarray(
        tables_cls(trace).confidence(depth), dtype=np.float64))
