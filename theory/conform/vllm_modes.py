"""vLLM's rejection-sampling modes, re-implemented from the published algorithm (THEORY.md §2-3).

Written from the Model Runner V2 sampler of vLLM (github.com/vllm-project/vllm), not copied:

- ``vllm/v1/worker/gpu/spec_decode/rejection_sampler.py``, ``RejectionSampler.__init__``:
  ``rejection_sample_method`` selects ``standard``, ``block`` (``use_block_verification``) or
  ``synthetic`` (fixed per-position acceptance rates, converted from unconditional to
  conditional rates by ``vllm/v1/spec_decode/utils.py::unconditional_to_conditional_rates``,
  ``c_i = a_i / a_{i-1}``).
- ``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``:
  ``_rejection_kernel`` walks the drafted positions. Standard: accept while
  ``Mb(x) > u · Ms(x)`` (strict; ``u`` never 0, ``tl_rand32(..., includes_zero=False)``); without
  draft probabilities (``draft_sample_method = "greedy"``: the draft proposes its argmax) the
  draft's probability is taken as 1, so the drafted token is accepted with probability
  ``Mb(x̂)``. Block (Sun et al. 2024): ``log p_i = min(log p_{i-1} + log Mb − log Ms, 0)``
  (``_compute_cumulative_log_p_kernel``), ``h_i = Z_{i+1} / (Z_{i+1} + 1 − p_i)`` (1 when the
  denominator is 0) for i < γ and ``h_γ = p_γ``, ``τ = max{i : u_i ≤ h_i}``; ``Z_{i+1}`` sums
  ``max(p_i Mb − Ms, 0)`` over the vocabulary (``_compute_local_residual_mass_kernel``) or, for
  a one-hot draft, is ``p_i (1 − Mb(X_{i+1}))`` (``_compute_global_residual_mass``).
  Synthetic: accept while ``u_i < c_i``, whatever the models say.
- ``_resample_kernel``: the extra token is drawn from the target row at the bonus position,
  otherwise from the residual ``max(w Mb − Ms, 0)`` with ``w = p_τ`` (block) or 1, and for a
  one-hot draft from ``Mb`` with the rejected drafted token removed; the draw is a Gumbel-max
  over the vocabulary (here its equivalent exponential race ``argmax r(x) / E_x``).

Every function has the engine signature of ``specbatch conform``:
``fn(draft_token_ids [B, γ] int64, draft_probs [B, γ, V] or None, target_probs [B, γ+1, V],
generator) -> output_token_ids [B, γ+1] int64``: the accepted draft tokens, the extra token,
then ``-1`` placeholders. Batched torch, any device, probabilities in float64 internally.
"""

from __future__ import annotations

import torch

#: Unconditional per-position acceptance rates of the synthetic mode (``a_i = 0.8^i``):
#: conditional rate 0.8 at every position.
SYNTHETIC_RATES = tuple(0.8 ** (i + 1) for i in range(16))


def conditional_rates(unconditional) -> list[float]:
    """``c_i = a_i / a_{i-1}`` (``a_0 = 1``), 0 once an earlier rate is 0."""
    out, prev = [], 1.0
    for a in unconditional:
        out.append(a / prev if prev > 0.0 else 0.0)
        prev = a
    return out


def _uniforms(shape, generator, device) -> torch.Tensor:
    """Uniforms on (0, 1], like vLLM's ``tl_rand32(..., includes_zero=False)``."""
    return 1.0 - torch.rand(shape, generator=generator, dtype=torch.float64, device=device)


def drafted(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``probs[b, i, tokens[b, i]]`` in float64.  probs # [B, γ(+1), V], tokens # [B, γ]"""
    return probs[:, : tokens.shape[1]].gather(2, tokens[..., None]).squeeze(2).double()


def race(weights: torch.Tensor, generator) -> torch.Tensor:
    """One draw per row of non-negative ``weights`` # [B, V]: ``argmax_x w(x) / E_x``.

    ``E_x ~ Exp(1)`` i.i.d. (the exponential race, the same law as Gumbel-max on
    ``log w``); a zero-weight token scores 0 and is never drawn while the row has mass.
    """
    e = torch.empty(weights.shape, dtype=torch.float64, device=weights.device)
    e.exponential_(generator=generator)
    return torch.argmax(weights.double() / e.clamp_(min=1e-300), dim=1)


def _extra_weights(draft_tokens, draft_probs, target_probs, tau, weight) -> torch.Tensor:
    """Unnormalised law of the extra token at position τ (``_resample_kernel``).  # [B, V]

    τ = γ: ``Mb(·|X^γ)``. Otherwise ``max(w Mb − Ms, 0)`` (``w`` # [B], 1 for standard), and
    for a one-hot draft (``draft_probs`` None) ``Mb`` with the rejected drafted token removed.
    """
    b, gamma = draft_tokens.shape
    rows = torch.arange(b, device=draft_tokens.device)
    mb = target_probs[rows, tau].double()
    at = tau.clamp(max=gamma - 1)
    if draft_probs is None:
        residual = mb.clone()
        residual[rows, draft_tokens[rows, at]] = 0.0
    else:
        residual = (weight[:, None] * mb - draft_probs[rows, at].double()).clamp_(min=0.0)
    # A residual without mass (reachable in synthetic mode, or through rounding) is left by
    # vLLM to a Gumbel argmax over all -inf logits; here it falls back to the target row.
    residual = torch.where(residual.sum(dim=1, keepdim=True) > 0, residual, mb)
    return torch.where((tau < gamma)[:, None], residual, mb)


def _emit(draft_tokens, tau, extra) -> torch.Tensor:
    """Engine output: ``X^τ``, the extra token, then -1.  # [B, γ+1] int64"""
    b, gamma = draft_tokens.shape
    position = torch.arange(gamma + 1, device=draft_tokens.device)[None, :]
    padded = torch.cat([draft_tokens, draft_tokens[:, :1]], dim=1)
    out = torch.where(position < tau[:, None], padded, -1)
    return torch.where(position == tau[:, None], extra[:, None], out).long()


def _standard_tau(draft_tokens, draft_probs, target_probs, u, rates=None) -> torch.Tensor:
    """Leading accepted positions: ``Mb(x) > u Ms(x)`` (or ``u < c_i`` with ``rates``)."""
    if rates is not None:
        ok = u < rates[None, :]
    else:
        pt = drafted(target_probs, draft_tokens)
        q = 1.0 if draft_probs is None else drafted(draft_probs, draft_tokens)
        ok = pt > u * q
    return torch.cumprod(ok.long(), dim=1).sum(dim=1)


def vllm_standard(draft_token_ids, draft_probs, target_probs, generator=None):
    """vLLM ``rejection_sample_method = "standard"``; greedy drafts when ``draft_probs`` is None."""
    u = _uniforms(draft_token_ids.shape, generator, draft_token_ids.device)
    tau = _standard_tau(draft_token_ids, draft_probs, target_probs, u)
    one = torch.ones(tau.shape, dtype=torch.float64, device=tau.device)
    weights = _extra_weights(draft_token_ids, draft_probs, target_probs, tau, one)
    return _emit(draft_token_ids, tau, race(weights, generator))


def vllm_synthetic(draft_token_ids, draft_probs, target_probs, generator=None,
                   rates=SYNTHETIC_RATES):
    """vLLM ``rejection_sample_method = "synthetic"``: fixed acceptance rates, lossy by design."""
    gamma = draft_token_ids.shape[1]
    cond = torch.tensor(conditional_rates(rates[:gamma]), dtype=torch.float64,
                        device=draft_token_ids.device)
    u = _uniforms(draft_token_ids.shape, generator, draft_token_ids.device)
    tau = _standard_tau(draft_token_ids, draft_probs, target_probs, u, cond)
    one = torch.ones(tau.shape, dtype=torch.float64, device=tau.device)
    weights = _extra_weights(draft_token_ids, draft_probs, target_probs, tau, one)
    return _emit(draft_token_ids, tau, race(weights, generator))


def _block_thresholds(draft_tokens, draft_probs, target_probs):
    """``p_0..p_γ`` # [B, γ+1] and ``h_1..h_γ`` # [B, γ] of vLLM's block mode (float64)."""
    b, gamma = draft_tokens.shape
    pt = drafted(target_probs, draft_tokens)
    q = torch.ones_like(pt) if draft_probs is None else drafted(draft_probs, draft_tokens)
    log_p = torch.zeros(b, dtype=torch.float64, device=draft_tokens.device)
    ps = [torch.ones_like(log_p)]
    for i in range(gamma):  # the cumulative clipped log ratio, position by position
        log_p = torch.clamp(log_p + torch.log(pt[:, i]) - torch.log(q[:, i]), max=0.0)
        ps.append(torch.exp(log_p))
    p = torch.stack(ps, dim=1)
    mb = target_probs[:, 1:gamma].double()  # rows at X^1..X^{γ-1}
    if draft_probs is None:
        z = p[:, 1:gamma] * (1.0 - pt[:, 1:])
    else:
        z = (p[:, 1:gamma, None] * mb - draft_probs[:, 1:gamma].double()).clamp(min=0.0).sum(2)
    denom = z + 1.0 - p[:, 1:gamma]
    h = torch.where(denom > 0, z / torch.where(denom > 0, denom, 1.0), 1.0)
    return p, torch.cat([h, p[:, gamma:]], dim=1)


def vllm_block(draft_token_ids, draft_probs, target_probs, generator=None):
    """vLLM ``rejection_sample_method = "block"`` (block verification, THEORY.md §3)."""
    gamma = draft_token_ids.shape[1]
    u = _uniforms(draft_token_ids.shape, generator, draft_token_ids.device)
    p, h = _block_thresholds(draft_token_ids, draft_probs, target_probs)
    positions = torch.arange(1, gamma + 1, device=draft_token_ids.device)[None, :]
    tau = torch.where(u <= h, positions, 0).max(dim=1).values
    weight = p.gather(1, tau[:, None]).squeeze(1)
    weights = _extra_weights(draft_token_ids, draft_probs, target_probs, tau, weight)
    return _emit(draft_token_ids, tau, race(weights, generator))
