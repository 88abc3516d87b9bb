"""``vllm-adaptive``: vLLM's adaptive verification, TETRIS with a cost-aware batch budget.

vLLM (``SpeculativeConfig.enable_adaptive_verification``, PR vllm-project/vllm#47808,
``vllm/v1/worker/gpu/spec_decode/adaptive_verification.py`` at commit
057929c3632766486896597cf27e1425fd838e63) verifies, of the K drafts every request drafted, the
best B of the whole batch:

- **B, on the CPU** (``AdaptiveVerificationManager.get_num_tokens``): every request's survival
  ``S_{i,j} = Π_{l≤j} c_{i,l}`` from the *previous* step's confidences (the double-buffered D2H
  copy of ``record_confidences``; a newly added request's row is all ones, ``add_request``),
  sorted over the batch's scheduled draft slots; B* = the first argmax over B of
  ``(N + Σ_{j≤B} S_(j)) / (D(N) + V(T + B))`` (THEORY.md §7), N the sampling requests, T the
  tokens besides drafts, D and V the profiled tables (:mod:`simulator.policies.adaptive_tables`).
- **The split, on the GPU** (``_assign_draft_token_budget``, called by ``reallocate_drafts``):
  the B slots of highest survival under the *current* confidences, each request capped at its
  scheduled drafts (survival only falls along a request, so the winners are prefixes).

Here N = T = n, the decoding requests (specbatch's view holds only them; prefill chunks the
engine co-schedules are not in T); the logits-chunk cap ``max_total_logits`` is not modelled;
ties go to the earlier position, then the earlier request (torch.topk leaves them unspecified).
The confidence EMA of the PR's description (``adaptive_verification_ema_alpha``) is not in the
cited commit (``record_confidences`` publishes raw confidences), so it is not modelled.

Knobs switching each shortcut off (THEORY.md §7's three sources of the gap):

- ``adaptive_confidences = "fresh"``: B from the current step's survival, not the last one's;
- ``adaptive_cost_tables = "exact"``: the simulator's own step time at the step's real shape
  for every B (draft passes, the target pass with the top-B queries and the real KV, overhead,
  rejection sampler), not the profiled, monotone, stepped tables at the profile context;
- ``predictor = learned | logistic``: survival from the acceptance model fitted on the
  calibration split (simulator.replay.accept_predictor), not the raw confidence;
- ``adaptive_survival = "truth"``: the drafted path's exact ``P_{i,j}`` (TV's
  ``Π min(1, r_l)``): with fresh, exact tables this is the per-step optimum (a bound, TV only).

Reads ``conf`` (or the predictor's signals; ``accept_tv`` under truth), ``kv`` and ``cost``.
Ignores C; drafts K = ``num_speculative_tokens`` for every request, as vLLM does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.defaults import V1_DEFAULT_BATCHED_TOKENS
from specbatch.simulator.policies.adaptive_tables import CostTables, build_tables
from specbatch.simulator.policies.papers import Tetris
from specbatch.simulator.policies.view import StepView
from specbatch.theory.allocate.budget import monotone_topc

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig


def budget_scan(scores: np.ndarray, n: int, cost: np.ndarray) -> int:
    """B* = the first argmax of ``(n + Σ_{j≤B} scores_j) / cost_B`` over B = 0..m.

    scores: # [m] survivals sorted non-increasing; cost: # [m + 1] the step's cost of each B
    """
    tokens = n + np.concatenate(([0.0], np.cumsum(scores)))  # [m + 1]
    return int(np.argmax(tokens / cost))


def ranked_slots(survival: np.ndarray, caps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The batch's draft slots by survival, best first (ties: earlier position, then earlier
    request), slots past a request's cap left out.  survival # [n, K], caps # [n]
    returns (rows, positions) # [m] each, m = Σ caps"""
    n, depth = survival.shape
    j_major = survival.T.ravel()  # [K * n], j-major: ties in (j, row) order
    valid = (np.arange(depth)[:, None] < caps[None, :]).ravel()
    order = np.flatnonzero(valid)[np.argsort(-j_major[valid], kind="stable")]
    return order % n, order // n


def split_budget(survival: np.ndarray, caps: np.ndarray, budget: int) -> np.ndarray:
    """Verified drafts per request: the top-``budget`` slots by survival, each row capped.
    survival # [n, K] non-increasing rows; caps # [n]; returns # [n] int64"""
    depth = survival.shape[1]
    masked = np.where(np.arange(depth)[None, :] < caps[:, None], survival, -1.0)
    return monotone_topc(masked, min(int(budget), int(caps.sum())))


class VllmAdaptive(Tetris):
    """``vllm-adaptive``: vLLM's adaptive verification (module docstring)."""

    name = "vllm-adaptive"
    budgeted = False

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        return int(config.num_speculative_tokens)

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.speculates = self.k > 0
        self.stale = config.adaptive_confidences == "stale"
        self.exact = config.adaptive_cost_tables == "exact"
        self.truth = config.adaptive_survival == "truth"
        if self.truth and not self.rule_row.additive:
            raise SpecbatchError("policy vllm-adaptive: adaptive_survival = truth is the TV "
                                 "bound (top-B is not optimal under BV, THEORY.md §7)")
        self.max_reqs = int(config.max_num_seqs)
        self.max_tokens = max(int(config.max_num_batched_tokens or V1_DEFAULT_BATCHED_TOKENS),
                              self.max_reqs * (self.k + 1))
        self.graph_sizes = config.cuda_graph_sizes
        self.context = int(config.adaptive_profile_context_len)
        self.tables: CostTables | None = None
        self.sampler: Any = None
        self.previous: dict[int, np.ndarray] = {}  # next trace row -> that request's survival
        self.rows: np.ndarray | None = None
        self.last: np.ndarray | None = None
        #: B* of every step (inspection and tests)
        self.budgets: list[int] = []

    @property
    def reads(self) -> tuple[str, ...]:
        """The true survival ``accept_tv`` (``adaptive_survival = truth``) or TETRIS's
        signals, and ``kv``, ``cost`` (the step-time tables)."""
        return (("accept_tv",) if self.truth else super().reads) + ("kv", "cost")

    def price_verification(self, sampler: Any) -> None:
        """The rejection sampler's cost (exact tables add it to every B's step time)."""
        self.sampler = sampler

    def survival(self, view: StepView) -> np.ndarray:
        """The current step's S_{i,j}.  # [n, depth]"""
        return view.accept_tv if self.truth else self.estimates(view)

    def stale_survival(self, view: StepView, current: np.ndarray) -> np.ndarray:
        """Each request's survival of its previous step (all ones for a request new to the
        batch, as ``add_request`` leaves it; a view without trace rows, e.g. gathered
        signals, carries no request identity, so every request counts as new).  # [n, depth]"""
        rows = view.rows
        ones = np.ones(current.shape[1])
        if rows is None:
            return np.ones_like(current)
        return np.array([self.previous.get(int(r), ones) for r in rows]).reshape(current.shape)

    def caps(self, view: StepView) -> np.ndarray:
        """Scheduled drafts per request: K, or the drafter's proposed count.  # [n]"""
        full = np.full(view.n, self.depth, dtype=np.int64)
        proposed = view.proposed
        return full if proposed is None else np.minimum(full, proposed)

    def table_cost(self, n: int, m: int, cost: Any) -> np.ndarray:
        """D(n) + V(n + B) for B = 0..m from the profiled tables (ms).  # [m + 1]"""
        if self.tables is None:
            self.tables = build_tables(cost, self.max_reqs, self.depth, self.max_tokens,
                                       self.graph_sizes, self.context)
        draft = self.tables.draft[min(n, self.tables.draft.shape[0] - 1)]
        return draft + self.tables.verify_at(np.arange(n, n + m + 1))

    def exact_cost(self, view: StepView, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The simulator's step time (s) for B = 0..m, the B tokens given to the first B
        ranked slots ``rows``/``positions`` # [m].  # [m + 1]"""
        return exact_step_costs(view.cost, view.kv, self.depth, rows, positions, self.sampler)

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        current = self.survival(view)  # [n, depth] non-increasing rows
        sizing = self.stale_survival(view, current) if self.stale else current
        caps = self.caps(view)
        rows, positions = ranked_slots(sizing, caps)
        scores = sizing[rows, positions]
        if self.exact:
            cost = self.exact_cost(view, rows, positions)
        else:
            cost = self.table_cost(view.n, scores.shape[0], view.cost)
        budget = budget_scan(scores, view.n, cost)
        self.budgets.append(budget)
        self.rows, self.last = view.rows, current
        verified = split_budget(current, caps, budget)
        return np.full(view.n, self.depth, dtype=np.int64), verified

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        """Remember each request's survival under the trace row it decodes next (its row
        moves by the τ + 1 tokens it emits). A request whose replay wraps past its recorded
        output lands on another row and counts as new; two simulated requests replaying the
        same trace row share its entry. Under a token budget the step may run only the first
        ``len(accepted)`` decided requests (simulator.engine.v1.step ``cut_plan``): the others did
        not advance, so they keep the survival they were sized with, under the same row."""
        if not self.stale or self.rows is None:
            return
        ran = accepted.shape[0]  # the first `ran` decided requests were verified
        following = self.rows[:ran] + accepted + 1
        kept = {int(r): self.previous[int(r)] for r in self.rows[ran:]
                if int(r) in self.previous}
        kept.update({int(r): row for r, row in zip(following, self.last[:ran])})
        self.previous = kept


def exact_step_costs(cost: Any, kv: np.ndarray, depth: int, rows: np.ndarray,
                     positions: np.ndarray, sampler: Any = None) -> np.ndarray:
    """Seconds of one decode step for B = 0..m: ``depth`` draft passes over the n requests,
    the target pass where the first B ranked slots (``rows``, ``positions`` # [m]) are verified
    (query s_i + 1, KV ``kv`` # [n]), the step overhead and the rejection sampler.
    returns # [m + 1]"""
    n, m = kv.shape[0], rows.shape[0]
    ones = np.ones(n, dtype=np.int64)
    fixed = float(cost.overhead) + sum(float(cost.step_time("draft", ones, kv + d))
                                       for d in range(depth))
    skv = float(kv.sum())
    sqkv = skv + np.concatenate(([0.0], np.cumsum(kv[rows], dtype=np.float64)))  # [m + 1]
    sqq = n + np.concatenate(([0.0], np.cumsum(2.0 * positions + 3.0)))  # (j+2)² − (j+1)²
    # a sliding-window model is priced from arrays (simulator.cost.analytic.window)
    sums = None if getattr(cost, "windowed", False) else getattr(cost, "time_from_sums", None)
    verified = np.zeros(n, dtype=np.int64)
    out = np.empty(m + 1)
    for b in range(m + 1):
        if b:
            verified[rows[b - 1]] += 1
        if sums is not None:
            target = sums("target", n, float(n + b), skv, float(sqkv[b]), float(sqq[b]))
        else:
            target = cost.step_time("target", verified + 1, kv)
        extra = sampler.seconds(n, b, verified) if sampler is not None else 0.0
        out[b] = fixed + float(target) + float(extra)
    return out
