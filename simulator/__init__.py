"""specbatch simulator: discrete-event replay of batch speculative decoding.

Entry points: :class:`SimConfig` / :func:`load_config` (simulator.config.sim_config),
:func:`simulate` -> :class:`SimResult` (simulator.run, simulator.sim_result), the policy registry
:data:`POLICIES` (simulator.policies.registry) and the cost models (simulator.cost.registry).

The names are loaded on first use, so importing one light submodule (``simulator.config.sim_config``
for a ``--help``) does not import the engine, numpy and pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbatch.lazy import lazy_attributes

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig, load_config
    from specbatch.simulator.policies.registry import POLICIES
    from specbatch.simulator.run import simulate
    from specbatch.simulator.sim_result import SimResult

#: Exported name -> the submodule that defines it.
_EXPORTS = {"SimConfig": "config.sim_config", "load_config": "config.sim_config",
            "POLICIES": "policies.registry", "SimResult": "sim_result", "simulate": "run"}

__all__ = ["POLICIES", "SimConfig", "SimResult", "load_config", "simulate"]


__getattr__ = lazy_attributes(
    __name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()}, globals())
