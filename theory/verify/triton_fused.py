"""Fused Triton kernels for token and block verification over ragged batches (THEORY.md §2-3).

One kernel launch per verify call, one program per request, no host synchronisation (the
wrappers only build index tensors and draw uniforms with torch). A program:

1. gathers the drafted tokens' probabilities ``q``, ``pt`` and the uniforms ``η`` of its
   ``γ_b ≤ K_PAD`` positions into registers;
2. TV: ``τ`` = leading successes of ``η_i < min(1, r_i)``. BV: ``log p_i = S_i − max(0,
   max_{j≤i} S_j)`` (``S`` the cumulative sum of ``log r``, one scan), then the backward scan
   ``τ = max{i : η_i < h_i}`` from ``i = γ`` down: ``h_γ = p_γ``; for ``i < γ`` a bound on
   ``Z_{i+1}`` (at most ``p_i − min(p_i Mb(X_{i+1}), Ms(X_{i+1}))``) rejects without touching
   the vocabulary, otherwise ``Z_{i+1} = Σ_x max(p_i Mb(x|X^i) − Ms(x|X^i), 0)`` is summed
   over the vocabulary in blocks; the scan stops at the first acceptance;
3. draws the extra token by inverse CDF (one pass for the mass, one for the cumulative sum)
   from the bonus row ``Mb(·|X^γ)`` or the residual ``max(w Mb(·|X^τ) − Ms(·|X^τ), 0)``
   (w = 1 for TV, ``p_τ`` for BV), the target row when the residual has no mass; a
   zero-weight token is never drawn.

Acceptance is half-open (``η < threshold``), as in the sync-free torch path. Arithmetic is
float64 inside the kernel whatever the rows' dtype (the loads are converted).

Without CUDA the kernels run in Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``
is set before Triton is imported when no GPU is present): correct, and about 500x slower than
eager torch, so only small shapes are practical there.
"""

from __future__ import annotations

import os

import torch

from specbatch.errors import require

if not torch.cuda.is_available():  # CPU tensors can only run in the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

#: Vocabulary block of the kernels' passes and warps per program (untuned: no GPU was at hand;
#: ``block=`` / ``num_warps=`` of the wrappers override them for a sweep).
BLOCK_V = 1024
NUM_WARPS = 4


@triton.jit
def _max_fn(a, b):
    return tl.maximum(a, b)


@triton.jit
def _pick(vec, ks, i):
    """``vec[i]`` of a register vector (0 when ``i`` is out of range)."""
    return tl.sum(tl.where(ks == i, vec, 0.0))


@triton.jit
def _residual_mass(target_ptr, draft_ptr, t_row, d_row, w, V, BLOCK: tl.constexpr):
    """``Σ_x max(w Mb(x) − Ms(x), 0)`` over rows ``t_row`` / ``d_row``."""
    z = w * 0.0
    for v0 in range(0, V, BLOCK):
        cols = v0 + tl.arange(0, BLOCK)
        m = cols < V
        mb = tl.load(target_ptr + t_row + cols, mask=m, other=0.0).to(tl.float64)
        ms = tl.load(draft_ptr + d_row + cols, mask=m, other=0.0).to(tl.float64)
        z += tl.sum(tl.maximum(w * mb - ms, 0.0))
    return z


@triton.jit
def _verify_kernel(tok_ptr, draft_ptr, target_ptr, eta_ptr, u_ptr, d_start_ptr, t_start_ptr,
                   len_ptr, tau_ptr, out_ptr, V, stride_d, stride_t,
                   IS_BLOCK: tl.constexpr, K_PAD: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    d0 = tl.load(d_start_ptr + b)
    t0 = tl.load(t_start_ptr + b)
    g = tl.load(len_ptr + b)
    ks = tl.arange(0, K_PAD)
    inside = ks < g
    toks = tl.load(tok_ptr + d0 + ks, mask=inside, other=0)
    q = tl.load(draft_ptr + (d0 + ks) * stride_d + toks, mask=inside, other=1.0).to(tl.float64)
    pt = tl.load(target_ptr + (t0 + ks) * stride_t + toks, mask=inside, other=1.0).to(tl.float64)
    eta = tl.load(eta_ptr + d0 + ks, mask=inside, other=2.0).to(tl.float64)
    log_r = tl.where(inside, tl.log(pt) - tl.log(q), 0.0)
    if IS_BLOCK:
        s = tl.cumsum(log_r, 0)
        p = tl.exp(s - tl.associative_scan(tl.maximum(s, 0.0), 0, _max_fn))  # p_1..p_K
        tau = g * 0
        found = g * 0
        for j in range(0, g):
            i = g - j  # positions γ, γ−1, ..., 1
            if found == 0:
                p_i = _pick(p, ks, i - 1)
                eta_i = _pick(eta, ks, i - 1)
                h = p_i
                if i < g:
                    bound = p_i - tl.minimum(p_i * _pick(pt, ks, i), _pick(q, ks, i))
                    h = p_i * 0.0
                    if eta_i * (1.0 - p_i) <= bound * (1.0 - eta_i) * (1.0 + 1e-5) + 1e-12:
                        z = _residual_mass(target_ptr, draft_ptr, (t0 + i) * stride_t,
                                           (d0 + i) * stride_d, p_i, V, BLOCK)
                        denom = z + 1.0 - p_i
                        h = tl.where(denom > 0, z / tl.where(denom > 0, denom, 1.0), 1.0)
                if eta_i < h:
                    found = g * 0 + 1
                    tau = i
        w = tl.where(tau > 0, _pick(p, ks, tau - 1), 1.0)
    else:
        ok = (eta < tl.minimum(tl.exp(log_r), 1.0)) & inside
        tau = tl.minimum(tl.min(tl.where(ok, K_PAD, ks), 0), g)
        w = tl.sum(tl.where(ks == 0, 1.0, 0.0)).to(tl.float64)
    t_row = (t0 + tau) * stride_t
    d_row = (d0 + tl.minimum(tau, tl.maximum(g - 1, 0))) * stride_d
    d_limit = tl.where(g > 0, V, 0)  # no draft row to read when γ_b = 0
    res_total = w * 0.0
    mb_total = w * 0.0
    res_last = tau * 0 - 1
    mb_last = tau * 0 - 1
    for v0 in range(0, V, BLOCK):  # pass 1: masses and last positive tokens
        cols = v0 + tl.arange(0, BLOCK)
        m = cols < V
        mb = tl.load(target_ptr + t_row + cols, mask=m, other=0.0).to(tl.float64)
        ms = tl.load(draft_ptr + d_row + cols, mask=cols < d_limit, other=0.0).to(tl.float64)
        res = tl.maximum(w * mb - ms, 0.0)
        res_total += tl.sum(res)
        mb_total += tl.sum(mb)
        res_last = tl.maximum(res_last, tl.max(tl.where(res > 0, cols, -1)))
        mb_last = tl.maximum(mb_last, tl.max(tl.where(mb > 0, cols, -1)))
    use_res = (tau < g) & (res_total > 0)
    total = tl.where(use_res, res_total, mb_total)
    last = tl.where(use_res, res_last, mb_last)
    target = tl.load(u_ptr + b).to(tl.float64) * total
    running = w * 0.0
    count = tau * 0
    for v0 in range(0, V, BLOCK):  # pass 2: first token whose cumulative weight exceeds u·total
        cols = v0 + tl.arange(0, BLOCK)
        m = cols < V
        mb = tl.load(target_ptr + t_row + cols, mask=m, other=0.0).to(tl.float64)
        ms = tl.load(draft_ptr + d_row + cols, mask=cols < d_limit, other=0.0).to(tl.float64)
        law = tl.where(use_res, tl.maximum(w * mb - ms, 0.0), mb)
        cdf = tl.cumsum(law, 0) + running
        count += tl.sum(((cdf <= target) & m).to(tau.dtype))
        running += tl.sum(law)
    tl.store(tau_ptr + b, tau)
    tl.store(out_ptr + b, tl.minimum(count, last))


def _rand(shape, generator, device) -> torch.Tensor:
    """float64 uniforms drawn on the generator's device (CPU generators work on CUDA too)."""
    where = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=where).to(device)


def _launch(rule, tokens, draft_rows, target_rows, uniforms, d_start, t_start, lengths,
            max_len: int, generator, block: int = BLOCK_V, num_warps: int = NUM_WARPS):
    require(rule in ("token", "block"), f"rule: expected 'token' or 'block', got {rule!r}")
    require(draft_rows.stride(1) == 1 and target_rows.stride(1) == 1,
            "rows: expected a contiguous vocabulary dimension")
    b = lengths.shape[0]
    device = draft_rows.device
    tau = torch.empty(b, dtype=torch.long, device=device)
    extra = torch.empty(b, dtype=torch.long, device=device)
    u = _rand(b, generator, device)
    if b:
        _verify_kernel[(b,)](
            tokens, draft_rows, target_rows, uniforms.double().contiguous(), u, d_start, t_start,
            lengths, tau, extra, draft_rows.shape[1], draft_rows.stride(0),
            target_rows.stride(0), IS_BLOCK=rule == "block",
            K_PAD=triton.next_power_of_2(max(max_len, 1)), BLOCK=block, num_warps=num_warps)
    return tau, extra


def verify_triton(rule: str, draft_tokens, draft_rows, target_rows, uniforms, offsets, *,
                  max_len: int, generator=None, **launch) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed (vLLM) layout: ``draft_tokens`` # [T], ``draft_rows`` # [T, V], ``target_rows``
    # [T+B, V] (request b at ``offsets[b] + b``), ``uniforms`` # [T], ``offsets`` # [B+1]
    (``cu_num_draft_tokens`` with a leading 0). ``max_len`` ≥ every γ_b (the engine's
    ``num_speculative_tokens``; a host number, so no device read is needed).

    ``launch``: ``block`` (vocabulary block, a power of 2) and ``num_warps`` of the launch.
    returns (τ # [B] int64, extra token # [B] int64)
    """
    offsets = torch.as_tensor(offsets, device=draft_rows.device).long()
    b = offsets.shape[0] - 1
    arange_b = torch.arange(b, device=draft_rows.device)
    return _launch(rule, draft_tokens.long().contiguous(), draft_rows, target_rows,
                   uniforms, offsets[:-1], offsets[:-1] + arange_b, offsets[1:] - offsets[:-1],
                   max_len, generator, **launch)


def verify_triton_padded(rule: str, draft_tokens, draft_rows, target_rows, uniforms=None, *,
                         lengths=None, generator=None, **launch
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded layout (as :func:`specbatch.theory.verify.torch_batched.verify_torch`):
    ``draft_tokens`` # [B, K], ``draft_rows`` # [B, K, V], ``target_rows`` # [B, K+1, V],
    ``uniforms`` # [B, K] (drawn from ``generator`` when None), ``lengths`` # [B] (default K). No
    copies of the rows.

    returns (τ # [B] int64, extra token # [B] int64)
    """
    b, k = draft_tokens.shape
    device = draft_rows.device
    if uniforms is None:
        uniforms = _rand((b, k), generator, device)
    arange_b = torch.arange(b, device=device)
    lengths = (torch.full((b,), k, dtype=torch.long, device=device) if lengths is None
               else torch.as_tensor(lengths, device=device).long())
    v = draft_rows.shape[2]
    return _launch(rule, draft_tokens.long().contiguous().reshape(-1),
                   draft_rows.contiguous().reshape(b * k, v),
                   target_rows.contiguous().reshape(b * (k + 1), v),
                   torch.as_tensor(uniforms, device=device).reshape(-1), arange_b * k,
                   arange_b * (k + 1), lengths, k, generator, **launch)
