"""Acceptance models fitted from a trace, replayed in place of the trace's own probabilities.

Other simulators, and vLLM's synthetic speculation mode, model acceptance without a trace:
one constant rate α, or one rate per draft position (vLLM's ``synthetic_acceptance_rates``).
``config.acceptance`` replays such a model fitted from the trace, so a run can say how far
it moves throughput, latency and the ranking of policies from trace replay
(analysis.report.acceptance_vs_replay):

- ``trace``: every row's recorded probabilities (the default; the trace unchanged);
- ``per-position``: ``α_j``, the conditional acceptance of draft token j given tokens < j
  were accepted, pooled over rows: ``α_j = Σ_rows P(τ ≥ j) / Σ_rows P(τ ≥ j − 1)`` with TV's
  ``P(τ ≥ j) = Π_{l≤j} min(1, r_l)`` (THEORY.md §2). The product ``Π_{l≤j} α_l`` telescopes
  to the trace's mean ``P(τ ≥ j)``, so a fixed window's mean accepted length matches the
  trace's; what the model loses is which rows (and which requests and draft signals) accept;
- ``constant``: one ``α = Σ_j Σ_rows P(τ ≥ j) / Σ_j Σ_rows P(τ ≥ j − 1)`` over j = 1..K, the
  maximum-likelihood rate of i.i.d. acceptance (the estimator DSD uses online).

The model is replayed by rewriting only the trace's acceptance columns: a one-hot draft
(``q = 1``) with target probability ``pt_j = α_j`` of the drafted token, so ``min(1, r_j) =
α_j`` on every row, and ``Z_{j+1} = p_j (1 − pt_{j+1})`` (THEORY.md §3's one-hot residual).
The verifier, its common random numbers (the same uniforms η at the same request and
position), the oracle and hindsight bounds then all read the model, unchanged. The draft
signals (confidence, entropy, top-1) stay the trace's: under a model they no longer say
anything about acceptance, which is the point. With ``q = 1`` block verification equals
token verification exactly (THEORY.md §3), as it would for any model that only knows
per-token rates. Filler slots of n-gram traces (beyond ``proposed``) stay rejected and are
left out of the fit. A model trace is a sampling trace whatever the recorded temperature (a
rate strictly between 0 and 1 is no greedy outcome): its meta says temperature 1 and keeps the
recorded one as ``acceptance.trace_temperature``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.simulator.replay.accept_predictor import real_slots, token_acceptance
from specbatch.traces.format.trace import make_trace

if TYPE_CHECKING:
    from specbatch.traces.format.trace import Trace

#: ``config.acceptance`` values.
ACCEPTANCE_MODELS = ("trace", "constant", "per-position")


def reach_sums(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """``(Σ_rows P(τ ≥ j), Σ_rows P(τ ≥ j − 1))`` for j = 1..K under TV, over the rows whose
    draft token j is real (not an n-gram filler).  returns # [K], # [K]"""
    real = real_slots(trace)
    a = np.where(real, token_acceptance(trace.q, trace.pt), 0.0)
    reach = np.cumprod(a, axis=1)  # [rows, K]
    before = np.concatenate([np.ones((trace.n_rows, 1)), reach[:, :-1]], axis=1)
    return (reach * real).sum(axis=0), (before * real).sum(axis=0)


def position_rates(trace: Trace) -> np.ndarray:
    """``α_j`` for j = 1..K (module docstring; 0 where no row reaches j).  # [K]"""
    hit, tried = reach_sums(trace)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tried > 0, hit / np.where(tried > 0, tried, 1.0), 0.0)


def constant_rate(trace: Trace) -> float:
    """The pooled i.i.d. rate ``α`` (module docstring)."""
    hit, tried = reach_sums(trace)
    total = float(tried.sum())
    return float(hit.sum()) / total if total > 0 else 0.0


def model_rates(trace: Trace, model: str) -> np.ndarray:
    """Per-draft-index acceptance rates of ``model`` ("constant" or "per-position").  # [K]"""
    if model == "constant":
        return np.full(trace.K, constant_rate(trace))
    return position_rates(trace)


def acceptance_trace(trace: Trace, model: str) -> Trace:
    """``trace`` with acceptance replaced by ``model`` (:data:`ACCEPTANCE_MODELS`); "trace"
    returns it unchanged. The meta records the model and its rates."""
    if model == "trace":
        return trace
    rates = model_rates(trace, model)
    real = real_slots(trace)
    pt = np.where(real, rates[None, :], 0.0)  # [rows, K]
    q = np.ones_like(pt)
    weights = np.cumprod(pt, axis=1)  # BV's p_j of a one-hot draft
    before = np.concatenate([np.ones((trace.n_rows, 1)), weights[:, :-1]], axis=1)
    columns = {**trace.columns(), "q": q, "pt": pt, "z": before * (1.0 - pt)}
    meta = {**trace.meta, "temperature": 1.0,
            "acceptance": {"model": model, "rates": rates.tolist(),
                           "trace_temperature": trace.temperature}}
    return make_trace(meta, trace.requests(), columns, path=trace.path)
