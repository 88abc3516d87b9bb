"""TV and BV in torch without host synchronisation (THEORY.md §2-3), padded ragged layout.

The device path of :func:`specbatch.theory.verify.torch_batched.verify_torch`: a fixed sequence of
tensor operations whose number does not depend on the batch or on the data (no ``.item()``,
``.tolist()``, ``nonzero`` or Python loop over requests), so a CUDA stream never waits for the
host and the whole call can be captured in a CUDA graph or compiled by ``torch.compile``.

Inputs: :mod:`specbatch.theory.verify.torch_batched`'s padded layout (``draft_tokens`` # [B, K],
``draft_rows`` # [B, K, V], ``target_rows`` # [B, K+1, V], ``uniforms`` # [B, K], ``lengths``
# [B], γ_b ≤ K, default K) or its packed layout (vLLM's ``cu_num_draft_tokens`` as ``offsets``
# [B+1]) with ``max_len`` ≥ every γ_b given by the caller, so that the padded size is known
without reading the offsets back. They are trusted: the data-dependent checks of the lazy path
(token ids in range, drafted tokens of positive draft probability) would each be a host
synchronisation, so only shapes are checked.

Acceptance is half-open, ``η < threshold``, for both rules: a threshold of 0 (a drafted token
the target gives probability 0) is never accepted, even at ``η = 0``.

Work: TV reads the drafted tokens' probabilities and one row pair at τ; BV computes every
``Z_{i+1}`` (i = 1..K−1) densely, ``max(p_i Mb − Ms, 0)`` summed over the vocabulary one position at
a time (temporaries of [B, V], not [B, K, V]), i.e. one pass over both tables — the work the lazy
path's backward scan skips where a bound decides is done here unconditionally, in exchange for no
data-dependent control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbatch.errors import require
from specbatch.theory.verify.torch_path_stats import log_block_weights_torch


def _check_shapes(tokens, draft_rows, target_rows, uniforms) -> None:
    require(tokens.dim() == 2, f"draft_tokens: expected [B, K], got {tuple(tokens.shape)}")
    b, k = tokens.shape
    require(draft_rows.dim() == 3 and tuple(draft_rows.shape[:2]) == (b, k),
            f"draft_rows: expected [{b}, {k}, V], got {tuple(draft_rows.shape)}")
    v = draft_rows.shape[2]
    require(tuple(target_rows.shape) == (b, k + 1, v),
            f"target_rows: expected [{b}, {k + 1}, {v}], got {tuple(target_rows.shape)}")
    require(tuple(uniforms.shape) == (b, k), f"uniforms: expected [{b}, {k}]")


@dataclass(frozen=True)
class _Batch:
    """Both layouts as flat row tables plus padded [B, K] small tensors.

    ``draft_flat`` # [*, V], ``target_flat`` # [*, V]; request b's rows start at
    ``d_start[b]`` / ``t_start[b]``; ``tokens``, ``uniforms`` # [B, K] (0 and 1 past γ_b);
    ``views``: the padded [B, K, V] / [B, K+1, V] tables when given (rows at one position are
    then strided views, not gathered copies).
    """

    draft_flat: torch.Tensor
    target_flat: torch.Tensor
    d_start: torch.Tensor
    t_start: torch.Tensor
    lengths: torch.Tensor
    tokens: torch.Tensor
    uniforms: torch.Tensor
    views: tuple | None

    def draft_at(self, position) -> torch.Tensor:
        """``Ms(·|X^i)`` rows # [B, V]; ``position`` an int or a [B] tensor (meaningful < γ_b)."""
        if self.views is not None and isinstance(position, int):
            return self.views[0][:, position]
        if self.draft_flat.shape[0] == 0:  # no drafted token in the whole batch
            return self.target_flat.new_zeros((self.lengths.shape[0], self.target_flat.shape[1]))
        return self.draft_flat[(self.d_start + position).clamp(max=self.draft_flat.shape[0] - 1)]

    def target_at(self, position) -> torch.Tensor:
        """``Mb(·|X^i)`` rows # [B, V]; ``position`` an int or a [B] tensor (meaningful ≤ γ_b)."""
        if self.views is not None and isinstance(position, int):
            return self.views[1][:, position]
        # past γ_b (the dense Z passes) the row belongs to another request or is clamped to
        # the table: those values are masked out by the thresholds
        last = self.target_flat.shape[0] - 1
        return self.target_flat[(self.t_start + position).clamp(max=last)]


def _padded(tokens, draft_rows, target_rows, uniforms, lengths) -> _Batch:
    _check_shapes(tokens, draft_rows, target_rows, uniforms)
    b, k, v = draft_rows.shape
    device = draft_rows.device
    lengths = (torch.full((b,), k, dtype=torch.long, device=device) if lengths is None
               else torch.as_tensor(lengths, device=device).long())
    arange_b = torch.arange(b, device=device)
    return _Batch(draft_rows.reshape(b * k, v), target_rows.reshape(b * (k + 1), v),
                  arange_b * k, arange_b * (k + 1), lengths, tokens, uniforms,
                  (draft_rows, target_rows))


def _packed(tokens, draft_rows, target_rows, uniforms, offsets, max_len: int) -> _Batch:
    """vLLM's packed layout (``offsets`` # [B+1]) padded to ``max_len`` without a host read."""
    device = draft_rows.device
    offsets = torch.as_tensor(offsets, device=device).long()
    b, t = offsets.shape[0] - 1, tokens.shape[0]
    require(draft_rows.dim() == 2 and draft_rows.shape[0] == t and uniforms.shape == (t,),
            f"packed layout: expected draft_tokens [T], draft_rows [T, V], uniforms [T], T = {t}")
    require(tuple(target_rows.shape) == (t + b, draft_rows.shape[1]),
            f"target_rows: expected [{t + b}, {draft_rows.shape[1]}]")
    lengths = offsets[1:] - offsets[:-1]
    position = torch.arange(max_len, device=device)[None, :]
    inside = position < lengths[:, None]
    index = torch.where(inside, offsets[:-1, None] + position, 0).clamp(max=max(t - 1, 0))
    if t == 0:
        padded_tokens = torch.zeros((b, max_len), dtype=torch.long, device=device)
        padded_uniforms = torch.ones((b, max_len), dtype=torch.float64, device=device)
    else:
        padded_tokens = torch.where(inside, tokens[index], 0)
        padded_uniforms = torch.where(inside, uniforms[index], 1.0)
    return _Batch(draft_rows, target_rows, offsets[:-1],
                  offsets[:-1] + torch.arange(b, device=device), lengths, padded_tokens,
                  padded_uniforms, None)


def _thresholds(rule, batch: _Batch):
    """Acceptance thresholds # [B, K] (TV: ``min(1, r_i)``; BV: ``h_i``) and ``p_0..p_K``.

    Past γ_b the threshold is 0 (never accepted). p is None for TV.
    """
    tokens, lengths = batch.tokens, batch.lengths
    b, k = tokens.shape
    position = torch.arange(k, device=tokens.device)[None, :]
    inside = position < lengths[:, None]
    d_index = torch.where(inside, batch.d_start[:, None] + position, 0)
    t_index = torch.where(inside, batch.t_start[:, None] + position, 0)
    q = batch.draft_flat[d_index, tokens].double()
    pt = batch.target_flat[t_index, tokens].double()
    log_r = torch.where(inside, torch.log(pt) - torch.log(q), 0.0)
    if rule == "token":
        return torch.where(inside, torch.exp(torch.clamp(log_r, max=0.0)), 0.0), None
    p = torch.exp(log_block_weights_torch(log_r))  # p_1..p_K
    p_full = torch.cat([torch.ones_like(p[:, :1]), p], dim=1)  # p_0..p_K
    # z[:, j] = Z_{j+2} = Σ_x max(p_{j+1} Mb(x|X^{j+1}) − Ms(x|X^{j+1}), 0), j = 0..K−2, one
    # position at a time (K − 1 passes of [B, V] temporaries, a count fixed by the shapes)
    weight = p_full.to(batch.target_flat.dtype)
    z = torch.stack([(weight[:, i, None] * batch.target_at(i) - batch.draft_at(i)).clamp_(min=0.0)
                     .sum(dim=1) for i in range(1, k)] + [torch.zeros_like(weight[:, 0])], dim=1)
    z = z.double()  # column K−1: unused (h_K = p_K)
    denom = z + 1.0 - p
    inner = torch.where(denom > 0, z / torch.where(denom > 0, denom, 1.0), 1.0)
    position = torch.arange(1, k + 1, device=tokens.device)[None, :]
    last = position == lengths[:, None]
    h = torch.where(last, p, torch.where(position < lengths[:, None], inner, 0.0))
    return h, p_full


def sample_rows_sync_free(weights: torch.Tensor, generator=None) -> torch.Tensor:
    """One inverse-CDF draw per row of non-negative ``weights`` # [B, V] -> # [B] int64.

    ``searchsorted(..., right=True)`` returns the first token whose cumulative weight exceeds
    ``u · total``, so a zero-weight token is never drawn; a draw rounded past the end takes
    the row's last positive token.
    """
    b, v = weights.shape
    cdf = torch.cumsum(weights.double(), dim=1)
    u = torch.rand((b, 1), generator=generator, dtype=torch.float64, device=weights.device)
    index = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
    tokens = torch.arange(v, device=weights.device)
    last_positive = torch.where(weights > 0, tokens, 0).amax(dim=1)
    return torch.minimum(index, last_positive)


def accept_and_weights_sync_free(rule: str, draft_tokens, draft_rows, target_rows, uniforms,
                                 lengths=None, *, offsets=None, max_len: int | None = None
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """τ # [B] int64 and the unnormalised extra-token weights # [B, V], without host sync.

    Padded layout (``lengths`` optional), or packed (``offsets`` # [B+1] and ``max_len`` ≥
    every γ_b, the engine's ``num_speculative_tokens``: a host number, so nothing is read back).
    Weights: ``Mb(·|X^γ)`` when τ = γ, else ``max(w Mb(·|X^τ) − Ms(·|X^τ), 0)`` (w = 1 for TV,
    ``p_τ`` for BV), falling back to ``Mb(·|X^τ)`` when that residual has no mass.
    """
    require(rule in ("token", "block"), f"rule: expected 'token' or 'block', got {rule!r}")
    draft_rows = torch.as_tensor(draft_rows)
    if draft_rows.dtype in (torch.float16, torch.bfloat16):  # vocabulary sums need ≥ float32
        draft_rows = draft_rows.float()
    device = draft_rows.device
    target_rows = torch.as_tensor(target_rows, device=device).to(draft_rows.dtype)
    tokens = torch.as_tensor(draft_tokens, device=device).long()
    uniforms = torch.as_tensor(uniforms, device=device).double()
    if offsets is None:
        batch = _padded(tokens, draft_rows, target_rows, uniforms, lengths)
    else:
        require(max_len is not None and max_len >= 0,
                "max_len: expected the largest draft length (an int) with offsets")
        batch = _packed(tokens, draft_rows, target_rows, uniforms, offsets, max_len)
    b, k = batch.tokens.shape
    if k == 0:
        return torch.zeros(b, dtype=torch.long, device=device), batch.target_at(0).clone()
    threshold, p_full = _thresholds(rule, batch)
    accept = batch.uniforms < threshold
    if rule == "token":
        tau = torch.cumprod(accept.long(), dim=1).sum(dim=1)
        weight = torch.ones(b, dtype=draft_rows.dtype, device=device)
    else:
        position = torch.arange(1, k + 1, device=device)[None, :]
        tau = torch.where(accept, position, 0).max(dim=1).values
        weight = p_full.gather(1, tau[:, None]).squeeze(1).to(draft_rows.dtype)
    mb = batch.target_at(tau)
    ms = batch.draft_at(torch.minimum(tau, (batch.lengths - 1).clamp(min=0)))
    residual = (weight[:, None] * mb - ms).clamp_(min=0.0)
    law = torch.where((tau < batch.lengths)[:, None], residual, mb)
    law = torch.where(law.sum(dim=1, keepdim=True) > 0, law, mb)
    return tau, law


def verify_sync_free(rule: str, draft_tokens, draft_rows, target_rows, uniforms, *,
                     lengths=None, offsets=None, max_len: int | None = None,
                     generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a batch with ``rule`` without host synchronisation (padded, or packed with
    ``offsets`` and ``max_len``; see :func:`accept_and_weights_sync_free`).

    returns (τ # [B] int64, extra token # [B] int64: correction if τ < γ_b, bonus if τ = γ_b)
    """
    tau, weights = accept_and_weights_sync_free(rule, draft_tokens, draft_rows, target_rows,
                                                uniforms, lengths, offsets=offsets,
                                                max_len=max_len)
    return tau, sample_rows_sync_free(weights, generator)
