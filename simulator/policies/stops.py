"""Per-request early stopping of the draft from signals known before verification.

Each request drafts up to K = k + e tokens and stops on its own rule; the target verifies
what was kept. Both rules are row-wise, so their lengths are whole-trace tables built once per
run (:meth:`simulator.policies.view.StepView.row_table`).

- ``specdec++`` (:class:`SpecDecPP`): SpecDec++ (Huang, Guo, Wang, "SpecDec++: Boosting
  Speculative Decoding via Adaptive Candidate Lengths", arXiv 2405.19715, §3-4): stop once the
  predicted probability that at least one drafted token is rejected exceeds h.
- ``entropy-stop`` (:class:`EntropyStop`): the entropy rules, AdaEDL (Agrawal, Jeon, Lee,
  arXiv 2410.18351) and SVIP (Zhang et al., EMNLP 2025, arXiv 2411.18462): stop before the
  first token whose draft distribution's entropy is too high.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.simulator.policies.base import Policy
from specbatch.simulator.policies.calibration import confidence_acceptance
from specbatch.simulator.policies.view import StepView

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig


def leading(ok: np.ndarray) -> np.ndarray:
    """Per row, the count of leading True entries of ``ok`` # [rows, depth].  # [rows] int64"""
    depth = ok.shape[1]
    return np.where(ok.all(axis=1), depth, np.argmin(ok, axis=1)).astype(np.int64)


class SpecDecPP(Policy):
    """``specdec++``: draft token i, predict its acceptance â_i, and stop after the first token
    at which ``P(at least one rejection) = 1 − Π_{j≤i} â_j > h`` (``specdec_threshold``); that
    token is kept (it is already drafted), so a request drafts and verifies
    ``min(first such i, K)`` tokens.

    SpecDec++ trains an acceptance-prediction head on the draft's hidden states; a trace holds
    the draft's signals, not its hidden states, so â_i here is the draft confidence calibrated
    on the calibration split (:func:`simulator.policies.calibration.confidence_acceptance`: the mean
    per-token acceptance ``min(1, r)`` of calibration tokens in the same confidence bin).
    Reads: ``conf`` and the calibration split. Ignores the budget.
    """

    name = "specdec++"
    budgeted = False
    reads = ("conf",)

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.threshold = float(config.specdec_threshold)
        self.edges: np.ndarray | None = None
        self.rate: np.ndarray | None = None

    def calibrate(self, trace: Any) -> None:
        """The confidence-to-acceptance table from the calibration requests."""
        self.edges, self.rate = confidence_acceptance(trace, self.depth)

    def lengths(self, conf: np.ndarray) -> np.ndarray:
        """Kept tokens of rows with confidences ``conf`` # [rows, depth].  # [rows] int64"""
        if self.edges is None:
            raise RuntimeError("specdec++: calibrate() was not called")
        accept = self.rate[np.searchsorted(self.edges, conf, side="right")]
        rejected = 1.0 - np.cumprod(accept, axis=1) > self.threshold  # non-decreasing
        return np.minimum(leading(~rejected) + 1, conf.shape[1])

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        key = ("specdec++", self.threshold, tuple(self.edges.tolist()), tuple(self.rate.tolist()))
        s = view.row_table(key, self.lengths, "conf")
        return s, s


class EntropyStop(Policy):
    """``entropy-stop``: draft while the draft distribution's entropy ``H_i`` (nats) stays at or
    below θ (``entropy_threshold``); the pass that saw ``H_i > θ`` ran (it costs a draft pass)
    but its token is neither proposed nor verified.

    Both published entropy rules reduce to this threshold, since each compares a monotone
    function of the current position's entropy with a constant: AdaEDL stops when its lower
    bound on the token's acceptance probability, ``1 − sqrt(γ H_i)``, falls below λ, i.e. when
    ``H_i > (1 − λ)² / γ`` (the paper uses γ = 0.2; its run-time adaptation of λ from observed
    acceptance is not modelled: pass the λ it settles at); SVIP stops when its entropy-based
    bound on acceptance crosses its threshold, again a threshold on ``H_i``. The default
    θ = 2.45 nats is AdaEDL's bound at γ = 0.2, λ = 0.3. Reads: ``entropy``. Ignores the
    budget.
    """

    name = "entropy-stop"
    budgeted = False
    reads = ("entropy",)

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.threshold = float(config.entropy_threshold)

    def lengths(self, entropy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(drafted, kept) of rows with entropies ``entropy`` # [rows, depth]."""
        kept = leading(entropy <= self.threshold)
        return np.minimum(kept + 1, entropy.shape[1]), kept

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        return view.row_table(("entropy-stop", self.threshold), self.lengths, "entropy")
