"""An acceptance profile from a trace: the pooled law of τ under token verification.

Each row of a trace gives TV's ``P(τ ≥ j | X^j) = Π_{l≤j} min(1, r_l)`` (THEORY.md §2,
``Trace.accept_tv``); averaging over rows gives the trace's survival ``S_j`` and its
histogram ``h_n = S_n − S_{n+1}`` (``S_0 = 1``, ``S_{K+1} = 0``). Filler slots of an n-gram
trace (past ``proposed``) hold ``pt = 0`` and count as rejections, as they do when replayed,
so an n-gram trace keeps its bimodal histogram. Rows are weighted equally (every output
position once), which is the law of a step that lands on a uniformly drawn position; the
simulator's position-indexed replay visits positions that way up to the request ends.

The profile drops what only a trace has (which rows accept, and the draft's per-token
confidences that TETRIS and the confidence policies read): it is for export and comparison.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.traces.acceptance.profile import AcceptanceProfile, rates_from_survival

if TYPE_CHECKING:
    from specbatch.traces.format.trace import Trace


def trace_histogram(trace: Trace) -> np.ndarray:
    """``h_n = P(τ = n)`` for n = 0..K, pooled over the rows under TV.  # [K+1]"""
    s = trace.accept_tv.mean(axis=0) if trace.n_rows else np.zeros(trace.K)  # [K]
    reach = np.concatenate([[1.0], s, [0.0]])  # [K+2]: S_0..S_{K+1}
    return np.clip(reach[:-1] - reach[1:], 0.0, None)


def drafter_kind(trace: Trace) -> str:
    """``ngram`` for a prompt-lookup trace, ``draft-model`` for one drafted by a model."""
    draft = (trace.meta.get("models") or {}).get("draft") or {}
    if draft.get("drafter") == "ngram":
        return "ngram"
    return "draft-model" if draft else "unknown"


def profile_from_trace(trace: Trace, name: str | None = None) -> AcceptanceProfile:
    """The trace's profile (module docstring), with its pair, temperature and path."""
    hist = trace_histogram(trace)
    hist = hist / hist.sum()
    surv = np.cumsum(hist[::-1])[::-1][1:]  # S_1..S_K from the normalised histogram
    models = trace.meta.get("models") or {}
    return AcceptanceProfile(
        rates=rates_from_survival(surv.tolist()), histogram=tuple(float(x) for x in hist),
        drafter=drafter_kind(trace),
        target=(models.get("target") or {}).get("name"),
        draft=(models.get("draft") or {}).get("name"),
        conditions={"dataset": trace.meta.get("prompt_source"),
                    "temperature": trace.temperature, "engine": "specbatch capture",
                    "samples": trace.n_rows},
        provenance={"source": "trace", "file": trace.path, "verification": "token (TV)"},
        name=name or (str(trace.path) if trace.path else "trace"))
