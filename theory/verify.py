"""Token and block verification on full rows: the batched numpy reference (THEORY.md §2-3).

One verification step of B drafted paths at once. Inputs (0-based position i holds ``X^i``):

- ``draft_tokens``  # [B, γ]       int, ``X_1..X_γ``
- ``draft_rows``    # [B, γ, V]    ``Ms(·|c, X^i)``, i = 0..γ-1 (the row ``X_{i+1}`` was drawn from)
- ``target_rows``   # [B, γ+1, V]  ``Mb(·|c, X^i)``, i = 0..γ (the last row serves the bonus)
- ``uniforms``      # [B, γ]       ``η_1..η_γ ~ U[0, 1)``, shared by both rules
- ``rng``           a ``numpy.random.Generator`` for the extra token

Output: τ # [B] (accepted draft tokens) and the extra token # [B] (a *correction* drawn from
the residual when τ < γ, a *bonus* drawn from ``Mb(·|X^γ)`` when τ = γ).

This module is the readable reference: it follows the pseudo-code of THEORY.md literally (a
loop over the γ positions, vectorised over B, the recursion ``p_i = min(p_{i-1} r_i, 1)``
rather than the cumsum/cummax identity) so that the vectorised paths
(:func:`theory.stats.accept_from_stats`, :mod:`theory.verify_torch`) have an independent twin.

A residual with zero mass (only possible when τ < γ has probability 0, reached through float
rounding) falls back to the target row ``Mb(·|X^τ)``.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import require

RULES = ("token", "block")


def _check(draft_tokens, draft_rows, target_rows, uniforms=None):
    """Validate shapes; return (tokens int64, draft rows f64, target rows f64, uniforms f64)."""
    draft_tokens = np.asarray(draft_tokens, dtype=np.int64)
    draft_rows = np.asarray(draft_rows, dtype=np.float64)
    target_rows = np.asarray(target_rows, dtype=np.float64)
    require(draft_tokens.ndim == 2, f"draft_tokens: expected [B, γ], got {draft_tokens.shape}")
    b, gamma = draft_tokens.shape
    require(
        draft_rows.ndim == 3 and draft_rows.shape[:2] == (b, gamma),
        f"draft_rows: expected [B, γ, V] = [{b}, {gamma}, V], got {draft_rows.shape}",
    )
    v = draft_rows.shape[2]
    require(
        target_rows.shape == (b, gamma + 1, v),
        f"target_rows: expected [B, γ+1, V] = [{b}, {gamma + 1}, {v}], got {target_rows.shape}",
    )
    if uniforms is not None:
        uniforms = np.asarray(uniforms, dtype=np.float64)
        require(
            uniforms.shape == (b, gamma), f"uniforms: expected [{b}, {gamma}], got {uniforms.shape}"
        )
    return draft_tokens, draft_rows, target_rows, uniforms


def _drafted(rows: np.ndarray, draft_tokens: np.ndarray) -> np.ndarray:
    """``rows[b, i, X_{i+1}]`` for i < γ.  rows # [B, γ(+1), V] -> # [B, γ]"""
    gamma = draft_tokens.shape[1]
    return np.take_along_axis(rows[:, :gamma, :], draft_tokens[:, :, None], axis=2)[:, :, 0]


def drafted_ratios(draft_tokens, draft_rows, target_rows) -> np.ndarray:
    """``r_i = Mb(X_i|X^{i-1}) / Ms(X_i|X^{i-1})`` (THEORY.md §1).  returns # [B, γ]"""
    q = _drafted(draft_rows, draft_tokens)
    require(bool((q > 0).all()), "draft_rows: a drafted token has draft probability 0")
    return _drafted(target_rows, draft_tokens) / q


def block_weights_recursive(ratios: np.ndarray) -> np.ndarray:
    """BV weights by the definition ``p_0 = 1``, ``p_i = min(p_{i-1} r_i, 1)`` (THEORY.md §3).

    ratios:  # [B, γ]
    returns  # [B, γ+1]  p_0..p_γ
    """
    b, gamma = ratios.shape
    p = np.ones((b, gamma + 1))
    for i in range(1, gamma + 1):
        p[:, i] = np.minimum(p[:, i - 1] * ratios[:, i - 1], 1.0)
    return p


def _tv_accepts(ratios: np.ndarray) -> np.ndarray:
    """``P(τ ≥ i | X^i) = Π_{j≤i} min(1, r_j)`` for i = 1..γ.  # [B, γ]"""
    return np.cumprod(np.minimum(ratios, 1.0), axis=1)


def expected_accepted(draft_tokens, draft_rows, target_rows, rule: str) -> np.ndarray:
    """Per-path ``Σ_i P(τ ≥ i | X^i)``: TV ``Σ_i Π_{j≤i} min(1, r_j)``, BV ``Σ_i p_i`` (§2-3).

    Averaged over draft paths ``X^γ ~ Ms`` this is ``E[τ]`` for both rules. For TV it is also
    the exact ``E[τ | X^γ]``; for BV it is not (``P(τ ≥ i | X^i) = p_i`` only after averaging
    over ``X_{i+1..γ}``; the exact conditional law is :func:`tau_law`). These are the
    per-position values ``P_{i,j}`` a batch allocator ranks (THEORY.md §5).
    returns # [B] float64
    """
    draft_tokens, draft_rows, target_rows, _ = _check(draft_tokens, draft_rows, target_rows)
    ratios = drafted_ratios(draft_tokens, draft_rows, target_rows)
    if rule == "token":
        return _tv_accepts(ratios).sum(axis=1)
    if rule == "block":
        return block_weights_recursive(ratios)[:, 1:].sum(axis=1)
    raise ValueError(f"rule: expected 'token' or 'block', got {rule!r}")


def block_thresholds_full(draft_rows, target_rows, p: np.ndarray) -> np.ndarray:
    """BV thresholds from full rows: ``h_i = Z_{i+1} / (Z_{i+1} + 1 − p_i)`` for i < γ (1 when
    the denominator is 0) with ``Z_{i+1} = Σ_x max(p_i Mb(x|X^i) − Ms(x|X^i), 0)``; ``h_γ = p_γ``.

    draft_rows  # [B, γ, V], target_rows # [B, γ+1, V], p # [B, γ+1] (p_0..p_γ)
    returns     # [B, γ]  column i-1 holds h_i
    """
    b, gamma = p.shape[0], p.shape[1] - 1
    h = np.empty((b, gamma))
    for i in range(1, gamma):
        z = np.maximum(p[:, i, None] * target_rows[:, i] - draft_rows[:, i], 0.0).sum(axis=1)
        denom = z + (1.0 - p[:, i])  # ≥ z, so h ≤ 1 also after rounding
        h[:, i - 1] = np.where(denom > 0.0, z / np.where(denom > 0.0, denom, 1.0), 1.0)
    if gamma:
        h[:, gamma - 1] = p[:, gamma]
    return h


def tau_law(draft_tokens, draft_rows, target_rows, rule: str) -> np.ndarray:
    """Exact law of τ given the whole drafted path ``X^γ`` (summing over the uniforms).

    TV: ``P(τ ≥ i | X^γ) = a_i = Π_{j≤i} min(1, r_j)``, so ``P(τ = i) = a_i − a_{i+1}``.
    BV: τ = max{i : η_i ≤ h_i} with independent uniforms, so
    ``P(τ = i | X^γ) = h_i Π_{j>i} (1 − h_j)`` (h_0 = 1).

    Note for BV: ``P(τ ≥ i | X^i) = p_i`` holds after averaging over the later draft tokens
    ``X_{i+1..γ} ~ Ms``; given the whole path, ``P(τ ≥ i | X^γ) = 1 − Π_{j≥i}(1 − h_j)`` differs
    (the paper's example: draft ``aa`` has ``Σ p_i = 3/4`` but ``E[τ | aa] = 1/2``).

    returns # [B, γ+1]  column i holds P(τ = i | X^γ)
    """
    draft_tokens, draft_rows, target_rows, _ = _check(draft_tokens, draft_rows, target_rows)
    b, gamma = draft_tokens.shape
    ratios = drafted_ratios(draft_tokens, draft_rows, target_rows)
    if rule == "token":
        at_least = np.concatenate([np.ones((b, 1)), _tv_accepts(ratios), np.zeros((b, 1))], 1)
        return at_least[:, :-1] - at_least[:, 1:]
    if rule == "block":
        p = block_weights_recursive(ratios)
        h = np.concatenate([np.ones((b, 1)), block_thresholds_full(draft_rows, target_rows, p)], 1)
        # survive[:, i] = Π_{j>i} (1 − h_j): no later position accepted.
        survive = np.ones((b, gamma + 1))
        for i in range(gamma - 1, -1, -1):
            survive[:, i] = survive[:, i + 1] * (1.0 - h[:, i + 1])
        return h * survive
    raise ValueError(f"rule: expected 'token' or 'block', got {rule!r}")


def extra_token_law(draft_tokens, draft_rows, target_rows, tau, rule: str) -> np.ndarray:
    """Exact law of the extra token given τ (THEORY.md §2-3), normalised.

    τ = γ: the bonus law ``Mb(·|X^γ)``. τ < γ: TV ``∝ max(Mb(·|X^τ) − Ms(·|X^τ), 0)``, BV
    ``∝ max(p_τ Mb(·|X^τ) − Ms(·|X^τ), 0)`` (p_0 = 1, so BV's τ = 0 residual is TV's). A
    zero-mass residual falls back to ``Mb(·|X^τ)``.

    tau:     # [B] int
    returns  # [B, V] rows summing to 1
    """
    draft_tokens, draft_rows, target_rows, _ = _check(draft_tokens, draft_rows, target_rows)
    b, gamma = draft_tokens.shape
    tau = np.asarray(tau, dtype=np.int64)
    rows = np.arange(b)
    if rule == "token":
        weight = np.ones(b)
    elif rule == "block":
        ratios = drafted_ratios(draft_tokens, draft_rows, target_rows)
        weight = block_weights_recursive(ratios)[rows, tau]
    else:
        raise ValueError(f"rule: expected 'token' or 'block', got {rule!r}")
    law = target_rows[rows, tau]  # [B, V] Mb(·|X^τ), kept where τ = γ (bonus)
    rejected = np.flatnonzero(tau < gamma)
    if rejected.size:
        residual = weight[rejected, None] * law[rejected] - draft_rows[rejected, tau[rejected]]
        law[rejected] = np.maximum(residual, 0.0, out=residual)
    mass = law.sum(axis=1)
    empty = np.flatnonzero(mass <= 0.0)
    if empty.size:  # probability-0 event reached through rounding: fall back to Mb(·|X^τ)
        law[empty] = target_rows[empty, tau[empty]]
        mass[empty] = law[empty].sum(axis=1)
    law /= mass[:, None]
    return law


def sample_rows(law: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of ``law`` # [B, V] (non-negative, positive total) by inverse CDF."""
    cdf = np.cumsum(law, axis=1)
    u = rng.random(law.shape[0]) * cdf[:, -1]
    index = (cdf <= u[:, None]).sum(axis=1)  # first index whose cdf exceeds u
    high = np.flatnonzero(index >= law.shape[1])  # u rounded up to the total: last positive
    if high.size:
        index[high] = law.shape[1] - 1 - np.argmax(law[high, ::-1] > 0.0, axis=1)
    return index.astype(np.int64)


def verify_token(draft_tokens, draft_rows, target_rows, uniforms, rng: np.random.Generator):
    """Token verification (THEORY.md §2): accept while ``η_i ≤ min(1, r_i)``.

    returns (τ # [B] int64, extra token # [B] int64)
    """
    draft_tokens, draft_rows, target_rows, uniforms = _check(
        draft_tokens, draft_rows, target_rows, uniforms
    )
    b, gamma = draft_tokens.shape
    ratios = drafted_ratios(draft_tokens, draft_rows, target_rows)
    alive = np.ones(b, dtype=bool)
    tau = np.zeros(b, dtype=np.int64)
    for i in range(gamma):  # walk i = 1..γ, stop at the first failure
        alive &= uniforms[:, i] <= np.minimum(1.0, ratios[:, i])
        tau += alive
    law = extra_token_law(draft_tokens, draft_rows, target_rows, tau, "token")
    return tau, sample_rows(law, rng)


def verify_block(draft_tokens, draft_rows, target_rows, uniforms, rng: np.random.Generator):
    """Block verification (THEORY.md §3): ``τ = max{i : η_i ≤ h_i}`` (0 if none).

    returns (τ # [B] int64, extra token # [B] int64)
    """
    draft_tokens, draft_rows, target_rows, uniforms = _check(
        draft_tokens, draft_rows, target_rows, uniforms
    )
    b, gamma = draft_tokens.shape
    p = block_weights_recursive(drafted_ratios(draft_tokens, draft_rows, target_rows))
    h = block_thresholds_full(draft_rows, target_rows, p)
    tau = np.zeros(b, dtype=np.int64)
    for i in range(1, gamma + 1):  # the last i with η_i ≤ h_i wins
        tau = np.where(uniforms[:, i - 1] <= h[:, i - 1], i, tau)
    law = extra_token_law(draft_tokens, draft_rows, target_rows, tau, "block")
    return tau, sample_rows(law, rng)


#: rule name -> full-row numpy verifier
VERIFIERS = {"token": verify_token, "block": verify_block}


def _verify_block_wrong(draft_tokens, draft_rows, target_rows, uniforms, rng):
    """A known **wrong** block verifier (THEORY.md §3), kept only to show the tests catch it.

    It accepts the longest prefix whose product of uniforms is below the product of TV's
    acceptance probabilities, ``τ = max{i : Π_{j≤i} η_j ≤ Π_{j≤i} min(1, r_j)}``, and draws the
    correction from TV's residual ``max(Mb − Ms, 0)``. It is not lossless.
    """
    draft_tokens, draft_rows, target_rows, uniforms = _check(
        draft_tokens, draft_rows, target_rows, uniforms
    )
    b, gamma = draft_tokens.shape
    accepts = _tv_accepts(drafted_ratios(draft_tokens, draft_rows, target_rows))
    products = np.cumprod(uniforms, axis=1)
    tau = np.zeros(b, dtype=np.int64)
    for i in range(1, gamma + 1):
        tau = np.where(products[:, i - 1] <= accepts[:, i - 1], i, tau)
    law = extra_token_law(draft_tokens, draft_rows, target_rows, tau, "token")
    return tau, sample_rows(law, rng)
