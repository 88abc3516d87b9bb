"""A lower bound on every request's TTFT, TPOT and e2e latency, from the cost model alone.

The planner skips a configuration it can prove cannot pass (or cannot matter) before
simulating it (analysis.plan.search). The proof is this module's bound: for each simulated
request i, ``L_i ≤ X_i`` for X = TTFT, TPOT, e2e of the simulated run, whatever the other
requests, the queue, the KV cache or the policy's allocation do. Since a percentile is
monotone in every sample, ``percentile_p(L) ≤ percentile_p(X)``; since a request meeting
every SLO in the run meets it under its bound too, the goodput share under L bounds the run's
from above.

Why it holds (vLLM V1 step composer, roofline or calibrated cost model; anything else gets
no bound):

- **step time**: the roofline pass time
  (simulator.cost.analytic.roofline.RooflineCost.time_from_sums) is nondecreasing in every
  batch sum (n, Σq, Σc, Σq·c, Σq²), so a step that carries request i takes at least
  the target's pass over i alone with query 1 and its prompt as cache, plus the per-step
  overhead the V1 step adds (simulator.engine.v1.step). Draft passes, the rejection sampler, CUDA
  graph padding and other requests only add to it;
- **TTFT**: the first token needs i's prompt prefilled, at least one pass of
  ``max(1, P_i − shared prefix)`` query tokens on an empty cache (chunking a prompt into
  several passes only adds: the attention flops Σ q(c + (q+1)/2) of the chunks sum to the
  whole prompt's, the weights are read once per chunk, and max(a, b) is subadditive);
- **steps**: a step at output position t emits ``min(τ + 1, O_i − t)`` tokens, τ the accepted
  length for the verified prefix s ≤ D (the policy's depth) under common random numbers
  keyed by (seed, request, position) (simulator.replay.chain). ``u(t) = 1 + max_{s ≤ D} τ_s(t)``
  bounds every advance, so the fewest steps from position 0 or 1 to O_i along advances
  ``1..u(t)`` (a shortest path, :func:`fewest_steps`) is at most the steps any policy takes,
  minus one step for where the first token falls (prefill or first decode step);
- e2e ≥ TTFT bound + steps × step time; TPOT = (e2e − TTFT) / (O_i − 1) ≥ steps × step time /
  (O_i − 1).

**The calibrated cost model** (simulator.cost.measured.calibrated) is *not* monotone in the pass's
tokens Q (a MoE target's grouped-expert GEMMs get cheaper as Q grows past tile boundaries; the laws'
tile and wave rounding can too), so its floor assumes no monotonicity in Q. Its pass is
``t = fixed + max(G, floor)``, ``G = P(Q) + A``: P = layers + lm_head + all-reduce depends on
Q alone, the attention A = max(F / π, B / β) with F ∝ Σq·c + (Σq² + Σq)/2 and B ∝ Σc + 2Σq,
nonnegative coefficients, so A is nondecreasing in every batch sum; t is nondecreasing in G.
With ``g(x) = min_{x ≤ Q ≤ Q_max} P(Q)`` evaluated at every integer Q (a suffix minimum:
:func:`per_token_table`, exactly the pricer's numbers), Q_max the token budget (vLLM V1 never
schedules more; a CUDA-graph-padded pass is at most the largest captured size):

- a step emitting i's tokens has Q ≥ 1 and i's query q ≥ 1 over a cache c with
  q + c ≥ P_i + 1 (a decode step, or a recompute's last chunk), so F and B are at least
  those of (1, P_i) (qc + (q² + q)/2 ≥ c + q, c + 2q ≥ P_i + 2), and the step costs at
  least ``fixed + max(g(1) + A(1, P_i), floor)`` plus the overhead;
- i's prefill in passes j = 1..k of x_j ≥ 1 of its tokens (Σ x_j = q_i, each pass's Q ≥ x_j)
  costs Σ_j fixed + max(G_j, floor) ≥ fixed + max(Σ_j G_j, floor); Σ_j P(Q_j) ≥ Σ_j g(x_j)
  ≥ h(q_i), the least such sum over every split of q_i (a shortest path,
  :func:`split_floor`); Σ_j A_j ≥ A(q_i alone) since max is subadditive and the chunks'
  F and B sum to at least the whole prompt's on an empty cache.

The calibrated floors are shrunk by :data:`SLACK` (their parts are added in another order).

tests/analysis/plan/test_bound.py checks ``L_i ≤ X_i`` request by request against the
simulator on many settings (policies, verifiers, tp, loads, wrapped outputs, preemption,
both cost models, a MoE target), and hypothesis tests the two calibrated lemmas above on
random batches and chunkings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

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
        as analysis.plan.slo.judge reads the run)."""
        return {n: float(np.percentile(getattr(self, n), percentile))
                for n in ("ttft", "tpot", "e2e")}


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
        """Fewest decode steps after the first token of every request (module docstring).
        # [N] int64"""
        key = (int(depth), rule if depth else "")
        if key not in self._steps:
            self._steps[key] = decode_steps(self.trace, self.workload, self.seed, *key)
        return self._steps[key]

    def pass_times(self, config: SimConfig) -> tuple[np.ndarray, np.ndarray] | None:
        """(prefill, step) floors of :func:`pass_times` under ``config``'s cost model, or None
        where no floor is proven (a cost model other than the roofline and the calibrated
        one, a negative overhead). The calibrated floor tables are built once per target
        pricing (they do not depend on the speculation setting)."""
        from specbatch.analysis.plan.cost_source import shared_cost
        from specbatch.simulator.cost.analytic.roofline import RooflineCost
        from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses
        from specbatch.simulator.cost.features.graph_padding import capture_sizes
        from specbatch.simulator.cost.features.host import HostCost
        from specbatch.simulator.cost.measured.calibrated import CalibratedCost, RolePricer
        from specbatch.simulator.run import async_overlaps

        key = (config.cost, config.hardware, config.target, config.draft, config.tp,
               config.profile, config.execution, config.draft_weight_bits,
               config.routing_skew, config.token_budget, config.cuda_graph_sizes,
               async_overlaps(config), config.quantization, config.kv_cache_dtype,
               config.host)
        if key not in self._costs:
            cost = shared_cost(config)
            # vLLM's host share (simulator.cost.features.host) only adds to the inner passes,
            # and its own overhead is the one the floors add: they stay lower bounds
            base = cost.inner if isinstance(cost, HostCost) else cost
            if isinstance(base, DraftModelPasses):  # a vLLM V1 draft model's pass 1: drafts
                base = base.inner  # only add to the target's passes the floors take
            if isinstance(base, RooflineCost) and cost.overhead >= 0:
                self._costs[key] = pass_times(cost, self.workload)
            elif (isinstance(base, CalibratedCost) and cost.overhead >= 0
                  and isinstance(base.roles["target"], RolePricer)):  # not an RTX profile cell
                sizes = config.cuda_graph_sizes
                q_max = max(int(config.token_budget),  # the token budget, or a padded pass
                            capture_sizes(sizes)[-1] if sizes is not None else 0)
                if q_max > SCALAR_MAX and not vectorised(cost.roles["target"]):
                    self._costs[key] = None
                    return None
                query, prompt = pass_queries(self.workload)
                floor = CalibratedFloor(cost, q_max, int(query.max(initial=1)))
                self._costs[key] = floor.times(query, prompt)
            else:
                self._costs[key] = None
        return self._costs[key]

    def bounds(self, fields: dict) -> Bounds | None:
        """The bounds of one configuration (the shared fields plus ``fields``), or None when
        the bound does not apply (a scheduler without vLLM V1's mixed steps, its catalogue row's
        ``mixed_steps``; a cost model other than the
        roofline and the calibrated one, a tree rule)."""
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


#: Relative slack under the calibrated bounds: they re-add the pass's parts in another order
#: than simulator.cost.measured.calibrated does (a few ulps), so they are shrunk by far more than
#: that.
SLACK = 1e-9


class CalibratedFloor:
    """The calibrated target pass priced from below (module docstring).

    ``g[x]`` = min over x ≤ Q ≤ Q_max of the per-token parts layers + lm_head + allreduce
    (their suffix minimum: no monotonicity assumed), ``h[q]`` = the least Σ_j g[x_j] over the
    ways to split q prompt tokens into passes of x_j ≥ 1 tokens (a shortest path);
    attention and launch are added in closed form."""

    def __init__(self, cost, q_max: int, longest: int) -> None:
        self.role = cost.roles["target"]
        self.overhead = float(cost.overhead)
        self.g = suffix_min(per_token_table(self.role, q_max))  # [Q_max + 1]
        self.h = split_floor(self.g, min(max(longest, 1), SPLIT_MAX))  # [top + 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.rate = float(np.min(self.g[1:] / np.arange(1, q_max + 1)))

    def split(self, q: int) -> float:
        """h(q); beyond the table max(h(top), q · min_x g[x] / x) (h is nondecreasing and
        every part costs at least its tokens times that rate)."""
        top = self.h.shape[0] - 1
        return float(self.h[q]) if q <= top else max(float(self.h[top]), q * self.rate)

    def pass_floor(self, per_token: float, sums: tuple[float, float, float, float],
                   window: tuple[float, float] | None = None) -> float:
        """fixed + max(per-token parts + attention, host floor) + the step overhead (a
        sliding-window target's attention at its ``window`` sums,
        simulator.cost.analytic.window)."""
        fixed, floor = self.role.launch
        gpu = per_token + (self.role.attention(*sums) if window is None
                           else self.role.attention(*sums, window))
        return (fixed + max(gpu, floor) + self.overhead) * (1.0 - SLACK)

    def times(self, query: np.ndarray, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(TTFT floor of a prefill of ``query`` tokens, floor of a step over a ``prompt``
        cache), as :func:`pass_times`.  # ([N], [N])"""
        g1 = float(self.g[1])
        w = self.role.consts.window if self.role.consts.sliding_layers else 0
        prefill = np.array([self.pass_floor(self.split(q), (float(q), 0.0, 0.0, float(q * q)),
                                            windowed_pass(w, q, 0))
                            for q in query.tolist()])
        step = np.array([self.pass_floor(g1, (1.0, float(c), float(c), 1.0),
                                         windowed_pass(w, 1, c))
                         for c in prompt.tolist()])
        return prefill, step


def windowed_pass(window: int, q: int, c: int) -> tuple[float, float] | None:
    """The window sums (K^W, P^W) of one request's pass of ``q`` tokens over ``c`` cached
    (None without a window). The floors hold with windows too: a request's window work is
    nondecreasing in q and c, and a prompt's chunks do at least its one-pass work (each
    query's keys depend on its position alone; each chunk reads its own q keys)."""
    from specbatch.simulator.cost.analytic.window import window_sums

    return None if not window else window_sums([q], [c], window)


#: Largest token budget a pricer without the vectorised tail (:func:`vectorised`) is
#: tabulated to; beyond, no bound (pricing every Q would cost more than skipping saves).
SCALAR_MAX = 16384

#: Longest prompt the split table h is tabulated to (O(top · Q_max) work); beyond, the
#: linear floor of :meth:`CalibratedFloor.split`.
SPLIT_MAX = 8192


def suffix_min(p: np.ndarray) -> np.ndarray:
    """g[x] = min_{Q ≥ x} p[Q].  # [Q_max + 1]"""
    return np.minimum.accumulate(p[::-1])[::-1].copy()


def split_floor(g: np.ndarray, top: int) -> np.ndarray:
    """h[q] = min over splits of q into parts 1 ≤ x_j ≤ Q_max of Σ g[x_j] (h[0] = 0): the
    shortest path h[q] = min_x h[q − x] + g[x].  # [top + 1]"""
    q_max = g.shape[0] - 1
    h = np.zeros(top + 1)
    for q in range(1, top + 1):
        w = min(q, q_max)
        h[q] = np.min(h[q - w:q][::-1] + g[1:w + 1])
    return h


def per_token_table(role, q_max: int) -> np.ndarray:
    """p[Q] = layers + lm_head + allreduce of the target pass at Q = 1..q_max tokens, as
    :meth:`simulator.cost.measured.calibrated.RolePricer.per_token_parts` prices them, with
    the LM head at one logit row: the fewest a pass samples (vLLM takes logits at a prefill
    chunk's last token only, simulator.cost.analytic.roofline), and the head is nondecreasing in
    its rows (p[0] = inf). Dense full-precision shapes are priced in one vectorised call past
    the last grid point where the pricer extrapolates (edge value times the law's growth);
    anything else calls the pricer for every Q.  # [q_max + 1]"""
    p = np.full(q_max + 1, np.inf)
    head1 = role.per_token_parts(1.0)[1]  # the LM head at one logit row
    corr = next(iter((role.fit.corrections or {}).values()), None)
    edges = [float(corr.grid[-1])] if corr is not None else [0.0]
    if role.cell is not None:
        edges.append(float(role.cell.grid[-1]))
    vector = vectorised(role)
    last = int(math.ceil(max(edges))) if vector else q_max
    for q in range(1, min(last, q_max) + 1):
        layers, _, comm = role.per_token_parts(float(q))
        p[q] = layers + head1 + comm
    if last < q_max:
        qs = np.arange(last + 1, q_max + 1, dtype=np.float64)  # [tail]
        p[last + 1:] = tail_layers(role, qs, edges) + head1 + np.array(
            [tail_allreduce(role, q) for q in qs.tolist()])
    return p


def vectorised(role) -> bool:
    """Whether :func:`per_token_table` prices the tail in one call (a dense full-precision shape,
    the target's weights unquantised); otherwise every Q costs one pricer call (~1 ms for a MoE
    target)."""
    from specbatch.simulator.cost.measured.sources import sparse

    return not sparse(role.shape) and role.weight_bits >= 16 and not role.fmt.quantized


def tail_allreduce(role, q: float) -> float:
    """RolePricer.per_token_parts' all-reduce term (0 on one GPU)."""
    if role.tp <= 1:
        return 0.0
    return 2 * role.shape.layers * role.one_allreduce(role.hw.dtype_bytes * role.shape.hidden * q)


def law_layers(role, qs: np.ndarray) -> np.ndarray:
    """RolePricer.law_layers of a dense full-precision shape at every Q of qs.  # [tail]"""
    from specbatch.simulator.cost.measured.laws import embedding_seconds, layer_seconds
    from specbatch.simulator.cost.measured.sources import layer_shape

    ls = layer_shape(role.shape)
    return (embedding_seconds(role.fit, ls, role.tp, qs)
            + role.shape.layers * layer_seconds(role.fit, ls, role.tp, qs))


def tail_layers(role, qs: np.ndarray, edges: list[float]) -> np.ndarray:
    """RolePricer.layers past every grid: its edge value times law(Q) / law(edge)."""
    edge = float(role.cell.grid[-1]) if role.cell is not None else edges[0]
    if role.cell is None and edge == 0.0:  # no correction grid: the law itself
        return law_layers(role, qs)
    return role.layers(edge) * law_layers(role, qs) / role.law_layers(edge)
