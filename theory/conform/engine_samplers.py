"""Other engines' rejection samplers, correct and broken, re-typed from their descriptions
(never copied) for ``specbatch conform``'s catalogue (:mod:`specbatch.theory.conform.catalogue`).

- SGLang's tree sampler, ``TreeSpeculativeSamplingTargetOnly`` (sgl-kernel
  ``csrc/speculative/speculative_sampling.cuh``, called as ``tree_speculative_sampling_target_only``
  from the EAGLE verify path), on a chain (one candidate per level). At each level the coin ``u``
  accepts the candidate x when ``u ≤ prob_acc / threshold_acc`` or ``Mb(x) ≥ threshold_single``,
  ``prob_acc`` the target mass of the candidates tried at this level (on a chain: ``Mb(x)``). A
  rejected candidate's draft probability is set to its target probability, and the final token is
  drawn from ``relu(Mb − draft)`` at the last accepted node: ``Mb`` without the rejected token, or
  ``Mb`` itself after a fully accepted chain. The draft is deterministic ("target only": no draft
  probabilities), so at ``threshold_single = threshold_acc = 1`` it is lossless for greedy drafts
  (it then equals vLLM's standard rule without draft probabilities). The thresholds are
  ``--speculative-accept-threshold-single`` / ``--speculative-accept-threshold-acc``
  (``ServerArgs`` in ``python/sglang/srt/server_args.py``); below 1 they accept more and are
  lossy by design.
- vllm-ascend's block verification before its fix (issue #7807, fixed by PR #7808 in
  ``vllm_ascend/sample/rejection_sampler.py``, ``rejection_random_sample_block_verify_pytorch`` and
  ``sample_recovered_tokens``): the block is accepted up to the longest prefix whose product of
  uniforms is below the product of the token-wise acceptance probabilities,
  ``τ = max{i : Π_{j≤i} η_j < Π_{j≤i} min(1, r_j)}``, and the correction is drawn from the
  token-wise residual ``max(Mb − Ms, 0)`` instead of Sun et al.'s ``max(p_τ Mb − Ms, 0)``. Not
  lossless (THEORY.md §3).

Every function has the padded engine signature of ``specbatch conform``.
"""

from __future__ import annotations

import torch

from specbatch.theory.conform.samplers import emit_tokens as _emit
from specbatch.theory.conform.vllm_modes import drafted, race


def sglang_chain(draft_token_ids, draft_probs, target_probs, generator=None,
                 threshold_single: float = 1.0, threshold_acc: float = 1.0):
    """SGLang ``tree_speculative_sampling_target_only`` on a chain (module doc)."""
    b, gamma = draft_token_ids.shape
    coin = torch.rand((b, gamma), generator=generator, dtype=torch.float64)
    pt = drafted(target_probs, draft_token_ids)  # [B, γ] Mb(x_i | X^{i-1})
    ok = (coin <= pt / threshold_acc) | (pt >= threshold_single)
    tau = torch.cumprod(ok.long(), dim=1).sum(dim=1)
    rows = torch.arange(b)
    weights = target_probs[rows, tau].double().clone()  # [B, V]
    rejected = tau < gamma
    drop = draft_token_ids[rows, tau.clamp(max=gamma - 1)]
    weights[rows[rejected], drop[rejected]] = 0.0
    weights = torch.where(weights.sum(1, keepdim=True) > 0, weights,
                          target_probs[rows, tau].double())
    return _emit(draft_token_ids, tau, race(weights, generator))


def sglang_single_half(draft_token_ids, draft_probs, target_probs, generator=None):
    """SGLang with ``speculative_accept_threshold_single = 0.5`` (lossy by design)."""
    return sglang_chain(draft_token_ids, draft_probs, target_probs, generator,
                        threshold_single=0.5)


def sglang_acc_half(draft_token_ids, draft_probs, target_probs, generator=None):
    """SGLang with ``speculative_accept_threshold_acc = 0.5`` (lossy by design)."""
    return sglang_chain(draft_token_ids, draft_probs, target_probs, generator,
                        threshold_acc=0.5)


def ascend_block_unfixed(draft_token_ids, draft_probs, target_probs, generator=None):
    """vllm-ascend's block verification before PR #7808 (module doc). Not lossless."""
    b, gamma = draft_token_ids.shape
    eta = torch.rand((b, gamma), generator=generator, dtype=torch.float64)
    pt = drafted(target_probs, draft_token_ids)
    q = torch.ones_like(pt) if draft_probs is None else drafted(draft_probs, draft_token_ids)
    accept = torch.clamp(pt / q, max=1.0)  # [B, γ] min(1, r_j)
    below = torch.cumprod(eta, dim=1) < torch.cumprod(accept, dim=1)
    positions = torch.arange(1, gamma + 1)[None, :]
    tau = torch.where(below, positions, 0).max(dim=1).values
    rows = torch.arange(b)
    mb = target_probs[rows, tau].double()
    if draft_probs is None:
        residual = mb.clone()
        residual[rows, draft_token_ids[rows, tau.clamp(max=gamma - 1)]] = 0.0
    else:
        residual = (mb - draft_probs[rows, tau.clamp(max=gamma - 1)].double()).clamp(min=0.0)
    residual = torch.where(residual.sum(1, keepdim=True) > 0, residual, mb)
    weights = torch.where((tau < gamma)[:, None], residual, mb)
    return _emit(draft_token_ids, tau, race(weights, generator))
