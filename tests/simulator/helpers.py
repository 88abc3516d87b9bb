"""Shared builders for simulator tests: a tiny exact cost model and hand-made traces."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbatch.simulator.policies.registry import POLICIES
from specbatch.traces.format.trace import default_meta, make_trace

#: The built-in policies that verify chains (the tree policies need a tree trace and a tree
#: rule: tests/simulator/policies/test_trees.py).
CHAIN_POLICIES = sorted(name for name, cls in POLICIES.items() if not cls.tree)


def tree_rule(cls: type) -> dict:
    """``verify = "specinfer"`` for a tree policy class, nothing for a chain policy."""
    return {"verify": "specinfer"} if cls.tree else {}


@dataclass(frozen=True)
class LinearCost:
    """step_time = fixed + per_token · Σ query + per_kv · Σ kv (draft: draft_fixed,
    draft_per_token); dyadic numbers keep sums exact."""

    overhead: float = 0.5
    fixed: float = 0.0
    per_token: float = 0.25
    draft_per_token: float = 0.125
    per_kv: float = 0.0
    draft_fixed: float = 0.0

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray) -> float:
        q = float(np.sum(query))
        if q <= 0:
            return 0.0
        if role == "target":
            return self.fixed + self.per_token * q + self.per_kv * float(np.sum(kv))
        return self.draft_fixed + self.draft_per_token * q + self.per_kv * float(np.sum(kv))


class StepTimeOnly:
    """A cost model that only answers ``step_time`` (the wrapped model's batch-sums fast path
    hidden), so the engine prices every pass with its own call: the twin of the sums fast
    path. The LM head's logit rows reach both paths (simulator.cost.analytic.roofline)."""

    def __init__(self, cost):
        self.cost, self.overhead = cost, cost.overhead

    @property
    def logit_rows(self) -> bool:
        from specbatch.simulator.cost.interface import takes_logit_rows

        return takes_logit_rows(self.cost)

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **rows) -> float:
        return self.cost.step_time(role, query, kv, **rows)

    def __getattr__(self, name: str):
        """A head's or a vLLM V1 draft model's pass-1 hooks, which the engine prices on
        arrays (``first_pass_step``) when the sums path is hidden."""
        if name in ("first_pass_time", "first_pass_step") and "cost" in vars(self):
            return getattr(self.cost, name)
        raise AttributeError(name)


def const_trace(n_requests: int = 8, output_len: int = 20, prompt_len: int = 4, depth: int = 4,
                alpha: float = 0.5, arrival: np.ndarray | None = None,
                output_lens: np.ndarray | None = None, prompt_lens: np.ndarray | None = None):
    """A temperature-1 trace with one-hot draft and every min(1, r) = α (THEORY.md §2-§3):
    q = 1, pt = α, p_i = α^i, Z_{i+1} = p_i (1 − α); draft_conf = α. ``output_lens`` and
    ``prompt_lens`` give per-request lengths instead of ``output_len`` / ``prompt_len``."""
    lens = (np.full(n_requests, output_len) if output_lens is None
            else np.asarray(output_lens)).astype(np.int64)
    rows = int(lens.sum())
    j = np.arange(depth)
    cols = {
        "draft_token": np.zeros((rows, depth), dtype=np.int32),
        "q": np.ones((rows, depth)),
        "pt": np.full((rows, depth), alpha),
        "z": np.tile(alpha ** j * (1 - alpha), (rows, 1)),
        "draft_conf": np.full((rows, depth), alpha),
        "entropy": np.zeros((rows, depth)),
        "top1": np.ones((rows, depth)),
    }
    req = {
        "request_id": np.arange(n_requests),
        "prompt_len": (np.full(n_requests, prompt_len) if prompt_lens is None
                       else np.asarray(prompt_lens, dtype=np.int64)),
        "output_len": lens, "category": np.array(["synthetic"] * n_requests, dtype=object),
    }
    if arrival is not None:
        req["arrival"] = np.asarray(arrival, dtype=np.float64)
    return make_trace(default_meta(1.0, depth), req, cols)


def signal_trace(accept, conf, entropy, top1, n_requests: int):
    """A one-hot-draft trace (q = 1, pt = accept) with the given draft signals # [rows, K];
    rows split evenly over ``n_requests``."""
    rows, depth = accept.shape
    weights = np.cumprod(accept, axis=1)
    before = np.concatenate([np.ones((rows, 1)), weights[:, :-1]], axis=1)
    cols = {"draft_token": np.zeros((rows, depth), dtype=np.int32), "q": np.ones((rows, depth)),
            "pt": accept, "z": before * (1.0 - accept), "draft_conf": conf,
            "entropy": entropy, "top1": top1}
    req = {"request_id": np.arange(n_requests), "prompt_len": np.full(n_requests, 4),
           "output_len": np.full(n_requests, rows // n_requests),
           "category": np.array(["x"] * n_requests, dtype=object)}
    return make_trace(default_meta(1.0, depth), req, cols)


def ones(n: int, value: int = 1) -> np.ndarray:
    """A uniform batch column: ``n`` requests each with ``value`` (query or KV tokens)."""
    return np.full(n, value, dtype=np.int64)


def policy_settings(name: str) -> dict:
    """The config fields a built-in policy needs besides k and e: a calibration split for the
    policies that calibrate, small candidate steps for ema-adaptive (SGLang's default reaches
    7), a batch-size table for batch-schedule."""
    return {"vllm-dynamic": dict(calibration_split=0.25),
            "specdec++": dict(calibration_split=0.25),
            "ema-adaptive": dict(speculative_adaptive_config='{"1": {"candidate_steps": [1, 2]}, '
                                                             '"4": {"candidate_steps": [0, 1]}}'),
            "batch-schedule": dict(num_speculative_tokens_per_batch_size="1-3:3,8-64:1"),
            }.get(name, {})


def calibrated(policy, trace):
    """``policy`` calibrated on ``trace`` when it calibrates (unit tests of its decisions;
    simulate itself calibrates on held-out requests only)."""
    if hasattr(policy, "calibrate"):
        policy.calibrate(trace)
    return policy
