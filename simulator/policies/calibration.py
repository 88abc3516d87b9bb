"""The calibration split: trace requests held out from replay to measure offline statistics.

Engines that ship an offline-tuned speculation policy measure acceptance on a dataset first
and serve with the numbers they found (vLLM's dynamic speculative decoding runs
``vllm/v1/spec_decode/dynamic/generate_config.py`` step 1, an offline spec-decode pass that
yields ``acceptance_rate_per_pos``). The simulator's twin: ``calibration_split = f`` holds a
seeded fraction f of the trace's *requests* out of replay (:func:`split_requests`); the
policies that calibrate (a ``calibrate(trace)`` method, :func:`calibrate_policy`) read only
those requests, and the workload replays only the others, so no replayed row informs a
policy. Every policy of a run sees the same split (it depends on the trace and the seed
alone), so a sweep stays paired.

The statistics are expectations over the calibration rows, not coin flips:
:func:`position_acceptance` averages ``P(τ ≥ j | X^j)`` (TV's ``Π min(1, r)``, BV's ``p_j``),
the quantity vLLM's ``num_accepted_tokens_per_pos / num_drafts`` estimates; and
:func:`confidence_acceptance` bins the draft's confidence against the per-token acceptance
probability ``min(1, r_j)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.policies import knobs as pk
from specbatch.simulator.policies.base import defines
from specbatch.simulator.policies.catalogue import entry
from specbatch.simulator.replay.chain import accept_column

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

#: Mixed into the seed so the split's generator differs from every other stream of a run.
SPLIT_STREAM = 0xCA11B
#: Confidence bins of :func:`confidence_acceptance` (equal-count over the calibration tokens).
CONFIDENCE_BINS = 20


def split_requests(n_requests: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(calibration, replay) request indices # [c], [n − c], each ascending: a seeded random
    c = round(fraction · n) requests calibrate, the rest are replayed; both must be non-empty."""
    c = int(round(fraction * n_requests))
    if c < 1 or c >= n_requests:
        raise SpecbatchError(
            f"config: field calibration_split: expected a fraction that leaves at least one "
            f"calibration and one replayed request of the trace's {n_requests}, got {fraction!r}")
    order = np.random.default_rng([int(seed), SPLIT_STREAM]).permutation(n_requests)
    return np.sort(order[:c]), np.sort(order[c:])


def split_trace(trace: Any, fraction: float, seed: int) -> tuple[Any, Any, np.ndarray]:
    """(calibration trace, replay trace, the replay trace's request indices in ``trace``
    # [n − c]) of ``trace`` split by request (:func:`split_requests`)."""
    calibrate, replay = split_requests(trace.n_requests, fraction, seed)
    return trace.subset(calibrate), trace.subset(replay), replay


def calibrates(config: SimConfig, policy: Any) -> bool:
    """Whether the run of ``config`` calibrates ``policy``: for a built-in, what its catalogue
    row says (simulator.policies.knobs.calibrates: ``calibrates``, or a fitted predictor of a
    row that reads one), never a per-object trait; for a user's class, whether it defines
    ``calibrate``."""
    if entry(config.policy) is not None:
        return pk.calibrates(config)
    return defines(policy, "calibrate")


def calibrate_policy(policy: Any, calibration: Any | None, config: SimConfig) -> None:
    """Hand the calibration trace to a policy the run of ``config`` calibrates
    (:func:`calibrates`); one that needs it without a split is a one-line error naming the
    knob."""
    if not calibrates(config, policy):
        return
    calibrate = policy.calibrate
    if calibration is None:
        raise SpecbatchError(f"config: field calibration_split: expected a fraction > 0 for "
                             f"policy {policy.name} (it calibrates on held-out trace requests, "
                             "never on replayed ones), got 0.0")
    calibrate(calibration)


def position_acceptance(trace: Any, depth: int, rule: str) -> np.ndarray:
    """Mean over the trace's rows of ``P(τ ≥ j | X^j)`` for j = 1..depth: the per-position
    acceptance rate ``a_j`` of vLLM's ``acceptance_rate_per_pos`` (drafts that reach position
    j are accepted through it with this probability).  returns # [depth], non-increasing"""
    if trace.n_rows == 0:
        raise SpecbatchError("calibration: the calibration split holds no positions")
    weights = getattr(trace, accept_column(rule))  # TV accept_tv, BV p
    return weights[:, :depth].mean(axis=0)


def confidence_acceptance(trace: Any, depth: int, bins: int = CONFIDENCE_BINS
                          ) -> tuple[np.ndarray, np.ndarray]:
    """A calibration of the draft's confidence: equal-count bins of ``draft_conf`` over the
    first ``depth`` positions of the trace's rows, each with the mean per-token acceptance
    probability ``min(1, r_j) = min(1, pt_j / q_j)`` of its tokens.

    Returns (edges # [b − 1] inner bin edges, ascending; rate # [b] acceptance per bin); look a
    confidence up with ``rate[np.searchsorted(edges, conf, side="right")]``.
    """
    conf = trace.draft_conf[:, :depth].ravel()
    ratio = np.minimum(1.0, trace.pt[:, :depth] / trace.q[:, :depth]).ravel()
    if conf.size == 0:
        raise SpecbatchError("calibration: the calibration split holds no positions")
    edges = np.unique(np.quantile(conf, np.linspace(0, 1, bins + 1)[1:-1]))
    which = np.searchsorted(edges, conf, side="right")
    counts = np.bincount(which, minlength=edges.size + 1)
    sums = np.bincount(which, weights=ratio, minlength=edges.size + 1)
    rate = np.divide(sums, counts, out=np.full(counts.shape, float(ratio.mean())),
                     where=counts > 0)
    return edges, rate
