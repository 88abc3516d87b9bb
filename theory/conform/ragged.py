"""The batched, ragged sampler interface of ``specbatch conform`` (vLLM V1's layout).

vLLM V1 (``vllm/v1/sample/rejection_sampler.py``, ``rejection_sample``) verifies a batch whose
requests proposed different numbers of tokens: the drafts of all requests are flattened into
one tensor and ``cu_num_draft_tokens`` holds the cumulative counts. A sampler with
``interface = "ragged"`` has that signature::

    fn(draft_token_ids,      # [T] int64, the drafts of request b at cu[b-1]..cu[b]-1
       cu_num_draft_tokens,  # [B] int64, cumulative draft counts (request b has γ_b drafts)
       draft_probs,          # [T, V] float, Ms rows at the drafted positions; None if greedy
       target_probs,         # [T, V] float, Mb rows at the drafted positions
       bonus_token_ids,      # [B, 1] int64, the token after an all-accepted block, drawn
                             #   by the caller from Mb(·|X^γ_b) (argmax for a greedy target)
       generator,            # torch.Generator
    ) -> output_token_ids    # [B, max_b γ_b + 1] int64: accepted drafts, one more, then -1

A request may have γ_b = 0 (it then emits its bonus token). :func:`call_ragged` adapts the
harness's padded arrays to this layout; the vLLM V1 samplers below are re-typed from the
published kernels (never copied): ``rejection_random_sample_kernel`` (accept while
``Mb(x) / Ms(x) ≥ u``, ``Ms(x) = 1`` without draft probabilities), ``sample_recovered_tokens``
(one exponential race per request over ``max(Mb − Ms, 0)``, or ``Mb`` without the drafted token
when there are no draft probabilities) and ``rejection_greedy_sample_kernel`` (accept while the
draft equals ``argmax Mb``; the first mismatch emits the argmax).
"""

from __future__ import annotations

import numpy as np
import torch

from specbatch.errors import SpecbatchError
from specbatch.theory.verify.reference import sample_rows


def call_ragged(fn, tokens, draft_rows, target_rows, gammas: np.ndarray, greedy_target: bool,
                generator, rng: np.random.Generator) -> torch.Tensor:
    """Call a ragged-interface ``fn`` on padded harness arrays; return its output padded to
    ``[B, γ+1]`` with -1.  tokens # [B, γ], draft_rows # [B, γ, V] or None, target_rows
    # [B, γ+1, V], gammas # [B] drafts per request."""
    b, gamma = tokens.shape
    mask = torch.from_numpy(np.arange(gamma)[None, :] < gammas[:, None])  # [B, γ]
    cu = torch.from_numpy(np.cumsum(gammas).astype(np.int64))  # [B]
    rows = np.arange(b)
    bonus_rows = target_rows[rows, torch.from_numpy(gammas)].double().numpy()  # [B, V]
    bonus = (bonus_rows.argmax(axis=1) if greedy_target else sample_rows(bonus_rows, rng))
    out = fn(tokens[mask], cu, None if draft_rows is None else draft_rows[mask],
             target_rows[:, :gamma][mask], torch.from_numpy(bonus.astype(np.int64))[:, None],
             generator)
    width = int(gammas.max()) + 1
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (b, width):
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise SpecbatchError(f"ragged sampler returned {shape}, expected a tensor of shape "
                             f"[B, max γ_b + 1] = {[b, width]}")
    pad = torch.full((b, gamma + 1 - width), -1, dtype=out.dtype)
    return torch.cat([out, pad], dim=1)


def unflatten(flat: torch.Tensor, start: torch.Tensor, num: torch.Tensor, width: int):
    """Rows ``flat[start_b + i]`` for i < width # [B, width, ...] and the mask ``i < num_b``.
    Reads past the end are clamped (a GPU kernel would read whatever is there)."""
    position = torch.arange(width)[None, :]
    valid = position < num[:, None]
    if flat.shape[0] == 0:
        return flat.new_zeros((len(num), width) + tuple(flat.shape[1:])), valid
    index = (start[:, None] + position).clamp(0, flat.shape[0] - 1)
    return flat[index], valid


def _layout(cu, misaligned: bool):
    """(start # [B], num # [B], max_spec_len). ``misaligned``: the ragged-batch bug of
    assuming every request has max_spec_len drafts (start_b = b · max_spec_len)."""
    num = cu - torch.cat([cu.new_zeros(1), cu[:-1]])
    width = int(num.max()) if len(num) else 0
    start = torch.arange(len(cu)) * width if misaligned else cu - num
    return start, num, width


def _emit(accepted_tokens, tau, extra, width: int) -> torch.Tensor:
    """``X^τ``, the extra token, then -1.  # [B, width + 1]"""
    position = torch.arange(width + 1)[None, :]
    padded = torch.cat([accepted_tokens, accepted_tokens.new_zeros((len(tau), 1))], dim=1)
    out = torch.where(position < tau[:, None], padded, -1)
    return torch.where(position == tau[:, None], extra[:, None], out).long()


def vllm_v1_random(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs,
                   bonus_token_ids, generator=None, misaligned: bool = False):
    """vLLM V1 ``rejection_random_sample_kernel`` + ``sample_recovered_tokens`` (module doc)."""
    start, num, width = _layout(cu_num_draft_tokens, misaligned)
    b = len(num)
    tokens, valid = unflatten(draft_token_ids, start, num, width)  # [B, W]
    mb, _ = unflatten(target_probs.double(), start, num, width)  # [B, W, V]
    pt = mb.gather(2, tokens[..., None]).squeeze(2)  # [B, W]
    if draft_probs is None:
        q = torch.ones_like(pt)
        residual = mb.scatter(2, tokens[..., None], 0.0)
    else:
        ms, _ = unflatten(draft_probs.double(), start, num, width)
        q = ms.gather(2, tokens[..., None]).squeeze(2)
        residual = (mb - ms).clamp(min=0.0)
    u = torch.rand((b, width), generator=generator, dtype=torch.float64)
    ok = valid & (q > 0) & (pt / torch.where(q > 0, q, 1.0) >= u)
    tau = torch.cumprod(ok.long(), dim=1).sum(dim=1) if width else num * 0
    race = torch.empty((b, target_probs.shape[-1]), dtype=torch.float64)
    race.exponential_(generator=generator)  # one race per request, as vLLM
    at = tau.clamp(max=max(width - 1, 0))
    rows = torch.arange(b)
    recovered = (residual[rows, at] / race).argmax(dim=1) if width else tau * 0
    extra = torch.where(tau < num, recovered, bonus_token_ids[:, 0])
    return _emit(tokens, tau, extra, width)


def vllm_v1_greedy(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs,
                   bonus_token_ids, generator=None, tie_accepts: bool = False,
                   misaligned: bool = False):
    """vLLM V1 ``rejection_greedy_sample_kernel`` (temperature 0): non-speculative greedy
    decoding token for token. ``tie_accepts``: the broken variant that accepts a draft whose
    target probability ties the maximum (``Mb(x) ≥ max Mb``) instead of ``x == argmax Mb``."""
    start, num, width = _layout(cu_num_draft_tokens, misaligned)
    tokens, valid = unflatten(draft_token_ids, start, num, width)  # [B, W]
    mb, _ = unflatten(target_probs.double(), start, num, width)  # [B, W, V]
    argmax = mb.argmax(dim=2)  # [B, W] (lowest id on ties, as torch.argmax)
    if tie_accepts:
        same = mb.gather(2, tokens[..., None]).squeeze(2) >= mb.max(dim=2).values
    else:
        same = tokens == argmax
    ok = valid & same
    tau = torch.cumprod(ok.long(), dim=1).sum(dim=1) if width else num * 0
    at = tau.clamp(max=max(width - 1, 0))
    recovered = argmax[torch.arange(len(num)), at] if width else tau * 0
    extra = torch.where(tau < num, recovered, bonus_token_ids[:, 0])
    return _emit(tokens, tau, extra, width)
