"""Token and block verification on full rows: the batched numpy reference (THEORY.md §2-3).

One verification step of B drafted paths at once. Inputs (0-based position i holds ``X^i``):

- ``draft_tokens``  # [B, γ]       int, ``X_1..X_γ``
- ``draft_rows``    # [B, γ, V]    ``Ms(·|c, X^i)``, i = 0..γ-1 (the row ``X_{i+1}`` was drawn from)
- ``target_rows``   # [B, γ+1, V]  ``Mb(·|c, X^i)``, i = 0..γ (the last row serves the bonus)
- ``uniforms``      # [B, γ]       ``η_1..η_γ ~ U[0, 1)``, shared by both rules
- ``rng``           a ``numpy.random.Generator`` for the extra token

Output: τ # [B] (accepted draft tokens) and the extra token # [B] (a *correction* drawn from
the residual when τ < γ, a *bonus* drawn from ``Mb(·|X^γ)`` when τ = γ).

The path statistics (``p_i``, ``Z_{i+1}``, ``h_i``, TV's ``Π min(1, r_j)``) come from the numpy tier
:mod:`specbatch.theory.verify.path_stats`; this module adds the rules' sampling loops written as in
THEORY.md (a loop over the γ positions, vectorised over B) and the laws of τ and of the extra token.
The torch verifier :mod:`specbatch.theory.verify.torch_batched` is tested against it and both
against exact enumeration (:mod:`specbatch.theory.exact.enumeration`).

Extra-token law, one function per tier with one argument order ``(rows, τ, rule, γ, p)``:
:func:`extra_token_law` (numpy), :func:`specbatch.theory.verify.torch_batched.extra_token_law_torch`
(torch), :func:`specbatch.theory.exact.enumeration.extra_token_law_exact` (exact; the model pair and
the path stand for the rows and p).

A residual with zero mass (only possible when τ < γ has probability 0, reached through float
rounding) falls back to the target row ``Mb(·|X^τ)``.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import require
from specbatch.theory.verify.path_stats import (
    block_thresholds,
    block_weights,
    gather_drafted,
    residual_masses,
    token_weights,
)

#: The verification rules: token verification (THEORY.md §2) and block verification (§3).
RULES = ("token", "block")


def check_rule(rule: str) -> None:
    """Raise a one-line error unless ``rule`` is one of :data:`RULES`."""
    if rule not in RULES:
        raise ValueError(f"rule: expected 'token' or 'block', got {rule!r}")


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
    bad = (draft_tokens < 0) | (draft_tokens >= v)
    require(not bad.any(),
            f"draft_tokens: expected token ids in 0..{v - 1}, got {draft_tokens[bad][:1].tolist()}")
    if uniforms is not None:
        uniforms = np.asarray(uniforms, dtype=np.float64)
        require(
            uniforms.shape == (b, gamma), f"uniforms: expected [{b}, {gamma}], got {uniforms.shape}"
        )
    return draft_tokens, draft_rows, target_rows, uniforms


def drafted_probs(draft_tokens, draft_rows, target_rows) -> tuple[np.ndarray, np.ndarray]:
    """``q = Ms(X_i|X^{i-1})`` and ``pt = Mb(X_i|X^{i-1})`` (THEORY.md §1), checked ``q > 0``.

    returns (q # [B, γ], pt # [B, γ])
    """
    q = gather_drafted(draft_rows, draft_tokens)
    require(bool((q > 0).all()), "draft_rows: a drafted token has draft probability 0")
    return q, gather_drafted(target_rows, draft_tokens)


def block_path(draft_tokens, draft_rows, target_rows) -> tuple[np.ndarray, np.ndarray]:
    """BV's weights and thresholds of full-length paths (γ = K everywhere, THEORY.md §3).

    returns (p # [B, γ] ``p_1..p_γ``, h # [B, γ] column i-1 holds ``h_i``)
    """
    q, pt = drafted_probs(draft_tokens, draft_rows, target_rows)
    p = block_weights(q, pt)
    z = residual_masses(p, draft_rows, target_rows)
    return p, block_thresholds(p, z, np.full(p.shape[0], p.shape[1]))


def expected_accepted(draft_tokens, draft_rows, target_rows, rule: str) -> np.ndarray:
    """Per-path ``Σ_i P(τ ≥ i | X^i)``: TV ``Σ_i Π_{j≤i} min(1, r_j)``, BV ``Σ_i p_i`` (§2-3).

    Averaged over draft paths ``X^γ ~ Ms`` this is ``E[τ]`` for both rules. For TV it is also
    the exact ``E[τ | X^γ]``; for BV it is not (``P(τ ≥ i | X^i) = p_i`` only after averaging
    over ``X_{i+1..γ}``; the exact conditional law is :func:`tau_law`). These are the
    per-position values ``P_{i,j}`` a batch allocator ranks (THEORY.md §5).
    returns # [B] float64
    """
    check_rule(rule)
    draft_tokens, draft_rows, target_rows, _ = _check(draft_tokens, draft_rows, target_rows)
    q, pt = drafted_probs(draft_tokens, draft_rows, target_rows)
    weights = token_weights(q, pt) if rule == "token" else block_weights(q, pt)
    return weights.sum(axis=1)


def tau_law(draft_tokens, draft_rows, target_rows, rule: str) -> np.ndarray:
    """Exact law of τ given the whole drafted path ``X^γ`` (summing over the uniforms).

    TV: ``P(τ ≥ i | X^γ) = a_i = Π_{j≤i} min(1, r_j)``, so ``P(τ = i) = a_i − a_{i+1}``.
    BV: τ = max{i : η_i < h_i} with independent uniforms, so
    ``P(τ = i | X^γ) = h_i Π_{j>i} (1 − h_j)`` (h_0 = 1).

    Note for BV: ``P(τ ≥ i | X^i) = p_i`` holds after averaging over the later draft tokens
    ``X_{i+1..γ} ~ Ms``; given the whole path, ``P(τ ≥ i | X^γ) = 1 − Π_{j≥i}(1 − h_j)`` differs
    (the paper's example: draft ``aa`` has ``Σ p_i = 3/4`` but ``E[τ | aa] = 1/2``).

    returns # [B, γ+1]  column i holds P(τ = i | X^γ)
    """
    check_rule(rule)
    draft_tokens, draft_rows, target_rows, _ = _check(draft_tokens, draft_rows, target_rows)
    b, gamma = draft_tokens.shape
    if rule == "token":
        q, pt = drafted_probs(draft_tokens, draft_rows, target_rows)
        at_least = np.concatenate([np.ones((b, 1)), token_weights(q, pt), np.zeros((b, 1))], 1)
        return at_least[:, :-1] - at_least[:, 1:]
    _, h = block_path(draft_tokens, draft_rows, target_rows)
    h = np.concatenate([np.ones((b, 1)), h], 1)
    # survive[:, i] = Π_{j>i} (1 − h_j): no later position accepted.
    survive = np.ones((b, gamma + 1))
    for i in range(gamma - 1, -1, -1):
        survive[:, i] = survive[:, i + 1] * (1.0 - h[:, i + 1])
    return h * survive


def extra_token_law(draft_rows, target_rows, tau, rule: str, *, gamma=None, p=None) -> np.ndarray:
    """Law of the extra token given τ (THEORY.md §2-3), normalised, in float64 numpy.

    τ = γ: the bonus law ``Mb(·|X^γ)``. τ < γ: ``∝ max(w Mb(·|X^τ) − Ms(·|X^τ), 0)`` with
    w = 1 (TV) or ``p_τ`` (BV, p_0 = 1, so BV's τ = 0 residual is TV's); its mass is
    ``Z_{τ+1}``. A zero-mass residual (rounding) falls back to ``Mb(·|X^τ)``. Same arguments
    as the torch tier :func:`specbatch.theory.verify.torch_batched.extra_token_law_torch`.

    draft_rows:   # [B, K, V]    Ms(·|X^i), i = 0..K-1
    target_rows:  # [B, G+1, V]  Mb(·|X^i), i = 0..G (G ≥ max γ)
    tau:          # [B] int      accepted length, 0 ≤ τ ≤ γ
    gamma:        # [B] int      draft length per path (default K)
    p:            # [B, K]       BV weights p_1..p_K (required for rule "block")
    returns       # [B, V] rows summing to 1
    """
    check_rule(rule)
    draft_rows = np.asarray(draft_rows, dtype=np.float64)
    target_rows = np.asarray(target_rows, dtype=np.float64)
    tau = np.asarray(tau, dtype=np.int64)
    b = tau.shape[0]
    gamma = np.full(b, draft_rows.shape[1]) if gamma is None else np.asarray(gamma, np.int64)
    rows = np.arange(b)
    if rule == "token":
        weight = np.ones(b)
    else:
        require(p is not None, "p: expected BV weights p_1..p_K for rule 'block', got None")
        weight = np.concatenate([np.ones((b, 1)), np.asarray(p, dtype=np.float64)], 1)[rows, tau]
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
    """Token verification (THEORY.md §2): accept while ``η_i < min(1, r_i)``.

    returns (τ # [B] int64, extra token # [B] int64)
    """
    draft_tokens, draft_rows, target_rows, uniforms = _check(
        draft_tokens, draft_rows, target_rows, uniforms
    )
    b, gamma = draft_tokens.shape
    q, pt = drafted_probs(draft_tokens, draft_rows, target_rows)
    ratios = pt / q
    alive = np.ones(b, dtype=bool)
    tau = np.zeros(b, dtype=np.int64)
    for i in range(gamma):  # walk i = 1..γ, stop at the first failure
        alive &= uniforms[:, i] < np.minimum(1.0, ratios[:, i])
        tau += alive
    law = extra_token_law(draft_rows, target_rows, tau, "token")
    return tau, sample_rows(law, rng)


def verify_block(draft_tokens, draft_rows, target_rows, uniforms, rng: np.random.Generator):
    """Block verification (THEORY.md §3): ``τ = max{i : η_i < h_i}`` (0 if none).

    returns (τ # [B] int64, extra token # [B] int64)
    """
    draft_tokens, draft_rows, target_rows, uniforms = _check(
        draft_tokens, draft_rows, target_rows, uniforms
    )
    b, gamma = draft_tokens.shape
    p, h = block_path(draft_tokens, draft_rows, target_rows)
    tau = np.zeros(b, dtype=np.int64)
    for i in range(1, gamma + 1):  # the last i with η_i < h_i wins
        tau = np.where(uniforms[:, i - 1] < h[:, i - 1], i, tau)
    law = extra_token_law(draft_rows, target_rows, tau, "block", p=p)
    return tau, sample_rows(law, rng)


def _verify_block_wrong(draft_tokens, draft_rows, target_rows, uniforms, rng):
    """A known **wrong** block verifier (THEORY.md §3), kept only to show the tests catch it.

    It accepts the longest prefix whose product of uniforms is below the product of TV's
    acceptance probabilities, ``τ = max{i : Π_{j≤i} η_j < Π_{j≤i} min(1, r_j)}``, and draws the
    correction from TV's residual ``max(Mb − Ms, 0)``. It is not lossless.
    """
    draft_tokens, draft_rows, target_rows, uniforms = _check(
        draft_tokens, draft_rows, target_rows, uniforms
    )
    b, gamma = draft_tokens.shape
    accepts = token_weights(*drafted_probs(draft_tokens, draft_rows, target_rows))
    products = np.cumprod(uniforms, axis=1)
    tau = np.zeros(b, dtype=np.int64)
    for i in range(1, gamma + 1):
        tau = np.where(products[:, i - 1] < accepts[:, i - 1], i, tau)
    law = extra_token_law(draft_rows, target_rows, tau, "token")
    return tau, sample_rows(law, rng)
