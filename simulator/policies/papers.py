"""The project's own draft/verify policies: ``ar``, ``fixed``, ``dsd``, ``tetris``,
``threshold``, ``oracle`` and ``hindsight``.

Each class documents which signals of the :class:`~simulator.policies.view.StepView` it reads
*before* verification; only ``oracle`` and ``hindsight`` read the truth (they are bounds). Budget:
``view.budget`` is C (``config.budget``, default ``k × n``, THEORY.md §5). ``tetris`` and ``oracle``
allocate exactly under C (``budgeted``); ``fixed``, ``dsd``, ``threshold`` and ``hindsight`` choose
per-request lengths and ignore C (documented below). The registry (simulator.policies.registry)
names them; the serving engines' policies live in simulator.policies.engines and
simulator.policies.stops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.base import Policy
from specbatch.simulator.policies.view import StepView
from specbatch.simulator.replay.chain import sample_tau
from specbatch.theory.allocate.budget import (
    allocate,
    monotone_optimum,
    monotone_topc,
    optimal_tree_gains,
    prefix_gains,
)

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.cost.verify_cost import VerifyCost


class AutoRegressive(Policy):
    """``ar``: no speculation; one target token per request per step. Reads nothing."""

    name = "ar"
    budgeted = False  # verifies nothing; C is irrelevant
    speculates = False

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        return 0

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        zero = np.zeros(view.n, dtype=np.int64)
        return zero, zero


class Fixed(Policy):
    """``fixed``: standard SD, every request drafts and verifies k tokens. Reads nothing.

    Ignores the budget (its verified total is k·n, equal to the default C).
    """

    name = "fixed"
    budgeted = False

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        return int(config.num_speculative_tokens)

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        s = np.full(view.n, self.k, dtype=np.int64)
        return s, s


class DynamicSD(Policy):
    """``dsd``: the goodput policy of Liu et al. 2024 (SmartSpec) as in THEORY.md §5.

    One k for the whole batch, re-planned every ``dsd_interval`` steps by scanning k = 0..min(6,
    trace K, ``dsd_max_k``) for ``goodput(k) = n (1 − α^{k+1}) / (1 − α) / (T_draft(k) + T_target(k)
    + T_verify(k) + T_overhead)``, stopping at the first drop, k = 0 favoured ×1.1. Step times come
    from the active cost model on the current batch's KV lengths; ``T_verify(k)`` is the rejection
    sampler's seconds for n requests verifying k each, the term the engine adds to every decode step
    (simulator.cost.verify_cost; handed over by :meth:`price_verification`, 0 s without it or under
    ``verify_cost = "none"``).

    α is the per-token acceptance rate of the i.i.d. model behind that formula, an EMA
    ``0.85 α + 0.15 α̂`` started at 0.7. Each step's α̂ is the maximum-likelihood estimate
    under that model: a request verifying s tokens accepts τ ~ min(Geometric, s), so
    α̂ = Σ τ / (Σ τ + #{τ < s}) (accepted tokens over accepted tokens plus rejections; the
    ratio accepted / verified would understate α whenever s > 1).

    Keeping α alive at k = 0: with nothing verified α never updates, and a plan of k = 0
    would stand for the rest of the run. So when a plan picks k = 0, the first step of the
    interval probes with k = 1 (one draft pass per ``dsd_interval`` steps) and feeds α̂;
    the other steps run at k = 0. Reads: ``kv``, ``cost`` and past acceptance. Ignores the
    budget.
    """

    name = "dsd"
    budgeted = False
    reads = ("kv", "cost")
    #: The largest window the goodput scan considers.
    MAX_K = 6
    #: The acceptance-rate estimate before any step is observed.
    INITIAL_ALPHA = 0.7

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        cap = config.dsd_max_k  # the user's k: the window's upper bound
        self.k_max = min(self.MAX_K, int(trace_k), self.MAX_K if cap is None else int(cap))
        self.depth = self.k_max
        self.k_now = min(self.k, self.k_max)
        self.interval = int(config.dsd_interval)
        self.alpha = self.INITIAL_ALPHA
        self.steps = 0
        # the run's simulator.cost.verify_cost.VerifyCost, None: 0 s
        self.sampler: VerifyCost | None = None

    def price_verification(self, sampler: VerifyCost | None) -> None:
        """Plan with ``sampler`` (a :class:`simulator.cost.verify_cost.VerifyCost`, or None for an
        unpriced sampler): the verification cost the engine charges this run, handed over
        before it starts (:func:`simulator.run.attach_verify_cost`)."""
        self.sampler = sampler

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        """The starting window min(k, 6, dsd_max_k) must be in the trace; later plans scan
        k = 0..min(6, trace K, dsd_max_k), so a deeper trace only widens the scan."""
        cap = config.dsd_max_k
        return min(int(config.num_speculative_tokens), cls.MAX_K,
                   cls.MAX_K if cap is None else int(cap))

    def goodput(self, k: int, kv: np.ndarray, cost: CostModel) -> float:
        """Expected tokens per second of window k on a batch with KV lengths ``kv`` # [n]."""
        n = kv.shape[0]
        a = self.alpha
        tokens = n * (k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a))
        ones = np.ones(n, dtype=np.int64)
        t = cost.overhead + cost.step_time("target", ones * (k + 1), kv)
        for d in range(k):
            t += cost.step_time("draft", ones, kv + d)
        if self.sampler is not None:
            t += self.sampler.seconds(n, n * k, ones * k)
        return tokens / t if t > 0 else float("inf")

    def plan(self, kv: np.ndarray, cost: CostModel) -> int:
        """The goodput scan (class docstring).  kv # [n]"""
        best_k, best = 0, -np.inf
        for k in range(self.k_max + 1):
            g = self.goodput(k, kv, cost) * (1.1 if k == 0 else 1.0)
            if g < best:
                break
            best_k, best = k, g
        return best_k

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        k = self.k_now
        if self.steps % self.interval == 0 and view.cost is not None:
            self.k_now = k = self.plan(view.kv, view.cost)
            if k == 0 and self.k_max >= 1:
                k = 1  # the probe (class docstring)
        self.steps += 1
        s = np.full(view.n, k, dtype=np.int64)
        return s, s

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        """Update α with this step's α̂ = Σ τ / (Σ τ + #{τ < s}).  verified, accepted # [n]"""
        tried = verified > 0
        successes = int(accepted[tried].sum())
        trials = successes + int((accepted[tried] < verified[tried]).sum())
        if trials > 0:
            self.alpha = 0.85 * self.alpha + 0.15 * successes / trials


class Tetris(Policy):
    """``tetris``: every request drafts K = k + e tokens; verify the C-best prefixes.

    Estimates P_{i,j} by the cumulative draft confidence ``Π_{l≤j} min(conf_l, 1)`` (the
    official code's surrogate, ``StepView.cum_conf``), then allocates under C: greedy top-C for TV
    (:func:`theory.allocate.budget.monotone_topc`, bit-identical to
    :func:`theory.allocate.budget.greedy_topc` on these non-increasing rows); for BV the exact
    optimum of theory's DP problem on these estimates, which
    :func:`theory.allocate.budget.monotone_optimum` computes in O(n·K) — the same allocation as
    :func:`theory.allocate.budget.optimal_dp` up to ties (parity tests).
    Reads: ``conf`` (known before verification). With C = 0 nothing is drafted, so the run
    does the work of autoregressive decoding.

    ``config.predictor = "learned" | "logistic"`` replaces the surrogate by a model of each token's
    acceptance fitted on the calibration_split requests (:meth:`fit`,
    simulator.replay.accept_predictor); its estimate of P_{i,j} is non-increasing too, so the
    allocators are the same. Reads then ``conf``, ``entropy`` and ``top1``; not a live policy.
    """

    name = "tetris"

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        # C = budget, or k per running request when unset: C = 0 never drafts (nor prefills)
        self.speculates = (self.k if config.budget is None else int(config.budget)) > 0
        self.kind = config.predictor
        self.predictor = None  # the fitted AcceptancePredictor (calibrate)

    @property
    def reads(self) -> tuple[str, ...]:
        """``conf``; a fitted predictor's features ``entropy`` and ``top1`` too."""
        return ("conf",) if self.kind == "confidence" else ("conf", "entropy", "top1")

    def calibrate(self, trace: Any) -> None:
        """Fit ``config.predictor`` on the calibration requests ``trace`` (a run calls it only
        with a fitted predictor: the catalogue row's ``predictor``,
        simulator.policies.calibration); the confidence surrogate has nothing to fit."""
        if self.kind == "confidence":
            return
        from specbatch.simulator.replay.accept_predictor import fit_predictor

        self.predictor = fit_predictor(trace, self.kind)

    def estimates(self, view: StepView) -> np.ndarray:
        """P_{i,j} estimates # [n, depth]: the cumulative confidence, or the fitted
        predictor's running product (built once per run for every trace row)."""
        if self.kind == "confidence":
            return view.cum_conf
        if self.predictor is None:
            raise SpecbatchError(f"policy tetris: predictor {self.kind} needs calibration "
                                 "requests to fit on (set calibration_split > 0)")
        key = ("predictor", self.predictor.key)
        return view.row_table(key, self.predictor.reach, "conf", "entropy", "top1")

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        values = self.estimates(view)  # [n, depth] non-increasing rows
        if self.rule_row.additive:  # TV: E[τ | X^s] is the prefix sum, top-C is optimal
            s = monotone_topc(values, view.budget)  # = greedy_topc (parity test)
        else:
            s = monotone_optimum(values, view.budget)  # = optimal_dp's optimum (parity test)
        depth = self.depth if view.budget > 0 else 0  # C = 0: nothing to verify, draft nothing
        return np.full(view.n, depth, dtype=np.int64), s


class Threshold(Policy):
    """``threshold``: each request drafts until its confidence falls below a threshold
    (SpecDec++ / AdaEDL style), at most K = k + e tokens, and verifies what it kept.

    ``cumulative`` mode keeps token j while ``Π_{l≤j} conf_l ≥ threshold``, ``per_token``
    while ``conf_j ≥ threshold``. The token that fails the test was drafted (it costs a draft
    pass) but is not verified. Reads: ``conf``. Ignores the budget.
    """

    name = "threshold"
    budgeted = False
    reads = ("conf",)

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.threshold = float(config.threshold)
        self.cumulative = config.threshold_mode == "cumulative"

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        key = ("threshold", self.threshold, self.cumulative)
        return view.row_table(key, self.lengths, "conf")

    def lengths(self, conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(drafted, kept) of rows with confidences ``conf`` # [rows, depth]; each depends on
        its row alone.  returns # [rows] int64 each"""
        depth = conf.shape[1]
        if self.cumulative:
            conf = np.cumprod(conf, axis=1)
        ok = conf >= self.threshold
        kept = np.where(ok.all(axis=1), depth, np.argmin(ok, axis=1)).astype(np.int64)
        return np.minimum(kept + 1, depth), kept


class Oracle(Policy):
    """``oracle``: knows the drafted path's true statistics and allocates the budget C to
    maximise the expected accepted tokens ``Σ_i E[τ_i | X^{s_i}]`` exactly.

    TV: ``E[τ | X^s] = Σ_{j≤s} Π_{l≤j} min(1, r_l)`` is additive with non-increasing terms,
    so greedy top-C is optimal. BV: ``E[τ | X^s] = s − (1 − p_s) T_s`` is neither additive nor
    monotone in s (theory.allocate.budget.prefix_gains), so the exact optimum over the per-request
    gain tables is used: :func:`theory.allocate.budget.optimal_tree_gains` (the value of the
    reference DP :func:`theory.allocate.budget.optimal_dp_gains`, ~5-10x faster at n = 64; ties:
    smaller total, then smaller left-subtree shares). Every request drafts K = k + e.
    Reads: ``accept_tv`` (TV) or ``q``, ``pt``, ``z`` (BV) of the drafted path (the truth,
    not the coins).
    """

    name = "oracle"
    reads = ("accept_tv", "q", "pt", "z")

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        if self.rule_row.additive:
            s = allocate(view.accept_tv, view.budget, self.rule)
        else:
            gains = prefix_gains(view.q, view.pt, view.z, self.rule)  # [n, depth + 1]
            s = optimal_tree_gains(gains, view.budget)
        return np.full(view.n, self.depth, dtype=np.int64), s


class Hindsight(Policy):
    """``hindsight``: knows the coins and verifies, per request, the prefix that accepts the
    most tokens, so VSR = 1. An upper bound on per-step accepted tokens, not a realisable policy.

    With draft length γ = s the accepted length is ``τ^{(s)} = max{i ≤ s : η_i < h_i^{(s)}}``.
    TV: ``τ^{(s)} = min(s, τ_K)``, maximised by s = τ_K. BV: the last threshold is
    ``h_s^{(s)} = p_s ≥ h_s`` (Z_{s+1} ≤ p_s), so a *shorter* draft can accept more than the
    full one; ``max_s τ^{(s)} = max{m ≤ K : η_m < p_m}`` and verifying exactly that m accepts
    all m tokens. (Verifying τ_K, the full-depth outcome, would not be an upper bound.)
    Reads: ``q``, ``pt``, ``z`` (TV) or ``p`` (BV), and ``eta``. Ignores the budget.
    """

    name = "hindsight"
    budgeted = False
    reads = ("q", "pt", "z", "p", "eta")

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        full = np.full(view.n, self.depth, dtype=np.int64)
        if self.rule_row.scan == "leading":  # TV: τ^(s) = min(s, τ_K)
            return full, sample_tau(view.q, view.pt, view.z, full, view.eta, self.rule)
        ok = view.eta[:, : self.depth] < view.p  # [n, depth]
        best = np.where(ok.any(axis=1), self.depth - np.argmax(ok[:, ::-1], axis=1), 0)
        return full, best.astype(np.int64)

