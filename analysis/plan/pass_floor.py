"""A floor under the target passes that carry one request, for any tabulated cost model.

analysis.plan.bound needs, for request i with prompt P_i (q_i tokens past a shared prefix),
two numbers no simulated run can beat: the target passes that prefill it (its TTFT) and one
step that emits its tokens. This module builds both from the form every tabulated cost model
prices a pass in (simulator.cost.tabulated: the ``pass_table`` / ``table_gap`` interface the
compiled loop reads; the calibrated and the aic models)::

    gpu = ((L[Q] + A(n, Σq, Σc, Σq·c, Σq²)) + C[Q]) + H[r]
    t   = gpu + (fixed + max(0, floor − gpu))  =  fixed + max(gpu, floor)
    A   = (a + u·n) + body,  body = max(F, B) (overlap) or F + B,
    F   = φ·(Σq·c + (Σq² + Σq)/2) / π,   B = κ·(Σc + 2Σq) / β

with L, C, H tabulated at every integer Q = Σq ≤ Q_max and r the pass's logit rows. No
monotonicity in Q is assumed of L, C or H (a MoE target's grouped-expert GEMMs get cheaper as
Q passes tile boundaries; a measured curve may dip): only that A's coefficients (φ, κ, a, u)
are nonnegative and its rates positive, so A is nondecreasing in every batch sum; a table with
a negative or non-finite entry or such a law gets no floor (:func:`check_table`).

- **per-token parts**: a pass carrying i has 1 ≤ r ≤ Q ≤ Q_max (vLLM V1 never schedules
  more than the token budget, a CUDA-graph-padded pass at most the largest captured size; the
  engine names one logit row per prefill chunk and per decoding token, r = Q when it names
  none), so L[Q] + C[Q] + H[r] ≥ p(Q) = L[Q] + C[Q] + min_{1 ≤ r ≤ Q} H[r], and for a pass of
  at least x tokens ≥ ``g[x]`` = min_{x ≤ Q ≤ Q_max} p(Q) (a suffix minimum, exactly the
  table's numbers);
- **attention**: n ≥ 1, so A ≥ a0 + body with a0 = a + u; i's own query q ≥ 1 over a cache c
  bounds body from below (the sums only grow with other requests and padding); a grid law
  (aic: simulator.cost.tabulated.grid_attention) has a0 its least value over every batch
  (tabulated.grid_least) and body 0, a regime law (the LLMServingSim GPUs:
  tabulated.regime_attention) L · min(c_0 + c_1) over its regimes (tabulated.regime_least)
  and body 0; a sampler term S[n] >= 0 beside the LM head is left out (a floor without it);
- **a step** emitting i's tokens has q ≥ 1 and q + c ≥ P_i + 1 (a decode, or a recompute's
  last chunk), so its F and B are at least those of (q, c) = (1, P_i) and it costs at least
  ``fixed + max(g[1] + a0 + body(1, P_i), floor)`` plus the step overhead o;
- **a prefill** in k ≥ 1 passes of x_j ≥ 1 of i's tokens (Σ x_j = q_i): the chunks' F and B
  sum to at least the whole prompt's on an empty cache (Σ x_j c_j + (x_j² + x_j)/2 over
  consecutive chunks is (q² + q)/2 plus the cached prefix's share; Σ c_j + 2x_j ≥ 2q) and max,
  + are superadditive over sums of pairs, so Σ_j body_j ≥ body(q_i, 0). With
  ``split(κ)[q]`` = min over splits of q of Σ_j (g[x_j] + κ) (a shortest path,
  :func:`split_floor`), the k steps cost at least both
  ``split(fixed + o + a0)[q] + body(q, 0)`` (every pass's terms added) and
  ``fixed + o + max(split(a0)[q] + body(q, 0), floor)`` (Σ_j max(G_j, floor) ≥ max(Σ_j G_j,
  floor)).

The floors are shrunk by :data:`SLACK`: they add the parts in another order than the table's
evaluation (a few ulps).

A sliding-window target has no PassTable (its attention needs the window sums,
simulator.cost.analytic.window). For a calibrated role :func:`window_floor` takes its
per-token parts from the calibrated table builder and prices the attention by the role itself
at i's window sums (a request's window work is nondecreasing in q and c, and a prompt's chunks
do at least its one-pass work). For an aic role the pass is the unwindowed table's with the
attention read as (L − L_s)/L of the grid law at the full sums plus L_s/L of it at the window
sums a sliding layer presents (AicPricer.attention_at, aic_window_prefill.local_seconds):
each share is at least its fraction of the grid's least value, the sliding one because it is
the grid read at a batch's sums (its decodes at K^W, its queries clipped at W, its
cached-prefix pairs >= 0, so tabulated.grid_least bounds it) plus α·E + β·R with α, β >= 0
(non-negative least squares) and E, R >= 0 (tokens and products past the window, clamped at
0), so the unwindowed table's floor (a0 = that least value, no body) holds as it stands
(:func:`aic_window_floor`).

tests/analysis/plan/test_pass_floor.py checks both floors against the cost models' own pass
times on random batches and chunkings (calibrated, aic; MoE included), and
tests/analysis/plan/test_bound.py the request bounds they give against the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

#: Relative slack under the floors: they re-add a pass's parts in another order than the
#: cost model does (a few ulps), so they are shrunk by far more than that.
SLACK = 1e-9

#: Longest prompt the split tables are tabulated to (O(top · Q_max) work); beyond, the
#: linear floor of :meth:`PassFloor.split`.
SPLIT_MAX = 8192


class PassFloor:
    """The target pass of one deployment priced from below (module docstring).

    g: # [Q_max + 1] least per-token parts of a pass of at least x tokens; a0: least attention
    constant of a pass (a + u: one request at least); fixed, floor: the launch terms;
    overhead: the engine's per-step addend; body: (q, c) -> attention body of one request
    alone # [N] -> [N]; longest: the longest prefill the split tables cover exactly (at most
    :data:`SPLIT_MAX`)."""

    def __init__(self, g: np.ndarray, a0: float, fixed: float, floor: float, overhead: float,
                 body: Callable, longest: int) -> None:
        self.g, self.a0, self.fixed, self.floor = g, float(a0), float(fixed), float(floor)
        self.overhead, self.body = float(overhead), body
        top = min(max(int(longest), 1), SPLIT_MAX)
        self.kappa = {True: self.fixed + self.overhead + self.a0, False: self.a0}
        self.h = {every: split_floor(g + k, top) for every, k in self.kappa.items()}

    def split(self, q: np.ndarray, every: bool) -> np.ndarray:
        """min over splits of q into passes of Σ_j (g[x_j] + κ), κ = fixed + o + a0 (``every``)
        or a0; beyond the table max(h(top), q · min_x (g[x] + κ) / x) (h is nondecreasing:
        g is, and κ ≥ 0; every part costs at least its tokens times that rate).
        # [N] -> [N]"""
        h, kappa = self.h[every], self.kappa[every]
        top = h.shape[0] - 1
        q = np.asarray(q, dtype=np.int64)
        x = np.arange(1, self.g.shape[0])
        rate = float(np.min((self.g[1:] + kappa) / x)) if x.size else math.inf
        return np.where(q <= top, h[np.minimum(q, top)], np.maximum(h[top], q * rate))

    def times(self, query: np.ndarray, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(floor of the passes prefilling ``query`` tokens on an empty cache, floor of a step
        over a ``prompt`` cache), each with the step overhead, seconds.  # ([N], [N])"""
        query = np.asarray(query, dtype=np.int64)
        prompt = np.asarray(prompt, dtype=np.int64)
        body_p = self.body(query, np.zeros_like(query))  # [N]
        whole = self.split(query, True) + body_p
        gpu = self.split(query, False) + body_p
        prefill = np.maximum(whole, self.fixed + self.overhead + np.maximum(gpu, self.floor))
        step_gpu = float(self.g[1]) + self.a0 + self.body(np.ones_like(prompt), prompt)
        step = self.fixed + np.maximum(step_gpu, self.floor) + self.overhead
        return prefill * (1.0 - SLACK), step * (1.0 - SLACK)


def split_floor(g: np.ndarray, top: int) -> np.ndarray:
    """h[q] = min over splits of q into parts 1 ≤ x_j ≤ Q_max of Σ g[x_j] (h[0] = 0): the
    shortest path h[q] = min_x h[q − x] + g[x].  # [top + 1]"""
    q_max = g.shape[0] - 1
    h = np.zeros(top + 1)
    for q in range(1, top + 1):
        w = min(q, q_max)
        h[q] = np.min(h[q - w:q][::-1] + g[1:w + 1])
    return h


def suffix_min(p: np.ndarray) -> np.ndarray:
    """g[x] = min_{Q ≥ x} p[Q].  # [Q_max + 1]"""
    return np.minimum.accumulate(p[::-1])[::-1].copy()


def per_token_floor(layers: np.ndarray, allreduce: np.ndarray, head: np.ndarray) -> np.ndarray:
    """g of the module docstring from the tables # [Q_max + 1] each: the suffix minimum of
    L[Q] + C[Q] + min_{1 ≤ r ≤ Q} H[r] (g[0] = g[1]: no pass carries no token).
    # [Q_max + 1]"""
    head_min = np.minimum.accumulate(head[1:])  # [Q_max] least head at 1..Q rows
    p = np.empty(layers.shape[0])
    p[1:] = layers[1:] + allreduce[1:] + head_min
    p[0] = np.inf
    g = suffix_min(p)
    g[0] = g[1] if g.shape[0] > 1 else 0.0
    return g


def law_body(law) -> Callable:
    """(q, c) -> the AttentionLaw's body (its FLOPs and KV-byte terms, without the per-call
    and per-request constants) of one request of q tokens over c cached, vectorised.
    # [N] -> [N]"""
    def body(q: np.ndarray, c: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        compute = law.flops * (q * c + 0.5 * (q * q + q)) / law.flops_rate
        memory = law.kv * (c + 2.0 * q) / law.kv_rate
        return np.maximum(compute, memory) if law.overlap else compute + memory
    return body


def check_table(table) -> bool:
    """Whether the module docstring's proof holds for ``table``: finite nonnegative entries,
    an attention law with nonnegative coefficients and positive finite rates (a grid law,
    simulator.cost.tabulated.grid_attention, is bounded by its cells instead: table_floor)."""
    law = table.attention
    arrays = (table.layers, table.allreduce, table.head,
              *(() if getattr(table, "sampler", None) is None else (table.sampler,)))
    scalars = (law.flops, law.kv, law.floor, law.per_request, table.fixed, table.floor)
    return (all(bool(np.all(np.isfinite(a)) and np.all(a >= 0)) for a in arrays)
            and all(math.isfinite(x) and x >= 0 for x in scalars)
            and all(math.isfinite(x) and x > 0 for x in (law.flops_rate, law.kv_rate)))


def table_floor(table, overhead: float, q_max: int, longest: int) -> PassFloor | None:
    """The :class:`PassFloor` of a PassTable (simulator.cost.tabulated) over passes of at
    most ``q_max`` tokens, or None where :func:`check_table` fails."""
    if table is None or table.max_tokens < q_max or not check_table(table):
        return None
    law = table.attention
    g = per_token_floor(table.layers[:q_max + 1], table.allreduce[:q_max + 1],
                        table.head[:q_max + 1])
    a0, body = float(law.floor + law.per_request), law_body(law)
    if getattr(law, "grid", ()):  # aic's grid law: its least value, no per-request body
        from specbatch.simulator.cost.tabulated import grid_least

        a0 = grid_least(law.grid)
        if not (math.isfinite(a0) and a0 >= 0.0):
            return None

        def body(q, c):
            return np.zeros(np.broadcast(np.asarray(q), np.asarray(c)).shape)
    elif getattr(law, "regimes", ()):  # a regime law: its least value, no body either
        from specbatch.simulator.cost.tabulated import regime_least

        a0 = regime_least(law.regimes)
        if not (math.isfinite(a0) and a0 >= 0.0):
            return None

        def body(q, c):
            return np.zeros(np.broadcast(np.asarray(q), np.asarray(c)).shape)
    return PassFloor(g=g, a0=a0, fixed=float(table.fixed), floor=float(table.floor),
                     overhead=float(overhead), body=body, longest=int(longest))


def window_floor(role, overhead: float, q_max: int, longest: int) -> PassFloor | None:
    """The :class:`PassFloor` of a calibrated role with sliding-window layers (module
    docstring): the per-token tables of simulator.cost.measured.calibrated_table.role_table
    (they do not read the window), the attention priced by ``role`` at one request's window
    sums (simulator.cost.analytic.window)."""
    from specbatch.simulator.cost.analytic.window import window_sums
    from specbatch.simulator.cost.measured.calibrated_table import role_table

    table = role_table(role, q_max)
    if not check_table(table):  # pragma: no cover - calibrated parts are positive
        return None
    w = role.consts.window

    def body(q: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.array([role.attention(float(a), float(b), float(a * b), float(a * a),
                                        window_sums([a], [b], w))
                         for a, b in zip(np.asarray(q).tolist(), np.asarray(c).tolist())])

    g = per_token_floor(table.layers, table.allreduce, table.head)
    fixed, floor = role.launch
    return PassFloor(g=g, a0=0.0, fixed=float(fixed), floor=float(floor),
                     overhead=float(overhead), body=body, longest=int(longest))


def target_floor(base, overhead: float, q_max: int, longest: int) -> PassFloor | None:
    """The target's :class:`PassFloor` under cost model ``base`` (the innermost model, its
    wrappers' per-step ``overhead`` given), or None where none is proven: a model that is not
    tabulated (simulator.engine.v1.pass_tables.tabulated), passes past the compiled loop's
    largest table, a target without a PassTable (the window floors aside), a table
    :func:`check_table` refuses."""
    from specbatch.simulator.engine.v1.pass_tables import MAX_TABLE_TOKENS, tabulated

    if not tabulated(base) or q_max > MAX_TABLE_TOKENS or overhead < 0:
        return None
    if base.table_gap("target") is None:
        return table_floor(base.pass_table("target", q_max), overhead, q_max, longest)
    role = (getattr(base, "roles", None) or {}).get("target")
    if windowed_role(role):
        return window_floor(role, overhead, q_max, longest)
    if aic_windowed_role(role):
        return aic_window_floor(role, overhead, q_max, longest)
    return None


def aic_window_floor(role, overhead: float, q_max: int, longest: int) -> PassFloor | None:
    """The :class:`PassFloor` of an aic role with sliding-window layers (module docstring):
    its unwindowed PassTable's floor, whose attention term is the grid law's least value."""
    table = role.pass_table(q_max)
    if not getattr(table.attention, "grid", ()):  # pragma: no cover - aic laws are grids
        return None
    return table_floor(table, overhead, q_max, longest)


def windowed_role(role) -> bool:
    """Whether ``role`` is a calibrated pricer whose only gap is its sliding-window layers."""
    from specbatch.simulator.cost.measured.calibrated_role import RolePricer

    return type(role) is RolePricer and bool(role.consts.sliding_layers)


def aic_windowed_role(role) -> bool:
    """Whether ``role`` is an aic pricer whose only gap is its sliding-window layers."""
    from specbatch.simulator.cost.measured.aic_pricer import AicPricer

    return type(role) is AicPricer and bool(role.shape.sliding_layers)
