"""Batched token and block verification in torch (CPU or CUDA), THEORY.md §2-3.

The serving-side twin of the numpy reference :mod:`theory.verify.reference`: same inputs, same τ for
the same uniforms, same extra-token law (tests/theory/verify/test_torch_batched.py checks both).

Two layouts:

- padded (``lengths`` optional): ``draft_tokens`` # [B, K], ``draft_rows`` # [B, K, V],
  ``target_rows`` # [B, K+1, V], ``uniforms`` # [B, K]; request b uses its first
  ``γ_b = lengths[b]`` draft tokens (default K) and takes its bonus from ``target_rows[b, γ_b]``.
- packed (``offsets`` given, vLLM's ``cu_num_draft_tokens`` with a leading 0) # [B+1]:
  ``draft_tokens`` # [T], ``draft_rows`` # [T, V], ``uniforms`` # [T] with request b at
  ``offsets[b]:offsets[b+1]``, and ``target_rows`` # [T+B, V] holding γ_b + 1 rows per request
  (request b at ``offsets[b] + b``).

Rows may be float32 (the serving case) or float64, and may be one-hot (greedy drafts or
temperature 0). The per-position statistics are float64, computed in log space:
``log r_i = log Mb − log Ms`` of the drafted token, TV accepts on ``η_i < exp(min(log r_i, 0))``
and BV's weights use ``log p_i = S_i − max(0, max_{j≤i} S_j)`` with ``S = cumsum(log r)`` (no
product of many ratios is ever formed).

On CUDA (the padded layout, or the packed one with ``max_len``) :func:`verify_torch` runs the
host-synchronisation-free path of :mod:`specbatch.theory.verify.torch_sync_free` (a fixed
operation count, every ``Z_{i+1}`` computed densely); the lazy path below, with its
data-dependent row selection (``.tolist()``, ``nonzero``), is the CPU default, where it is
faster (benchmarks/verify_compile_bench.py).

Work: TV touches the vocabulary once per request (the residual or bonus row at τ). BV scans
positions backwards from γ (``τ = max{i : η_i < h_i}``, so the first success from the end is
τ) and computes ``Z_{i+1}`` only for requests still unresolved; the residual row computed for
the accepting position is reused as the correction law. Expected vocabulary passes per
request: about ``γ − E[τ] + 1`` instead of γ.

The vocabulary passes (residual rows and ``Z_{i+1}`` for selected positions, a row loop on
CPU and chunked batches on CUDA) live in :mod:`specbatch.theory.verify.torch_residual`. Cost at
B=256, γ=8, V=32000 float32 (noise 0.5 bench, benchmarks/verify_bench.py): TV computes 206
residual rows and copies 50 bonus rows; BV computes 395 residual rows in the scan (268 of
them only for Z) plus 41 at τ = 0 and copies 88 bonus rows, so BV reads about twice the
vocabulary data TV does, and its time is about 1.7x TV's.
"""

from __future__ import annotations

import torch

from specbatch.errors import require
from specbatch.theory.verify.reference import RULES
from specbatch.theory.verify.torch_path_stats import log_block_weights_torch
from specbatch.theory.verify.torch_residual import copy_rows, residual_pass, scan_block, table_rows
from specbatch.theory.verify.torch_sync_free import verify_sync_free


def _as_long(x, device) -> torch.Tensor:
    return torch.as_tensor(x, device=device).long()


def _padded_layout(tokens, draft_rows, target_rows, uniforms, lengths):
    """Check the padded layout; return (tables dict, lengths # [B], tokens # [B, K], uniforms)."""
    require(tokens.dim() == 2, f"draft_tokens: expected [B, K], got {tuple(tokens.shape)}")
    b, k = tokens.shape
    require(
        draft_rows.dim() == 3 and tuple(draft_rows.shape[:2]) == (b, k),
        f"draft_rows: expected [{b}, {k}, V], got {tuple(draft_rows.shape)}",
    )
    v = draft_rows.shape[2]
    require(
        tuple(target_rows.shape) == (b, k + 1, v),
        f"target_rows: expected [{b}, {k + 1}, {v}], got {tuple(target_rows.shape)}",
    )
    require(tuple(uniforms.shape) == (b, k), f"uniforms: expected [{b}, {k}]")
    device = tokens.device
    lengths = (
        torch.full((b,), k, dtype=torch.long, device=device)
        if lengths is None
        else _as_long(lengths, device)
    )
    require(bool(((lengths >= 0) & (lengths <= k)).all()), f"lengths: expected values in 0..{k}")
    arange_b = torch.arange(b, device=device)
    tables = {
        "draft_flat": draft_rows.reshape(b * k, v),
        "target_flat": target_rows.reshape(b * (k + 1), v),
        "d_start": arange_b * k,
        "t_start": arange_b * (k + 1),
    }
    return tables, lengths, tokens, uniforms


def _packed_layout(tokens, draft_rows, target_rows, uniforms, offsets):
    """Check the packed layout and pad its small tensors to [B, K] (uniforms 1 past γ_b).

    returns (tables dict, lengths # [B], tokens # [B, K], uniforms # [B, K])
    """
    device = tokens.device
    offsets = _as_long(offsets, device)
    lengths = offsets[1:] - offsets[:-1]
    b = lengths.numel()
    t = int(offsets[-1]) if b else 0
    require(bool((lengths >= 0).all()), "offsets: expected non-decreasing cumulative counts")
    require(
        tokens.shape == (t,) and draft_rows.dim() == 2 and draft_rows.shape[0] == t,
        f"packed layout: expected draft_tokens [{t}] and draft_rows [{t}, V]",
    )
    v = draft_rows.shape[1]
    require(tuple(target_rows.shape) == (t + b, v), f"target_rows: expected [{t + b}, {v}]")
    require(tuple(uniforms.shape) == (t,), f"uniforms: expected [{t}]")
    k = int(lengths.max()) if b else 0
    request = torch.repeat_interleave(torch.arange(b, device=device), lengths)
    position = torch.arange(t, device=device) - offsets[:-1][request]
    padded_tokens = torch.zeros((b, k), dtype=torch.long, device=device)
    padded_tokens[request, position] = tokens
    padded_uniforms = torch.ones((b, k), dtype=torch.float64, device=device)
    padded_uniforms[request, position] = uniforms
    tables = {
        "draft_flat": draft_rows,
        "target_flat": target_rows,
        "d_start": offsets[:-1],
        "t_start": offsets[:-1] + torch.arange(b, device=device),
    }
    return tables, lengths, padded_tokens, padded_uniforms


def _layout(draft_tokens, draft_rows, target_rows, uniforms, lengths, offsets):
    """Normalise both layouts to flat row tables plus padded [B, K] small tensors.

    returns dict: draft_flat # [*, V], target_flat # [*, V], d_start # [B], t_start # [B],
    lengths # [B], tokens # [B, K], uniforms # [B, K] float64, inside # [B, K] bool
    """
    draft_rows = torch.as_tensor(draft_rows)
    if draft_rows.dtype in (torch.float16, torch.bfloat16):  # vocabulary sums need ≥ float32
        draft_rows = draft_rows.float()
    target_rows = torch.as_tensor(target_rows, device=draft_rows.device).to(draft_rows.dtype)
    device = draft_rows.device
    tokens = _as_long(draft_tokens, device)
    uniforms = torch.as_tensor(uniforms, device=device).double()
    if offsets is None:
        out, lengths, tokens, uniforms = _padded_layout(
            tokens, draft_rows, target_rows, uniforms, lengths)
    else:
        out, lengths, tokens, uniforms = _packed_layout(
            tokens, draft_rows, target_rows, uniforms, offsets)
    k = tokens.shape[1]
    inside = torch.arange(k, device=device)[None, :] < lengths[:, None]
    v = draft_rows.shape[-1]
    bad = inside & ((tokens < 0) | (tokens >= v))
    require(not bool(bad.any()),
            f"draft_tokens: expected token ids in 0..{v - 1}, got {tokens[bad][:1].tolist()}")
    out.update(lengths=lengths, tokens=torch.where(inside, tokens, 0), uniforms=uniforms)
    out["inside"] = inside
    return out


def _drafted_probs(lay) -> tuple[torch.Tensor, torch.Tensor]:
    """``q = Ms(X_i|X^{i-1})`` and ``pt = Mb(X_i|X^{i-1})`` in float64; 1 past each γ. # [B, K]"""
    b, k = lay["tokens"].shape
    device = lay["tokens"].device
    if k == 0:
        empty = torch.zeros((b, 0), dtype=torch.float64, device=device)
        return empty, empty
    position = torch.arange(k, device=device)[None, :]
    inside = lay["inside"]
    d_index = torch.where(inside, lay["d_start"][:, None] + position, 0)
    t_index = torch.where(inside, lay["t_start"][:, None] + position, 0)
    q = lay["draft_flat"][d_index, lay["tokens"]].double()
    pt = lay["target_flat"][t_index, lay["tokens"]].double()
    require(bool((q[inside] > 0).all()), "draft_rows: a drafted token has draft probability 0")
    one = torch.ones_like(q)
    return torch.where(inside, q, one), torch.where(inside, pt, one)


def _accept_token(lay, log_r) -> torch.Tensor:
    """TV's τ: leading successes of ``η_i < min(1, r_i) = exp(min(log r_i, 0))``. # [B] int64"""
    ok = (lay["uniforms"] < torch.exp(torch.clamp(log_r, max=0.0))) & lay["inside"]
    return torch.cumprod(ok.long(), dim=1).sum(dim=1)


def _accept_block(lay, log_r, q, pt, weights):
    """BV's τ, with the residual rows already written at accepting positions.

    ``p_i`` from :func:`specbatch.theory.verify.torch_path_stats.log_block_weights_torch` (log
    space), the backward scan from :func:`specbatch.theory.verify.torch_residual.scan_block`.
    returns (τ # [B] int64, p_full # [B, K+1] float64 ``p_0..p_K``, done # [B] bool)
    """
    b = log_r.shape[0]
    p = torch.exp(log_block_weights_torch(log_r))
    p_full = torch.cat([torch.ones((b, 1), dtype=torch.float64, device=log_r.device), p], dim=1)
    slack = 1e-12 if lay["target_flat"].dtype == torch.float64 else 1e-6
    tau, done = scan_block(lay, p_full, q, pt, weights, slack)
    return tau, p_full, done


def _write_extra_weights(lay, tau, p_full, done, weights) -> None:
    """Fill ``weights`` for the requests not ``done``: bonus rows (τ = γ) and residual rows.

    A residual of zero mass (a probability-0 event reached through rounding) falls back to
    ``Mb(·|X^τ)``. p_full None means TV (w = 1).
    """
    bonus = tau == lay["lengths"]
    rows = torch.nonzero(bonus).flatten()
    copy_rows(lay["target_flat"], lay["t_start"][rows] + tau[rows], weights, rows)
    rows = torch.nonzero(~bonus & ~done).flatten()  # TV corrections, BV corrections at τ = 0
    if rows.numel():
        weight = None if p_full is None else p_full[rows, tau[rows]]
        z = residual_pass(lay, rows, tau[rows], weight, weights)
        empty = rows[z <= 0]  # probability-0 events
        if empty.numel():
            weights[empty] = table_rows(lay, "target", empty, tau[empty])


def accept_and_residual(
    rule: str,
    draft_tokens,
    draft_rows,
    target_rows,
    uniforms,
    *,
    lengths=None,
    offsets=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """τ and the (unnormalised) extra-token weights of every request.

    The weights are the bonus row ``Mb(·|X^γ)`` when τ = γ and the residual otherwise (TV:
    ``max(Mb − Ms, 0)``; BV: ``max(p_τ Mb − Ms, 0)``, at position τ); a residual of zero mass
    (a probability-0 event reached through rounding) falls back to ``Mb(·|X^τ)``.

    returns (τ # [B] int64, weights # [B, V] in the rows' dtype)
    """
    require(rule in RULES, f"rule: expected 'token' or 'block', got {rule!r}")
    lay = _layout(draft_tokens, draft_rows, target_rows, uniforms, lengths, offsets)
    b = lay["tokens"].shape[0]
    device = lay["lengths"].device
    q, pt = _drafted_probs(lay)
    log_r = torch.log(pt) - torch.log(q)  # [B, K], 0 past γ
    weights = torch.empty((b, lay["target_flat"].shape[1]), dtype=lay["target_flat"].dtype,
                          device=device)
    if rule == "token":
        tau, p_full = _accept_token(lay, log_r), None
        done = torch.zeros(b, dtype=torch.bool, device=device)  # weights already written
    else:
        tau, p_full, done = _accept_block(lay, log_r, q, pt, weights)
    _write_extra_weights(lay, tau, p_full, done, weights)
    return tau, weights


def sample_weights(
    weights: torch.Tensor, generator: torch.Generator | None = None, block: int = 128
) -> torch.Tensor:
    """One draw per row of unnormalised ``weights`` # [B, V] -> # [B] int64 (inverse CDF).

    Two levels, so no float64 copy of the whole ``[B, V]`` table is made: the row is cut into
    blocks of ``block`` tokens; block sums (in the rows' dtype, relative error ~1e-7 for
    float32) are accumulated in float64 to pick a block, then a float64 cumulative sum inside
    that block picks the token. ``searchsorted(..., right=True)`` returns the first index whose
    cumulative weight exceeds the target, so a zero-weight token is never drawn; rounding at a
    block's end falls back to the block's last positive token.
    """
    b, v = weights.shape
    device = weights.device
    if b == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    weights = weights.contiguous()
    n_blocks = -(-v // block)
    if n_blocks * block != v:  # pad the last block with zeros (one copy of the table)
        weights = torch.nn.functional.pad(weights, (0, n_blocks * block - v))
    blocks = weights.view(b, n_blocks, block)  # [B, nb, block]
    block_cdf = torch.cumsum(blocks.sum(dim=2).double(), dim=1)  # [B, nb]
    u = torch.rand((b, 1), generator=generator, dtype=torch.float64, device=device)
    target = u * block_cdf[:, -1:]  # [B, 1]
    chosen = torch.searchsorted(block_cdf, target, right=True).clamp_(max=n_blocks - 1)  # [B, 1]
    before = torch.where(
        chosen > 0, block_cdf.gather(1, (chosen - 1).clamp(min=0)), torch.zeros_like(target)
    )
    rows = torch.arange(b, device=device)
    inside = blocks[rows, chosen.flatten()]  # [B, block]
    inner_cdf = torch.cumsum(inside.double(), dim=1)
    index = torch.searchsorted(inner_cdf, target - before, right=True).flatten()
    positive = inside > 0
    last_positive = block - 1 - torch.argmax(positive.flip(1).int(), dim=1)
    # Past the block's last positive token (rounding between the two levels): take that token.
    # A block chosen with zero inner mass (rounding) has no positive token: resample from the
    # whole row's last positive token, a probability-0 event.
    index = torch.minimum(index, last_positive)
    empty = ~positive.any(dim=1)
    token = chosen.flatten() * block + index
    if bool(empty.any()):
        whole = weights[empty] > 0
        token[empty] = weights.shape[1] - 1 - torch.argmax(whole.flip(1).int(), dim=1)
    return token


def verify_torch(
    rule: str,
    draft_tokens,
    draft_rows,
    target_rows,
    uniforms,
    *,
    lengths=None,
    offsets=None,
    generator: torch.Generator | None = None,
    sync_free: bool | None = None,
    max_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a batch with ``rule`` ("token" or "block"); see the module docstring for layouts.

    ``sync_free``: True runs :func:`specbatch.theory.verify.torch_sync_free.verify_sync_free`
    (no host synchronisation, a fixed operation count; the packed layout needs ``max_len`` ≥
    every γ_b, the engine's ``num_speculative_tokens``); False the lazy path above (row loop
    on CPU). None (default): sync-free on CUDA (padded, or packed with ``max_len``), lazy
    otherwise.
    returns (τ # [B] int64, extra token # [B] int64: correction if τ < γ_b, bonus if τ = γ_b)
    """
    if sync_free is None:
        sync_free = ((offsets is None or max_len is not None)
                     and torch.as_tensor(draft_rows).device.type == "cuda")
    if sync_free:
        return verify_sync_free(rule, draft_tokens, draft_rows, target_rows, uniforms,
                                lengths=lengths, offsets=offsets, max_len=max_len,
                                generator=generator)
    tau, weights = accept_and_residual(
        rule, draft_tokens, draft_rows, target_rows, uniforms, lengths=lengths, offsets=offsets
    )
    return tau, sample_weights(weights, generator)


def verify_token_torch(draft_tokens, draft_rows, target_rows, uniforms, **kwargs):
    """Token verification (THEORY.md §2), batched torch.  returns (τ # [B], extra # [B])"""
    return verify_torch("token", draft_tokens, draft_rows, target_rows, uniforms, **kwargs)


def verify_block_torch(draft_tokens, draft_rows, target_rows, uniforms, **kwargs):
    """Block verification (THEORY.md §3), batched torch.  returns (τ # [B], extra # [B])"""
    return verify_torch("block", draft_tokens, draft_rows, target_rows, uniforms, **kwargs)


def extra_token_law_torch(draft_rows, target_rows, tau, rule: str, *, gamma=None, p=None):
    """Law of the extra token (THEORY.md §2-§3), normalised, in float64 torch.

    τ = γ: the bonus law ``Mb(·|X^γ)``; τ < γ: ``max(w Mb(·|X^τ) − Ms(·|X^τ), 0)`` with w = 1 (TV)
    or ``p_τ`` (BV, p_0 = 1), of mass ``Z_{τ+1}``; a zero-mass residual (rounding) falls back to
    ``Mb(·|X^τ)``. The torch tier of :func:`specbatch.theory.verify.reference.extra_token_law` (same
    arguments; parity test) for ragged γ and precomputed BV weights, as the live loop has them.

    draft_rows:  # [n, K, V]   Ms(·|X^i), i = 0..K-1 (K ≥ max γ)
    target_rows: # [n, G+1, V] Mb(·|X^i), i = 0..G (G ≥ max γ)
    tau:         # [n] long
    gamma:       # [n] long    draft length per path (default K)
    p:           # [n, K]      p_1..p_K (BV weights; required for rule "block")
    returns      # [n, V]
    """
    require(rule in RULES, f"rule: expected 'token' or 'block', got {rule!r}")
    n = tau.shape[0]
    ar = torch.arange(n, device=tau.device)
    if gamma is None:
        gamma = torch.full_like(tau, draft_rows.shape[1])
    mb = target_rows[ar, tau]
    ms = draft_rows[ar, tau.clamp(max=draft_rows.shape[1] - 1)]
    if rule == "block":
        require(p is not None, "p: expected BV weights p_1..p_K for rule 'block', got None")
        p0 = torch.cat([torch.ones_like(p[:, :1]), p], dim=1)  # p_0..p_K
        w = p0[ar, tau]
    else:
        w = torch.ones(n, dtype=mb.dtype, device=mb.device)
    residual = (w[:, None] * mb - ms).clamp_(min=0.0)
    law = torch.where((tau < gamma)[:, None], residual, mb)
    mass = law.sum(dim=1, keepdim=True)
    law = torch.where(mass > 0, law, mb)
    return law / law.sum(dim=1, keepdim=True)
