"""A lower bound on every request's TTFT, TPOT and e2e latency, from the cost model alone.

The planner skips a configuration it can prove cannot pass (or cannot matter) before
simulating it (analysis.plan_search). The proof is this module's bound: for each simulated
request i, ``L_i ≤ X_i`` for X = TTFT, TPOT, e2e of the simulated run, whatever the other
requests, the queue, the KV cache or the policy's allocation do. Since a percentile is
monotone in every sample, ``percentile_p(L) ≤ percentile_p(X)``; since a request meeting
every SLO in the run meets it under its bound too, the goodput share under L bounds the run's
from above.

Why it holds (vLLM V1 step composer, roofline cost model; anything else gets no bound):

- **step time**: the roofline pass time (simulator.roofline.time_from_sums) is nondecreasing
  in every batch sum (n, Σq, Σc, Σq·c, Σq²), so a step that carries request i takes at least
  the target's pass over i alone with query 1 and its prompt as cache, plus the per-step
  overhead the V1 step adds (simulator.v1_step). Draft passes, the rejection sampler, CUDA
  graph padding and other requests only add to it;
- **TTFT**: the first token needs i's prompt prefilled, at least one pass of
  ``max(1, P_i − shared prefix)`` query tokens on an empty cache (chunking a prompt into
  several passes only adds: the attention flops Σ q(c + (q+1)/2) of the chunks sum to the
  whole prompt's, the weights are read once per chunk, and max(a, b) is subadditive);
- **steps**: a step at output position t emits ``min(τ + 1, O_i − t)`` tokens, τ the accepted
  length for the verified prefix s ≤ D (the policy's depth) under common random numbers
  keyed by (seed, request, position) (simulator.verify). ``u(t) = 1 + max_{s ≤ D} τ_s(t)``
  bounds every advance, so the fewest steps from position 0 or 1 to O_i along advances
  ``1..u(t)`` (a shortest path, :func:`fewest_steps`) is at most the steps any policy takes,
  minus one step for where the first token falls (prefill or first decode step);
- e2e ≥ TTFT bound + steps × step time; TPOT = (e2e − TTFT) / (O_i − 1) ≥ steps × step time /
  (O_i − 1).

tests/analysis/test_plan_bound.py checks ``L_i ≤ X_i`` request by request against the
simulator on many settings (policies, verifiers, tp, loads, wrapped outputs, preemption).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Most (request, position) pairs the step bound tabulates; larger workloads get the
#: advance bound u(t) ≤ D + 1 instead (still a bound, looser, in closed form).
MAX_CELLS = 20_000_000


@dataclass(frozen=True)
class Bounds:
    """Per-request lower bounds, seconds.  # [N] each"""

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray

    def at(self, percentile: float) -> dict[str, float]:
        """The bounds of each metric's percentile (np.percentile's linear interpolation,
        as analysis.plan_slo.judge reads the run)."""
        return {n: float(np.percentile(getattr(self, n), percentile))
                for n in ("ttft", "tpot", "e2e")}


class BoundTables:
    """What every bound of one workload shares, computed once: the trace, the workload and
    the fewest steps per (policy depth, verify rule). ``fields``: the SimConfig fields the
    runs share (deployment and speculation fields are given per call)."""

    def __init__(self, fields: dict, trace=None) -> None:
        from specbatch.simulator.config import make_config
        from specbatch.simulator.run import cap_workload, load_trace
        from specbatch.simulator.workload import build_workload

        config = make_config(fields)
        self.trace = load_trace(config) if trace is None else trace
        self.workload = cap_workload(config, build_workload(config, self.trace))
        self.seed = int(config.seed)
        self._steps: dict[tuple[int, str], np.ndarray] = {}

    def steps(self, depth: int, rule: str) -> np.ndarray:
        """Fewest decode steps after the first token of every request (module docstring).
        # [N] int64"""
        key = (int(depth), rule if depth else "")
        if key not in self._steps:
            self._steps[key] = decode_steps(self.trace, self.workload, self.seed, *key)
        return self._steps[key]

    def bounds(self, fields: dict) -> Bounds | None:
        """The bounds of one configuration (the shared fields plus ``fields``), or None when
        the bound does not apply (a scheduler other than vllm-v1, a cost model other than the
        roofline, a tree rule)."""
        from specbatch.simulator.config import make_config
        from specbatch.simulator.policies import make_policy
        from specbatch.simulator.roofline import RooflineCost
        from specbatch.simulator.run import build_cost
        from specbatch.simulator.tree_config import TREE_RULES

        config = make_config(fields)
        if config.scheduler != "vllm-v1" or config.verify in TREE_RULES:
            return None
        cost = build_cost(config)
        if not isinstance(cost, RooflineCost) or not cost.overhead >= 0:
            return None
        depth = int(make_policy(config, self.trace.K).depth)
        steps = self.steps(depth, config.verify)
        prefill, step = pass_times(cost, self.workload)
        decode = steps * step  # [N]
        out = self.workload.output_len
        tpot = np.where(out > 1, decode / np.maximum(out - 1, 1), 0.0)
        return Bounds(ttft=prefill, tpot=tpot, e2e=prefill + decode)


def pass_times(cost, workload) -> tuple[np.ndarray, np.ndarray]:
    """(prefill pass of each prompt alone, a query-1 pass over each prompt alone), each plus
    the step overhead, seconds.  # ([N], [N])"""
    from specbatch.simulator.prefix import prefix_groups

    _, shared = prefix_groups(workload)
    prompt = np.asarray(workload.prompt_len, dtype=np.int64)
    query = np.maximum(prompt - shared, 1)
    overhead = float(cost.overhead)
    prefill = np.array([cost.time_from_sums("target", 1, float(q), 0.0, 0.0, float(q * q))
                        for q in query.tolist()]) + overhead
    step = np.array([cost.time_from_sums("target", 1, 1.0, float(c), float(c), 1.0)
                     for c in prompt.tolist()]) + overhead
    return prefill, step


def advances(trace, workload, seed: int, depth: int, rule: str) -> np.ndarray:
    """``u[i, t] = 1 + max_{s ≤ depth} τ_s`` at every output position t < O_i (0 beyond),
    the most tokens a step at position t can emit (module docstring).  # [N, T] int64"""
    from specbatch.simulator.verify import VerifyTables, request_keys, uniforms

    out = np.asarray(workload.output_len, dtype=np.int64)
    n, top = out.shape[0], int(out.max(initial=0))
    u = np.zeros((n, top), dtype=np.int64)
    if depth == 0:
        u[np.arange(top)[None, :] < out[:, None]] = 1
        return u
    req, pos = np.nonzero(np.arange(top)[None, :] < out[:, None])  # every (i, t), t < O_i
    base = np.asarray(workload.row_base, dtype=np.int64)[req]
    wrap = workload.wrap
    rows = base + (pos if wrap is None else np.remainder(pos, np.asarray(wrap)[req]))
    keys = request_keys(seed, np.arange(n))[req]
    eta = uniforms(keys, pos, depth)  # [cells, depth]
    tables = VerifyTables(trace, rule)
    best = np.zeros(req.shape[0], dtype=np.int64)
    for s in range(1, depth + 1):
        np.maximum(best, tables.tau(rows, np.full(req.shape[0], s, dtype=np.int64), eta),
                   out=best)
    u[req, pos] = best + 1
    return u


def fewest_steps(u: np.ndarray, out: np.ndarray, start: int) -> np.ndarray:
    """Fewest steps from position ``start`` to O_i when a step at t advances by 1..u[i, t]
    (reaching O_i or beyond ends the request): a shortest path, by positions from the end.
    u # [N, T];  out # [N];  returns # [N] int64 (0 where start ≥ O_i)"""
    n, top = u.shape
    width = int(u.max(initial=1))
    need = np.zeros((n, top + width + 1), dtype=np.int64)  # need[:, t]: steps from t
    big = np.iinfo(np.int64).max // 4
    reach = np.arange(1, width + 1)  # [W]
    for t in range(top - 1, start - 1, -1):
        alive = t < out
        ahead = need[:, t + 1:t + 1 + width]  # [N, W] steps from t + a, a = 1..W
        allowed = reach[None, :] <= u[:, t:t + 1]
        best = np.where(allowed, ahead, big).min(axis=1)
        need[:, t] = np.where(alive, best + 1, 0)
    return need[:, start] if start < top else np.zeros(n, dtype=np.int64)


def decode_steps(trace, workload, seed: int, depth: int, rule: str) -> np.ndarray:
    """Fewest steps after the first token: min over a start at position 0 or 1 of
    :func:`fewest_steps`, minus one (module docstring).  # [N] int64"""
    out = np.asarray(workload.output_len, dtype=np.int64)
    if out.shape[0] * int(out.max(initial=0)) > MAX_CELLS:  # every advance <= depth + 1
        width = depth + 1  # from position 1: ceil((O - 1) / (D + 1)) steps, minus one
        return np.maximum((np.maximum(out - 1, 0) + width - 1) // width - 1, 0).astype(np.int64)
    u = advances(trace, workload, seed, depth, rule)
    steps = np.minimum(fewest_steps(u, out, 0), fewest_steps(u, out, 1))
    return np.maximum(steps - 1, 0)
