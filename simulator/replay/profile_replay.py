"""An acceptance profile replayed in place of a trace's acceptance, position by position.

``config.acceptance_profile`` (traces.acceptance) keeps the trace's requests (prompt and
output lengths, categories, arrivals) and rewrites every row's acceptance columns with a
profile of depth K (the profile's, so a run may draft at most K tokens):

- **chain** (no histogram): a one-hot draft (``q = 1``) with ``pt_j = a_j``, so TV accepts
  position j with probability ``a_j`` given j − 1 accepted, drawn from the run's common
  random numbers (the verifier's uniforms η at the same request and position): every setting
  of a comparison sees the same acceptance outcomes where it drafts the same positions;
- **histogram** (``h_n`` given): each row draws its accept length ``L ~ h`` once, from a
  generator seeded by ``(seed, row)`` alone (common random numbers across settings), and
  holds ``pt_j = 1`` for ``j ≤ L``, ``0`` beyond; a step drafting k tokens accepts
  ``min(L, k)``. A bimodal n-gram law stays bimodal: the chain would spread it out.

In both, MAL at k is ``1 + Σ_{j≤k} S_j`` per step landing on a row (traces.acceptance.profile);
a request's last steps accept less when its output ends first, as in any replay.
``Z_{j+1} = p_j (1 − pt_{j+1})`` is THEORY.md §3's one-hot residual, so block verification
has the law of token verification on a profile (it knows only per-position rates; its
outcomes come from its own uniforms, so runs agree in law, not path by path).

What a profile cannot give: per-token draft confidences. The draft signals are those of a one-hot
draft (``draft_conf = top1 = 1``, ``entropy = 0``), so the policies that read them (the catalogue
rows with ``confidence``: TETRIS's ranking, the confidence and threshold policies) see no signal,
and BV gains nothing over TV. A trace remains the richest source for those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import require
from specbatch.traces.format.trace import make_trace

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.traces.acceptance.profile import AcceptanceProfile
    from specbatch.traces.format.trace import Trace

#: Seed stream of the histogram's accept-length draws (apart from every other stream).
_STREAM = 0x70F11E


def accept_lengths(histogram: np.ndarray, rows: int, seed: int) -> np.ndarray:
    """One accept length ``L ~ h`` per row, by inverse CDF of uniforms seeded by ``seed``
    alone.  histogram # [K+1] -> # [rows] int64"""
    u = np.random.default_rng([int(seed), _STREAM]).random(rows)  # [rows]
    cdf = np.cumsum(histogram)
    cdf[-1] = 1.0
    return np.searchsorted(cdf, u, side="right").astype(np.int64)


def profile_columns(profile: AcceptanceProfile, rows: int, seed: int) -> dict[str, np.ndarray]:
    """The seven [rows, K] columns of the profile's replay (module docstring)."""
    k = profile.K
    if profile.histogram is not None:
        lengths = accept_lengths(np.asarray(profile.histogram, dtype=np.float64), rows, seed)
        pt = (np.arange(1, k + 1)[None, :] <= lengths[:, None]).astype(np.float64)  # [rows, K]
    else:
        pt = np.broadcast_to(np.asarray(profile.rates, dtype=np.float64), (rows, k)).copy()
    reach = np.cumprod(pt, axis=1)  # [rows, K]: BV's p_j of a one-hot draft
    before = np.concatenate([np.ones((rows, 1)), reach[:, :-1]], axis=1)
    ones = np.ones((rows, k))
    return {"draft_token": np.zeros((rows, k), dtype=np.int32), "q": ones, "pt": pt,
            "z": before * (1.0 - pt), "draft_conf": ones.copy(), "entropy": np.zeros((rows, k)),
            "top1": ones.copy()}


#: Profile traces built in this process: (trace object, profile, seed) -> Trace. A plan or
#: tune replays one profile on one trace over many runs; the columns are built once per seed.
_BUILT: dict[tuple, tuple[Trace, Trace]] = {}


def profile_trace(trace: Trace, profile: AcceptanceProfile, seed: int) -> Trace:
    """``trace``'s requests with ``profile``'s acceptance (module docstring); the meta
    records the profile (name, pair, source) for the run's notes and answers. Built once per
    (trace, profile, seed) in a process (:data:`_BUILT`, the last 8 kept)."""
    import json

    from specbatch.traces.acceptance.profile import to_dict

    key = (id(trace), json.dumps(to_dict(profile), sort_keys=True), int(seed))
    hit = _BUILT.get(key)
    if hit is not None and hit[0] is trace:  # the same object, not a reused id
        return hit[1]
    if len(_BUILT) >= 8:
        _BUILT.pop(next(iter(_BUILT)))
    built = _build_profile_trace(trace, profile, seed)
    _BUILT[key] = (trace, built)
    return built


def _build_profile_trace(trace: Trace, profile: AcceptanceProfile, seed: int) -> Trace:
    require(trace.tree is None, "acceptance_profile: expected a chain trace for the requests, "
            "got a tree trace (a profile describes one chain per step)")
    columns = profile_columns(profile, trace.n_rows, seed)
    meta = {**trace.meta, "temperature": 1.0, "depth": profile.K,
            "acceptance": {"model": "profile", "profile": profile.name,
                           "pair": profile.pair, "drafter": profile.drafter,
                           "source": profile.source, "rates": list(profile.rates),
                           "histogram": None if profile.histogram is None
                           else list(profile.histogram),
                           "trace_temperature": trace.temperature}}
    return make_trace(meta, trace.requests(), columns, path=trace.path)


def profile_notes(profile: AcceptanceProfile, config: SimConfig, reads_confidence: bool = False
                  ) -> tuple[str, ...]:
    """What a run on a profile should say: its source, its caveats, and lost signals
    (``reads_confidence``: the policy's choices read per-token draft confidences, its
    catalogue row's ``confidence``)."""
    policy = config.policy
    notes = [f"acceptance from profile {profile.source}, pair {profile.pair}"
             + (", accept lengths drawn from its histogram" if profile.histogram is not None
                else ", conditional chain")]
    notes += [f"profile {profile.name}: {n}" for n in profile.notes]
    if reads_confidence:
        notes.append(f"policy {policy} reads per-token draft confidences, which a profile does "
                     "not have (one-hot signals): its choices carry no acceptance signal here; "
                     "use a trace for it")
    if config.verify == "block" and policy != "ar":
        notes.append("block verification has the law of token verification on a profile (a "
                     "one-hot draft, THEORY.md §3): BV's gain needs a trace's per-token "
                     "probabilities")
    return tuple(notes)
