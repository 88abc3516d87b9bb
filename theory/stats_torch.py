"""Path statistics of drafted paths in torch: the fast tier, on the models' device.

The numpy reference is :mod:`specbatch.theory.stats` (THEORY.md §3): per drafted position
``q = Ms(X_{i+1}|X^i)``, ``pt = Mb(X_{i+1}|X^i)``, BV's running weight
``p_i = exp(S_i − max_{0≤j≤i} S_j)`` with ``S_i = Σ_{k≤i} log r_k``, and the residual mass
``Z_{i+1} = Σ_x max(p_i Mb(x|X^i) − Ms(x|X^i), 0)``, plus the draft-side signals a policy can
use before verification (confidence of the drafted token, entropy, top-1 probability, all at
temperature 1). Capture and the live loop both call :func:`path_stats_torch`.
"""

from __future__ import annotations


def probs_at(logits, temperature: float):
    """Float64 next-token distributions at temperature T; one-hot at the argmax when T = 0.

    logits:  # [..., V]
    returns  # [..., V] float64
    """
    import torch

    x = logits.double()
    if temperature == 0:
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).double()
    return torch.softmax(x / temperature, dim=-1)


def sample_inverse_cdf(probs, uniforms):
    """Sample one token per row by inverse CDF.  probs # [..., V] float64, uniforms # [...]."""
    import torch

    cdf = torch.cumsum(probs, dim=-1)
    cdf = cdf / cdf[..., -1:]
    idx = torch.searchsorted(cdf, uniforms.to(cdf.dtype).unsqueeze(-1).contiguous(), right=True)
    return idx.squeeze(-1).clamp_(max=probs.shape[-1] - 1)


def path_stats_torch(draft_tokens, draft_logits, target_logits, temperature: float,
                     gamma=None) -> dict:
    """THEORY.md §3 statistics of P drafted paths, on the logits' device, in float64.

    The torch tier of :func:`specbatch.theory.stats.position_stats` (numpy reference; parity
    test in tests/theory/test_stats_torch.py), plus the draft's temperature-1 signals. Capture
    calls it on whole drafted paths; the live loop on paths of which the target scored only
    the first γ_b tokens (``gamma``): there ``pt = z = 0`` past γ_b, entries that no draft
    length s ≤ γ_b reads (THEORY.md §3: h_i for i < s uses ``Z_{i+1}`` and ``p_i``).

    draft_tokens:  # [P, K]       int64
    draft_logits:  # [P, K, V]    Ms logits at X^i, i = 0..K-1
    target_logits: # [P, G+1, V]  Mb logits at X^i, i = 0..G, G ≤ K (G = K without ``gamma``)
    gamma:         # [P] int64 or None: positions scored per path (≤ G; default K)
    returns dict of numpy float64 arrays # [P, K]: q, pt, p, z, draft_conf, entropy, top1
    """
    import torch

    k = draft_tokens.shape[1]
    g = min(k, target_logits.shape[1] - 1 if gamma is not None else k)
    tok = draft_tokens.unsqueeze(-1)
    ms = probs_at(draft_logits, temperature)
    mb = probs_at(target_logits[:, :g], temperature)
    q = ms.gather(-1, tok).squeeze(-1)
    pt = torch.zeros_like(q)
    pt[:, :g] = mb.gather(-1, tok[:, :g]).squeeze(-1)
    if gamma is not None:
        inside = torch.arange(k, device=q.device)[None, :] < gamma.to(q.device)[:, None]
        pt = torch.where(inside, pt, 0.0)
    # p_i = exp(S_i − max_{0≤j≤i} S_j), S_i = Σ log r (THEORY.md §3)
    log_r = torch.log(pt) - torch.log(q)
    s = torch.cumsum(log_r, dim=1)
    running = torch.clamp(torch.cummax(s, dim=1).values, min=0.0)
    p = torch.nan_to_num(torch.exp(s - running), nan=0.0)
    p_prev = torch.cat([torch.ones_like(p[:, :1]), p[:, :-1]], dim=1)
    z = torch.zeros_like(q)
    z[:, :g] = torch.clamp(p_prev[:, :g].unsqueeze(-1) * mb - ms[:, :g], min=0.0).sum(-1)
    if gamma is not None:
        z = torch.where(inside, z, 0.0)
    logp1 = torch.log_softmax(draft_logits.double(), dim=-1)
    p1 = logp1.exp()
    out = {
        "q": q, "pt": pt, "p": p, "z": z,
        "draft_conf": p1.gather(-1, tok).squeeze(-1),
        "entropy": (-(p1 * logp1).nan_to_num(0.0)).sum(-1).clamp(min=0.0),
        "top1": p1.max(-1).values,
    }
    return {name: v.cpu().numpy() for name, v in out.items()}
