"""A lower bound on every request's TTFT, TPOT and e2e latency, from the cost model alone.

The planner skips a configuration it can prove cannot pass (or cannot matter) before
simulating it (analysis.plan.search). The proof is this module's bound: for each simulated
request i, ``L_i ≤ X_i`` for X = TTFT, TPOT, e2e of the simulated run, whatever the other
requests, the queue, the KV cache or the policy's allocation do. Since a percentile is
monotone in every sample, ``percentile_p(L) ≤ percentile_p(X)``; since a request meeting
every SLO in the run meets it under its bound too, the goodput share under L bounds the run's
from above.

Why it holds (vLLM V1 step composer; the roofline or any tabulated cost model, anything else
gets no bound):

- **step time**: the roofline pass time
  (simulator.cost.analytic.roofline.RooflineCost.time_from_sums) is nondecreasing in every
  batch sum (n, Σq, Σc, Σq·c, Σq²), so a step that carries request i takes at least
  the target's pass over i alone with query 1 and its prompt as cache, plus the per-step
  overhead the V1 step adds (simulator.engine.v1.step). Draft passes, the rejection sampler, CUDA
  graph padding and other requests only add to it. A tabulated cost model (the calibrated
  and the aic ones: simulator.cost.tabulated's ``pass_table``) is not monotone in the pass's
  tokens; its floors (analysis.plan.pass_floor) take the least per-token parts over every
  token count such a pass could have and its attention law at i alone;
- **TTFT**: the first token needs i's prompt prefilled, at least one pass of
  ``max(1, P_i − shared prefix)`` query tokens on an empty cache (chunking a prompt into
  several passes only adds: the attention flops Σ q(c + (q+1)/2) of the chunks sum to the
  whole prompt's, the weights are read once per chunk, and max(a, b) is subadditive);
- **steps**: a step at output position t emits ``min(τ + 1, O_i − t)`` tokens, τ the accepted
  length for the verified prefix s ≤ D (the policy's depth) under common random numbers
  keyed by (seed, request, position) (simulator.replay.chain). ``u(t) = 1 + max_{s ≤ D} τ_s(t)``
  bounds every advance, so the fewest steps from position 0 or 1 to O_i along advances
  ``1..u(t)`` (a shortest path, :func:`fewest_steps`; its fast twin :func:`reach_steps`
  reads it off the running maximum of t + u(t), the farthest k steps reach) is at most the
  steps any policy takes, minus one step for where the first token falls (prefill or first
  decode step);
- e2e ≥ TTFT bound + steps × step time; TPOT = (e2e − TTFT) / (O_i − 1) ≥ steps × step time /
  (O_i − 1).

tests/analysis/plan/test_bound.py checks ``L_i ≤ X_i`` request by request against the
simulator on many settings (policies, verifiers, tp, loads, wrapped outputs, preemption,
the roofline, calibrated and aic cost models, a MoE target), and hypothesis on random
workloads and settings; tests/analysis/plan/test_pass_floor.py the pass floors against the
models' own pass times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

#: Most (request, position) pairs the step bound tabulates; larger workloads get the
#: advance bound u(t) ≤ D + 1 instead (still a bound, looser, in closed form).
MAX_CELLS = 20_000_000

#: Most (depth, request, position) cells :func:`depth_steps` holds at once (every depth of a
#: rule in one pass); beyond, each depth is computed alone (:func:`decode_steps`).
BATCH_CELLS = 8_000_000


@dataclass(frozen=True)
class Bounds:
    """Per-request lower bounds, seconds.  # [N] each"""

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    _at: dict = field(default_factory=dict, repr=False, compare=False)

    def at(self, percentile: float) -> dict[str, float]:
        """The bounds of each metric's percentile (np.percentile's linear interpolation,
        as analysis.plan.slo.judge reads the run), computed once per percentile (the search
        asks each candidate's three times)."""
        if percentile not in self._at:
            self._at[percentile] = {n: float(np.percentile(getattr(self, n), percentile))
                                    for n in ("ttft", "tpot", "e2e")}
        return dict(self._at[percentile])


class BoundTables:
    """What every bound of one workload shares, computed once: the trace, the workload and
    the fewest steps per (policy depth, verify rule). ``fields``: the SimConfig fields the
    runs share (deployment and speculation fields are given per call)."""

    def __init__(self, fields: dict, trace=None) -> None:
        from specbatch.simulator.config.sim_config import make_config
        from specbatch.simulator.replay.profile_replay import profile_trace
        from specbatch.simulator.run import applied_profile, cap_workload, load_trace
        from specbatch.simulator.workload.arrivals import build_workload

        config = make_config(fields)
        self.trace = load_trace(config) if trace is None else trace
        profile = applied_profile(config)
        if profile is not None:  # the runs replay the profile's acceptance: so do the bounds
            self.trace = profile_trace(self.trace, profile, config.seed)
        self.workload = cap_workload(config, build_workload(config, self.trace))
        self.seed = int(config.seed)
        self._steps: dict[tuple[int, str], np.ndarray] = {}
        self._costs: dict[tuple, tuple[np.ndarray, np.ndarray] | None] = {}

    def steps(self, depth: int, rule: str) -> np.ndarray:
        """Fewest decode steps after the first token of every request (module docstring):
        every depth of ``rule`` up to the trace's K at once (:func:`depth_steps`, the fast twin
        of the per-depth reference :func:`decode_steps`, which larger workloads take).
        # [N] int64"""
        key = (int(depth), rule if depth else "")
        if key not in self._steps:
            out = np.asarray(self.workload.output_len, dtype=np.int64)
            top = int(self.trace.K)
            cells = out.shape[0] * int(out.max(initial=0))
            if depth == 0 and cells <= MAX_CELLS:  # one token a step: reach layers
                u = advances(self.trace, self.workload, self.seed, 0, "")
                self._steps[key] = np.maximum(np.minimum(*first_steps(u, out)) - 1, 0)
            elif 0 < depth <= top and cells <= MAX_CELLS and top * cells <= BATCH_CELLS:
                steps = depth_steps(self.trace, self.workload, self.seed, rule, top)
                self._steps.update({(d, rule): v for d, v in steps.items()})
            else:
                self._steps[key] = decode_steps(self.trace, self.workload, self.seed, *key)
        return self._steps[key]

    def pass_times(self, config: SimConfig) -> tuple[np.ndarray, np.ndarray] | None:
        """(prefill, step) floors of :func:`pass_times` under ``config``'s cost model, or None
        where no floor is proven (:func:`target_floor`). A tabulated model's floor
        (analysis.plan.pass_floor) is built once per target pricing: it does not depend on
        the speculation setting."""
        from specbatch.simulator.run import async_overlaps

        key = (config.cost, config.hardware, config.target, config.draft, config.tp,
               config.profile, config.execution, config.draft_weight_bits,
               config.routing_skew, config.token_budget, config.cuda_graph_sizes,
               async_overlaps(config), config.quantization, config.kv_cache_dtype,
               config.host, config.draft_head, config.enable_expert_parallel,
               config.data_parallel_size)  # every field simulator.run.build_cost reads
        if key not in self._costs:
            self._costs[key] = target_floor(config, self.workload)
        return self._costs[key]

    def bounds(self, fields: dict) -> Bounds | None:
        """The bounds of one configuration (the shared fields plus ``fields``), or None when
        the bound does not apply (a scheduler without vLLM V1's mixed steps, its catalogue row's
        ``mixed_steps``; a cost model with no floor, :func:`target_floor`; a tree rule)."""
        from specbatch.simulator.config.sim_config import make_config
        from specbatch.simulator.policies.registry import make_policy
        from specbatch.simulator.replay.rules import rule_entry

        config = make_config(fields)
        if not config.scheduler_row.mixed_steps or rule_entry(config.verify).tree:
            return None
        times = self.pass_times(config)
        if times is None:
            return None
        prefill, step = times
        depth = int(make_policy(config, self.trace.K).depth)
        steps = self.steps(depth, config.verify)
        decode = steps * step  # [N]
        out = self.workload.output_len
        tpot = np.where(out > 1, decode / np.maximum(out - 1, 1), 0.0)
        return Bounds(ttft=prefill, tpot=tpot, e2e=prefill + decode)


def target_floor(config: SimConfig, workload) -> tuple[np.ndarray, np.ndarray] | None:
    """(prefill, step) floors of every request under ``config``'s cost model: the roofline's
    own passes (:func:`pass_times`), a tabulated model's :class:`PassFloor`
    (analysis.plan.pass_floor: the calibrated and the aic models), else None (a profiled
    model, the LLMServingSim GPUs' calibrated pricer, a negative overhead)."""
    from specbatch.analysis.plan.cost_source import shared_cost
    from specbatch.analysis.plan.pass_floor import target_floor as table_floor
    from specbatch.simulator.cost.analytic.roofline import RooflineCost
    from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost
    from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses
    from specbatch.simulator.cost.features.graph_padding import capture_sizes
    from specbatch.simulator.cost.features.host import HostCost

    cost = shared_cost(config)
    if cost.overhead < 0:
        return None
    # vLLM's host share (simulator.cost.features.host) and async scheduling's overlap
    # (simulator.cost.features.async_overhead) only add to the inner passes, and their own
    # per-step overhead is the one the floors add: they stay lower bounds
    base = cost.inner if type(cost) in (HostCost, AsyncOverheadCost) else cost
    if type(base) is DraftModelPasses:  # a vLLM V1 draft model's pass 1: the drafts only
        base = base.inner  # add to the target's passes the floors take
    if isinstance(base, RooflineCost):
        return pass_times(cost, workload)
    sizes = config.cuda_graph_sizes
    q_max = max(int(config.token_budget),  # the token budget, or a padded pass
                capture_sizes(sizes)[-1] if sizes is not None else 0)
    query, prompt = pass_queries(workload)
    floor = table_floor(base, float(cost.overhead), q_max, int(query.max(initial=1)))
    return None if floor is None else floor.times(query, prompt)


def pass_times(cost, workload) -> tuple[np.ndarray, np.ndarray]:
    """(prefill pass of each prompt alone, a query-1 pass over each prompt alone), each plus
    the step overhead, seconds.  # ([N], [N])"""
    from specbatch.simulator.cost.interface import takes_logit_rows

    query, prompt = pass_queries(workload)
    overhead = float(cost.overhead)
    # a prefill's LM head at one logit row where the engine names them (its last token)
    rows = {"rows": 1.0} if takes_logit_rows(cost) else {}
    if getattr(cost, "windowed", False):  # sliding-window layers: priced from arrays
        one = np.ones(1, dtype=np.int64)
        prefill = np.array([cost.step_time("target", one * q, one * 0, **rows)
                            for q in query.tolist()]) + overhead
        step = np.array([cost.step_time("target", one, one * c)
                         for c in prompt.tolist()]) + overhead
        return prefill, step
    prefill = np.array([cost.time_from_sums("target", 1, float(q), 0.0, 0.0, float(q * q),
                                            **rows)
                        for q in query.tolist()]) + overhead
    step = np.array([cost.time_from_sums("target", 1, 1.0, float(c), float(c), 1.0)
                     for c in prompt.tolist()]) + overhead
    return prefill, step


def pass_queries(workload) -> tuple[np.ndarray, np.ndarray]:
    """(each prompt's tokens past its shared prefix, at least 1; each prompt).  # ([N], [N])"""
    from specbatch.simulator.engine.prefix import prefix_groups

    _, shared = prefix_groups(workload)
    prompt = np.asarray(workload.prompt_len, dtype=np.int64)
    return np.maximum(prompt - shared, 1), prompt


def advances(trace, workload, seed: int, depth: int, rule: str) -> np.ndarray:
    """``u[i, t] = 1 + max_{s ≤ depth} τ_s`` at every output position t < O_i (0 beyond),
    the most tokens a step at position t can emit (module docstring).  # [N, T] int64"""
    from specbatch.simulator.replay.chain import request_keys, uniforms
    from specbatch.simulator.replay.replay_tables import tables_for

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
    tables = tables_for(trace, rule)  # a chain rule's (bounds() skips the tree rules)
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


def depth_steps(trace, workload, seed: int, rule: str, top: int) -> dict[int, np.ndarray]:
    """:func:`decode_steps` of every depth D = 1..``top`` (≤ the trace's K) at once, its fast
    twin: τ_s of every (request, position) for s = 1..top read once (a chain rule's τ_s reads
    the uniforms of draft indices j < s alone, and they do not depend on how many are
    drawn), u_D the running maximum over s ≤ D, and the fewest steps of every depth by
    :func:`reach_steps`.  # {D: [N] int64}"""
    from specbatch.simulator.replay.chain import request_keys, uniforms
    from specbatch.simulator.replay.replay_tables import tables_for

    out = np.asarray(workload.output_len, dtype=np.int64)
    n, last = out.shape[0], int(out.max(initial=0))
    req, pos = np.nonzero(np.arange(last)[None, :] < out[:, None])  # every (i, t), t < O_i
    base = np.asarray(workload.row_base, dtype=np.int64)[req]
    wrap = workload.wrap
    rows = base + (pos if wrap is None else np.remainder(pos, np.asarray(wrap)[req]))
    eta = uniforms(request_keys(seed, np.arange(n))[req], pos, top)  # [cells, top]
    tables = tables_for(trace, rule)
    u = np.zeros((top, n, last), dtype=np.int64)  # [D, N, T]
    best = np.zeros(req.shape[0], dtype=np.int64)
    for s in range(1, top + 1):
        np.maximum(best, tables.tau(rows, np.full(req.shape[0], s, dtype=np.int64), eta),
                   out=best)
        u[s - 1, req, pos] = best + 1
    flat, ends = u.reshape(top * n, last), np.tile(out, top)
    steps = np.maximum(np.minimum(*first_steps(flat, ends)) - 1, 0).reshape(top, n)
    return {d: steps[d - 1] for d in range(1, top + 1)}


def reach_steps(u: np.ndarray, out: np.ndarray, start: int) -> np.ndarray:
    """:func:`fewest_steps` by reach layers, its fast twin: the positions k steps reach from
    ``start`` are an interval [start, R_k] (every advance may be cut short), and
    R_{k+1} = max_{start ≤ t ≤ R_k} t + u[i, t], a running maximum read once per step.
    u # [N, T] (≥ 1 below O_i);  out # [N];  returns # [N] int64 (0 where start ≥ O_i)"""
    return first_steps(u, out)[start]


def first_steps(u: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`reach_steps` from position 0 and from position 1, in one loop over the steps.
    # ([N], [N]) int64"""
    n, last = u.shape
    t = np.arange(last)
    far = np.maximum.accumulate(t + u, axis=1)  # [N, T] farthest reach from 0..t
    late = np.maximum.accumulate(np.where(t >= 1, t + u, 0), axis=1)  # from 1..t
    far = np.concatenate([far, late]).reshape(2 * n * last)  # [2N · T]
    ends = np.concatenate([out, out])  # [2N]
    reach = np.repeat(np.array([0, 1], dtype=np.int64), n)  # [2N]
    steps = np.zeros(2 * n, dtype=np.int64)
    live = np.nonzero(reach < ends)[0]
    base = live * last
    k = 0
    while live.size:
        k += 1
        got = far[base + reach[live]]
        reach[live] = got
        done = got >= ends[live]
        steps[live[done]] = k
        keep = ~done
        live, base = live[keep], base[keep]
    return steps[:n], steps[n:]
