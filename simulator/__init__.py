"""specbatch simulator: discrete-event replay of batch speculative decoding.

Entry points: :class:`SimConfig` / :func:`load_config` (simulator.config),
:func:`simulate` -> :class:`SimResult` (simulator.run), the policy registry
:data:`POLICIES` (simulator.policies) and the cost models (simulator.cost).
"""

from specbatch.simulator.config import SimConfig, load_config
from specbatch.simulator.policies import POLICIES
from specbatch.simulator.run import SimResult, simulate

__all__ = ["POLICIES", "SimConfig", "SimResult", "load_config", "simulate"]
