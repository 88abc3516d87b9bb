"""Per-position statistics of drafted paths, batched in numpy: the reference tier (THEORY.md §3).

Given the drafted tokens and the full draft/target rows along the path, everything either
verification rule needs to sample τ is a handful of numbers per position:

- ``q[b, i]  = Ms(X_{i+1} | X^i)``   draft probability of the drafted token (0-based i)
- ``pt[b, i] = Mb(X_{i+1} | X^i)``   target probability of the drafted token
- ``r_i = pt / q``                   the ratio (THEORY.md §1)
- ``p_i = min(p_{i-1} r_i, 1)``      BV's running clipped weight, ``p_0 = 1``
- ``Z_{i+1} = Σ_x max(p_i Mb(x|X^i) − Ms(x|X^i), 0)`` for i = 0..K-1 (``Z_1`` uses ``p_0 = 1``
  and is TV's residual mass at the first position)

These are what a trace stores per position (``Z[:, j]`` holds ``Z_{j+1}``), and they serve
every draft length γ ≤ K: h_i for i < γ uses ``Z_{i+1}`` and ``p_i``, h_γ = p_γ.

One implementation per quantity and tier: this module is the numpy reference (:func:`block_weights`,
:func:`residual_masses`, :func:`draft_signals`, :func:`position_stats`, :func:`block_thresholds`);
:mod:`specbatch.theory.exact.enumeration` holds the exact twins (``*_exact``, Fractions or floats,
the recursion of the definition) and :mod:`specbatch.theory.verify.torch_path_stats` the torch fast
path (``*_torch``).

Shapes: ``B`` paths, ``K`` drafted tokens, ``V`` vocabulary.
"""

from __future__ import annotations

import numpy as np


def gather_drafted(rows: np.ndarray, draft_tokens: np.ndarray) -> np.ndarray:
    """Probability each row gives to the drafted token at its position.

    rows:          # [B, K(+1), V]  only the first K positions are read
    draft_tokens:  # [B, K]         int
    returns        # [B, K]
    """
    k = draft_tokens.shape[1]
    return np.take_along_axis(rows[:, :k, :], draft_tokens[:, :, None], axis=2)[:, :, 0]


def block_weights(q: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """BV running weights ``p_1..p_K`` from drafted-token probabilities.

    Uses the identity ``p_i = exp(S_i − max_{0≤j≤i} S_j)``, ``S_i = Σ_{k≤i} log r_k``,
    ``S_0 = 0`` (THEORY.md §3): one cumsum and one running max. ``pt = 0`` gives p = 0 from
    then on until a later ratio is infinite, which cannot happen for a drafted token (q > 0).

    q, pt:   # [B, K]  draft / target probability of the drafted token (q > 0)
    returns  # [B, K]  p_i, i = 1..K
    """
    with np.errstate(divide="ignore"):
        log_r = np.log(pt) - np.log(q)
    s = np.cumsum(log_r, axis=1)
    running_max = np.maximum(np.maximum.accumulate(s, axis=1), 0.0)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - running_max)
    return np.nan_to_num(p, nan=0.0)


def residual_masses(p: np.ndarray, draft_rows: np.ndarray, target_rows: np.ndarray) -> np.ndarray:
    """``Z_{i+1} = Σ_x max(p_i · Mb(x|X^i) − Ms(x|X^i), 0)`` for i = 0..K-1.

    p:            # [B, K]      p_1..p_K (p_0 = 1 is prepended here)
    draft_rows:   # [B, K, V]   Ms(·|X^i), i = 0..K-1
    target_rows:  # [B, K(+1), V]
    returns       # [B, K]      column j holds Z_{j+1}
    """
    b, k = p.shape
    p_prev = np.concatenate([np.ones((b, 1)), p[:, : k - 1]], axis=1)  # p_0..p_{K-1}
    z = np.empty((b, k))
    for i in range(k):  # one position at a time: a [B, V] temporary instead of [B, K, V]
        diff = p_prev[:, i, None] * target_rows[:, i, :] - draft_rows[:, i, :]
        z[:, i] = np.maximum(diff, 0.0, out=diff).sum(axis=1)
    return z


def position_stats(
    draft_tokens: np.ndarray, draft_rows: np.ndarray, target_rows: np.ndarray
) -> dict[str, np.ndarray]:
    """Everything a trace records for a drafted path.

    draft_tokens: # [B, K]       int
    draft_rows:   # [B, K, V]    Ms(·|c, X^i), i = 0..K-1
    target_rows:  # [B, K+1, V]  Mb(·|c, X^i), i = 0..K (the last row is only needed for a bonus)
    returns dict with ``q``, ``pt``, ``p``, ``z`` each # [B, K]
    """
    q = gather_drafted(draft_rows, draft_tokens)
    pt = gather_drafted(target_rows, draft_tokens)
    p = block_weights(q, pt)
    z = residual_masses(p, draft_rows, target_rows)
    return {"q": q, "pt": pt, "p": p, "z": z}


def draft_signals(draft_tokens: np.ndarray, draft_rows: np.ndarray) -> dict[str, np.ndarray]:
    """The draft's signals a policy may read before verification, from temperature-1 rows.

    ``draft_conf = Ms_1(X_{i+1}|X^i)``, ``entropy = −Σ_x Ms_1(x) log Ms_1(x)`` (nats, 0 log 0 = 0),
    ``top1 = max_x Ms_1(x)``. Traces record them at temperature 1 whatever the sampling
    temperature (a surrogate of acceptance needs a graded confidence even when decoding is
    greedy).

    draft_tokens:  # [..., K]     int
    draft_rows:    # [..., K, V]  Ms(·|X^i) at temperature 1
    returns dict of # [..., K] float64: ``draft_conf``, ``entropy``, ``top1``
    """
    rows = np.asarray(draft_rows, dtype=np.float64)
    tokens = np.asarray(draft_tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.nan_to_num(rows * np.log(rows), nan=0.0)
    return {
        "draft_conf": np.take_along_axis(rows, tokens[..., None], axis=-1)[..., 0],
        "entropy": np.maximum(-plogp.sum(axis=-1), 0.0),
        "top1": rows.max(axis=-1),
    }


def token_weights(q: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """TV's ``P(τ ≥ i | X^i) = Π_{j≤i} min(1, r_j)`` (THEORY.md §2), non-increasing in i.

    q, pt:   # [B, K]  draft / target probability of the drafted token (q > 0)
    returns  # [B, K]
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.minimum(pt / q, 1.0)
    return np.cumprod(np.nan_to_num(accept, nan=0.0), axis=1)


def block_thresholds(p: np.ndarray, z: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """BV thresholds ``h_i`` for ragged draft lengths γ_b (THEORY.md §3).

    ``h_i = Z_{i+1} / (Z_{i+1} + 1 − p_i)`` for i < γ (1 when the denominator is 0),
    ``h_γ = p_γ``; positions past γ get ``-inf`` so they can never be accepted.

    p, z:    # [B, K]  p_1..p_K and Z_1..Z_K (column j holds Z_{j+1})
    gamma:   # [B]     int draft length per path, 0 <= γ <= K
    returns  # [B, K]  column j holds h_{j+1}
    """
    b, k = p.shape
    z_next = np.concatenate([z[:, 1:], np.zeros((b, 1))], axis=1)  # Z_{i+1} for i = 1..K
    denom = z_next + (1.0 - p)  # (1 - p) first: h never exceeds 1 by rounding
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(denom > 0.0, z_next / np.where(denom > 0.0, denom, 1.0), 1.0)
    index = np.arange(1, k + 1)[None, :]
    gamma = np.asarray(gamma)[:, None]
    h = np.where(index == gamma, p, h)
    return np.where(index > gamma, -np.inf, h)


def accept_from_stats(
    q: np.ndarray,
    pt: np.ndarray,
    z: np.ndarray,
    gamma: np.ndarray,
    uniforms: np.ndarray,
    rule: str,
) -> np.ndarray:
    """Sample the accepted length τ from a drafted path's recorded statistics.

    Token verification (THEORY.md §2): accept while ``η_i < min(1, r_i)``; τ is the index of
    the first failure. Block verification (§3): ``τ = max{i ≤ γ : η_i < h_i}`` (0 if none).
    The interval is half-open, as η is, so ``P(accept) = threshold`` and a threshold of 0 (a
    token the target gives probability 0) never accepts, even at η = 0.
    Both read only the drafted path, so every draft length γ ≤ K reuses the same row.

    q, pt, z:  # [B, K]  recorded statistics (z[:, j] holds Z_{j+1})
    gamma:     # [B]     int draft length per path, 0 <= γ <= K
    uniforms:  # [B, K]  η_i ~ U[0, 1), shared by both rules (common random numbers)
    rule:      "token" or "block"
    returns    # [B]     int64 τ
    """
    b, k = q.shape
    gamma = np.asarray(gamma, dtype=np.int64)
    index = np.arange(1, k + 1)[None, :]
    inside = index <= gamma[:, None]
    if rule == "token":
        with np.errstate(divide="ignore", invalid="ignore"):
            accept = np.minimum(np.nan_to_num(pt / q, nan=0.0), 1.0)
        ok = (uniforms < accept) & inside
        # τ = number of leading successes: position of the first failure within γ.
        return np.where(ok.all(axis=1), k, np.argmin(ok, axis=1)).astype(np.int64)
    if rule == "block":
        h = block_thresholds(block_weights(q, pt), z, gamma)
        ok = (uniforms < h) & inside
        last = k - np.argmax(ok[:, ::-1], axis=1)
        return np.where(ok.any(axis=1), last, 0).astype(np.int64)
    raise ValueError(f"rule: expected 'token' or 'block', got {rule!r}")

