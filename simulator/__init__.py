"""specbatch simulator: discrete-event replay of batch speculative decoding.

Entry points: :class:`SimConfig` / :func:`load_config` (simulator.config),
:func:`simulate` -> :class:`SimResult` (simulator.run), the policy registry
:data:`POLICIES` (simulator.policies) and the cost models (simulator.cost).

The names are loaded on first use, so importing one light submodule (``simulator.config``
for a ``--help``) does not import the engine, numpy and pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbatch.simulator.config import SimConfig, load_config
    from specbatch.simulator.policies import POLICIES
    from specbatch.simulator.run import SimResult, simulate

#: Exported name -> the submodule that defines it.
_EXPORTS = {"SimConfig": "config", "load_config": "config", "POLICIES": "policies",
            "SimResult": "run", "simulate": "run"}

__all__ = ["POLICIES", "SimConfig", "SimResult", "load_config", "simulate"]


def __getattr__(name: str) -> object:
    """An exported name, or a submodule not imported yet (``package.format``)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
