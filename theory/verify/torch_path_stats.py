"""Path statistics of drafted paths in torch: the fast tier, on the models' device, float64.

One function per quantity of THEORY.md §3, the torch twin of the numpy reference in
:mod:`specbatch.theory.verify.path_stats` (and of the exact tier in
:mod:`specbatch.theory.exact.enumeration`; parity tests in
tests/theory/verify/test_torch_path_stats.py):

- :func:`log_block_weights_torch` — ``log p_i = S_i − max(0, max_{j≤i} S_j)``,
  ``S_i = Σ_{k≤i} log r_k``: one cumsum and one cummax, no product of many ratios is formed;
- :func:`block_weights_torch` — ``p_i`` from the drafted-token probabilities ``q``, ``pt``;
- :func:`residual_masses_torch` — ``Z_{i+1} = Σ_x max(p_i Mb(x|X^i) − Ms(x|X^i), 0)``;
- :func:`draft_signals_torch` — what a policy may read before verification: the drafted
  token's probability, the entropy and the top-1 probability of the draft's temperature-1
  distribution;
- :func:`path_stats_torch` — all of them for P drafted paths given logits (capture and the
  live loop call it).

Shapes: ``P`` paths, ``K`` drafted tokens, ``V`` vocabulary. torch is imported lazily so that
``specbatch.theory`` imports without it.
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


def log_block_weights_torch(log_r):
    """BV's ``log p_i = S_i − max(0, max_{j≤i} S_j)`` with ``S = cumsum(log r)`` (THEORY.md §3).

    Equivalent to the recursion ``p_i = min(p_{i-1} r_i, 1)``, ``p_0 = 1``. A ratio of 0
    (``log r = −inf``) gives ``log p = −inf`` from then on.

    log_r:   # [P, K] float64, ``log Mb(X_i|X^{i-1}) − log Ms(X_i|X^{i-1})``
    returns  # [P, K] float64, ``log p_1..log p_K``
    """
    import torch

    if log_r.shape[1] == 0:
        return log_r
    s = torch.cumsum(log_r, dim=1)
    running_max = torch.cummax(torch.clamp(s, min=0.0), dim=1).values
    return torch.nan_to_num(s - running_max, nan=-torch.inf)  # -inf - (-inf) cannot occur


def block_weights_torch(q, pt):
    """BV's running weights ``p_1..p_K`` from drafted-token probabilities (THEORY.md §3).

    q, pt:   # [P, K] float64, draft / target probability of the drafted token (q > 0)
    returns  # [P, K] float64
    """
    import torch

    return torch.exp(log_block_weights_torch(torch.log(pt) - torch.log(q)))


def residual_masses_torch(p, draft_probs, target_probs):
    """``Z_{i+1} = Σ_x max(p_i Mb(x|X^i) − Ms(x|X^i), 0)`` for i = 0..G-1 (THEORY.md §3).

    p:             # [P, K]     p_1..p_K (``p_0 = 1`` is prepended here)
    draft_probs:   # [P, K, V]  Ms(·|X^i), i = 0..K-1
    target_probs:  # [P, G, V]  Mb(·|X^i), i = 0..G-1, G ≤ K
    returns        # [P, G]     column j holds Z_{j+1}
    """
    import torch

    g = target_probs.shape[1]
    p_prev = torch.cat([torch.ones_like(p[:, :1]), p[:, :-1]], dim=1)  # p_0..p_{K-1}
    diff = p_prev[:, :g].unsqueeze(-1) * target_probs - draft_probs[:, :g]
    return torch.clamp(diff, min=0.0).sum(-1)


def draft_signals_torch(draft_tokens, draft_logits) -> dict:
    """The draft's temperature-1 signals on the drafted path, in float64.

    A policy reads them before verification (a surrogate of acceptance needs a graded
    confidence even when sampling is greedy, so they are always taken at temperature 1).

    draft_tokens:  # [P, K] int64
    draft_logits:  # [P, K, V]
    returns dict of # [P, K] float64: ``draft_conf = Ms_1(X_{i+1}|X^i)``,
    ``entropy = −Σ_x Ms_1 log Ms_1`` (nats), ``top1 = max_x Ms_1``
    """
    import torch

    logp1 = torch.log_softmax(draft_logits.double(), dim=-1)
    p1 = logp1.exp()
    return {
        "draft_conf": p1.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1),
        "entropy": (-(p1 * logp1).nan_to_num(0.0)).sum(-1).clamp(min=0.0),
        "top1": p1.max(-1).values,
    }


def _scored_mask(p_count: int, k: int, gamma, device):
    """``inside[b, i] = i < γ_b`` # [P, K] bool, or None when every position is scored."""
    import torch

    if gamma is None:
        return None
    return torch.arange(k, device=device)[None, :] < gamma.to(device)[:, None]


def path_stats_torch(draft_tokens, draft_logits, target_logits, temperature: float,
                     gamma=None) -> dict:
    """THEORY.md §3 statistics of P drafted paths at temperature T, plus the draft's signals.

    The torch tier of :func:`specbatch.theory.verify.path_stats.position_stats` followed by
    :func:`specbatch.theory.verify.path_stats.draft_signals`. Capture calls it on whole drafted
    paths; the live loop on paths of which the target scored only the first γ_b tokens (``gamma``):
    there ``pt = 0`` past γ_b and ``Z_{i+1} = p_i`` (so ``p_γ_b`` at the first unscored position and
    0 after it), the statistics of a target that puts no mass on the unscored tokens nor anywhere
    the draft does, which keeps every row inside the bounds the trace reader checks; no draft length
    s ≤ γ_b reads these entries (h_i for i < s uses ``Z_{i+1}`` and ``p_i``; h_s = p_s).

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
    inside = _scored_mask(q.shape[0], k, gamma, q.device)
    if inside is not None:
        pt = torch.where(inside, pt, 0.0)
    p = block_weights_torch(q, pt)
    z = torch.zeros_like(q)
    z[:, :g] = residual_masses_torch(p, ms, mb)
    if inside is not None:
        p_prev = torch.cat([torch.ones_like(p[:, :1]), p[:, :-1]], dim=1)  # p_0..p_{K-1}
        z = torch.where(inside, z, p_prev)
    out = {"q": q, "pt": pt, "p": p, "z": z, **draft_signals_torch(draft_tokens, draft_logits)}
    return {name: v.cpu().numpy() for name, v in out.items()}
