"""Settings of one live run and the simulator config that describes the same workload."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specbatch.errors import require
from specbatch.simulator.config import VERIFY_RULES, SimConfig, make_config
from specbatch.simulator.policies import POLICIES as SIM_POLICIES

#: Policies the live loop runs: those that decide from draft-side signals after a full-depth
#: draft (``threshold`` would stop drafting early, ``dsd`` needs a cost model, ``oracle``
#: and ``hindsight`` read the truth).
POLICIES = ("fixed", "tetris")
VERIFIERS = ("theory", "local")


@dataclass(frozen=True)
class LiveConfig:
    """Settings of one live run (recorded in ``live.json``).

    policy, k, extra (e), verify: as :class:`simulator.config.SimConfig`'s ``policy``,
    ``num_speculative_tokens``, ``extra``, ``verify``; the budget is C = k·n.
    verifier: "theory" decides τ and the extra token with
    :func:`theory.verify_torch.accept_and_residual`; "local" with
    :func:`theory.stats.accept_from_stats` on the recorded statistics (the simulator's own τ
    function) and :func:`theory.verify_torch.extra_token_law_torch`.
    compact_fraction: compact a KV cache when holes exceed this fraction of it.
    """

    max_new_tokens: int = 32
    policy: str = "fixed"
    k: int = 3
    extra: int = 0
    verify: str = "token"
    temperature: float = 0.0
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0
    max_prompt_tokens: int = 512
    compact_fraction: float = 0.25
    verifier: str = "theory"

    def sim_values(self, n_requests: int) -> dict:
        """SimConfig fields of the same workload: a burst of N requests in one batch of N."""
        return {"requests": n_requests, "sampling": "in_order", "arrival": "burst",
                "max_num_seqs": n_requests, "policy": self.policy,
                "num_speculative_tokens": self.k,
                "extra": self.extra if self.policy == "tetris" else 0, "verify": self.verify,
                "seed": self.seed}

    def sim_config(self, n_requests: int = 1) -> SimConfig:
        """The validated :class:`simulator.config.SimConfig` of :meth:`sim_values`."""
        return make_config(self.sim_values(n_requests), "live config")

    @property
    def depth(self) -> int:
        """Draft passes per step: the policy class's required depth (K = k for ``fixed``,
        k + e for ``tetris``), as in the simulator."""
        return SIM_POLICIES[self.policy].required_depth(self.sim_config())

    def check(self) -> None:
        """One-line errors naming the CLI flag for settings the loop cannot run."""
        require(self.policy in POLICIES,
                f"--policy: expected one of {', '.join(POLICIES)}, got {self.policy!r}")
        require(self.verify in VERIFY_RULES, f"--verify: expected one of "
                f"{', '.join(VERIFY_RULES)}, got {self.verify!r}")
        require(self.k >= 1, f"--k: expected k >= 1, got {self.k}")
        require(self.extra >= 0, f"--extra: expected e >= 0, got {self.extra}")
        require(self.max_new_tokens >= 1,
                f"--max-new-tokens: expected >= 1, got {self.max_new_tokens}")
        require(math.isfinite(self.temperature) and self.temperature >= 0,
                f"--temperature: expected T >= 0, got {self.temperature}")
        require(self.seed >= 0, f"--seed: expected >= 0, got {self.seed}")
        require(self.verifier in VERIFIERS,
                f"verifier: expected theory or local, got {self.verifier!r}")
        require(self.depth <= 64, f"--k/--extra: expected k + e <= 64, got {self.depth}")
