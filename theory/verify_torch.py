"""Batched token and block verification in torch (CPU or CUDA), THEORY.md §2-3.

The serving-side twin of the numpy reference :mod:`theory.verify`: same inputs, same τ for the
same uniforms, same extra-token law (tests/theory/test_verify_torch.py checks both).

Two layouts:

- padded (``lengths`` optional): ``draft_tokens`` # [B, K], ``draft_rows`` # [B, K, V],
  ``target_rows`` # [B, K+1, V], ``uniforms`` # [B, K]; request b uses its first
  ``γ_b = lengths[b]`` draft tokens (default K) and takes its bonus from ``target_rows[b, γ_b]``.
- packed (``offsets`` given, vLLM's ``cu_num_draft_tokens`` with a leading 0) # [B+1]:
  ``draft_tokens`` # [T], ``draft_rows`` # [T, V], ``uniforms`` # [T] with request b at
  ``offsets[b]:offsets[b+1]``, and ``target_rows`` # [T+B, V] holding γ_b + 1 rows per request
  (request b at ``offsets[b] + b``).

Rows may be float32 (the serving case) or float64, and may be one-hot (greedy drafts or
temperature 0). The per-position statistics are computed in float64 in log space:
``log r_i = log Mb − log Ms`` of the drafted token, TV accepts on ``η_i ≤ exp(min(log r_i, 0))``
and BV's weights use ``log p_i = S_i − max(0, max_{j≤i} S_j)`` with ``S = cumsum(log r)`` (no
product of many ratios is ever formed). Vocabulary reductions accumulate in float64.

Work: TV touches the vocabulary once per request (the residual or bonus row at τ). BV scans
positions backwards from γ (``τ = max{i : η_i ≤ h_i}``, so the first success from the end is
τ) and computes ``Z_{i+1}`` only for requests still unresolved; the residual row computed for
the accepting position is reused as the correction law. Expected vocabulary passes per
request: about ``γ − E[τ] + 1`` instead of γ.

On CPU both the residual rows and the BV scan run one request at a time (``CPU_ROW_LOOP``):
``Ms − p_i · Mb`` is one ``torch.sub(..., alpha=p_i)`` pass over the two table rows written
straight into the request's weights row, then a clamp and a sum (no gathered copies, no tensor
op per scan step). CUDA takes the batched path (gather, multiply, subtract, clamp, sum in
chunks). Cost at B=256, γ=8, V=32000 float32 (noise 0.5 bench): TV computes 206 residual
rows and copies 50 bonus rows; BV computes 395 residual rows in the scan (268 of them only
for Z) plus 41 at τ = 0 and copies 88 bonus rows, so BV reads about twice the vocabulary data
TV does, and its time is about 1.7x TV's.
"""

from __future__ import annotations

import torch

from specbatch.errors import require

RULES = ("token", "block")


def _as_long(x, device) -> torch.Tensor:
    return torch.as_tensor(x, device=device).long()


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
        lengths = (
            torch.full((b,), k, dtype=torch.long, device=device)
            if lengths is None
            else _as_long(lengths, device)
        )
        require(
            bool(((lengths >= 0) & (lengths <= k)).all()), f"lengths: expected values in 0..{k}"
        )
        arange_b = torch.arange(b, device=device)
        out = {
            "draft_flat": draft_rows.reshape(b * k, v),
            "target_flat": target_rows.reshape(b * (k + 1), v),
            "d_start": arange_b * k,
            "t_start": arange_b * (k + 1),
        }
    else:
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
        tokens, uniforms = padded_tokens, padded_uniforms
        out = {
            "draft_flat": draft_rows,
            "target_flat": target_rows,
            "d_start": offsets[:-1],
            "t_start": offsets[:-1] + torch.arange(b, device=device),
        }
    inside = torch.arange(k, device=device)[None, :] < lengths[:, None]
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


def _log_block_weights(log_r: torch.Tensor) -> torch.Tensor:
    """``log p_i = S_i − max(0, max_{j≤i} S_j)``, ``S = cumsum(log r)`` (THEORY.md §3). # [B, K]"""
    if log_r.shape[1] == 0:
        return log_r
    s = torch.cumsum(log_r, dim=1)
    running_max = torch.cummax(torch.clamp(s, min=0.0), dim=1).values
    log_p = s - running_max
    return torch.nan_to_num(log_p, nan=-torch.inf)  # -inf - (-inf) cannot occur; be safe


def _rows(lay, which: str, request: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """Full rows ``Ms(·|X^i)`` or ``Mb(·|X^i)`` for (request, i) pairs.  returns # [U, V]"""
    if which == "draft":
        return torch.index_select(lay["draft_flat"], 0, lay["d_start"][request] + position)
    return torch.index_select(lay["target_flat"], 0, lay["t_start"][request] + position)


#: CPU: compute residual rows one at a time straight into the weights table (no gathered
#: copies; the loop costs a few microseconds of dispatch per 32000-token row). False: the
#: batched chunked path that CUDA uses (the tests run both).
CPU_ROW_LOOP = True

#: CPU rows per chunk of a residual pass: the chunk's target and draft copies (2 · 4 rows of
#: 32000 float32 = 1 MiB) stay in a core's L2, so each row is read once from memory and the
#: multiply / subtract / clamp / sum run on cached data.
CPU_CHUNK_ROWS = 16


def _copy_rows(table, index, weights, request) -> None:
    """``weights[request] = table[index]`` # index, request [U], through a cached chunk buffer."""
    if table.device.type == "cpu" and CPU_ROW_LOOP:
        for t, b in zip(index.tolist(), request.tolist()):
            weights[b].copy_(table[t])
        return
    chunk = CPU_CHUNK_ROWS if table.device.type == "cpu" else max(index.numel(), 1)
    buf = torch.empty(
        (min(chunk, index.numel()), table.shape[1]), dtype=table.dtype, device=table.device
    )
    for idx, req in zip(index.split(chunk), request.split(chunk)):
        rows = buf[: idx.numel()]
        torch.index_select(table, 0, idx, out=rows)
        weights.index_copy_(0, req, rows)


def _residual_rows_cpu(lay, request, position, weight, weights, z_star) -> torch.Tensor:
    """CPU twin of :func:`_residual_pass`: one row at a time, straight into ``weights[b]``.

    No gathered copies: ``weights[b] = Ms − w · Mb`` is one pass over the two table rows
    (``torch.sub(..., alpha=w)``), then ``clamp(max=0)`` and a sum give ``−Z``; the row is
    negated only when it is kept. A row that is not kept holds scratch, which is fine: that
    request is still unresolved and gets its extra-token weights written later.

    returns Z # [U] float64
    """
    target, draft = lay["target_flat"], lay["draft_flat"]
    t_list = (lay["t_start"][request] + position).tolist()
    d_list = (lay["d_start"][request] + position).tolist()
    w_list = [1.0] * request.numel() if weight is None else weight.tolist()
    if z_star is None:
        thresholds = [-1.0] * request.numel()  # keep every row
    else:
        thresholds = (torch.nan_to_num(z_star, nan=0.0) * (1.0 - 1e-9)).tolist()
    z = []
    for b, t, d, w, threshold in zip(request.tolist(), t_list, d_list, w_list, thresholds):
        out = weights[b]
        if w == 1.0:
            torch.sub(target[t], draft[d], out=out).clamp_(min=0.0)
            z.append(float(out.sum()))
            continue
        torch.sub(draft[d], target[t], alpha=w, out=out).clamp_(max=0.0)
        z.append(-float(out.sum()))
        if z[-1] >= threshold:
            out.neg_()
    return torch.tensor(z, dtype=torch.float64)


def _residual_pass(lay, request, position, weight, weights, z_star=None) -> torch.Tensor:
    """``r = max(w · Mb(·|X^i) − Ms(·|X^i), 0)`` and ``Z = Σ_x r(x)`` for (request, i) pairs.

    request, position # [U] (distinct requests), weight # [U] float64 or None (w = 1).
    With ``z_star`` # [U] None every row r is written to ``weights[request]``; otherwise only
    the rows whose Z reaches ``z_star`` (less a 1e-9 relative margin: the caller decides τ from
    Z with the exact h formula and writes only a superset here). On CPU the rows go a few at a
    time through scratch buffers that stay in cache (each row is read once from memory); on
    CUDA in one chunk. Sums are taken in the rows' dtype (no float64 copy of a row).

    returns Z # [U] float64
    """
    u = request.numel()
    device = request.device
    if device.type == "cpu" and CPU_ROW_LOOP and u:
        return _residual_rows_cpu(lay, request, position, weight, weights, z_star)
    u = request.numel()
    device = request.device
    z = torch.empty(u, dtype=torch.float64, device=device)
    if u == 0:
        return z
    target, draft = lay["target_flat"], lay["draft_flat"]
    chunk = CPU_CHUNK_ROWS if device.type == "cpu" else u
    buf_t = torch.empty((min(chunk, u), target.shape[1]), dtype=target.dtype, device=device)
    buf_d = torch.empty_like(buf_t)
    parts = [
        (lay["t_start"][request] + position).split(chunk),
        (lay["d_start"][request] + position).split(chunk),
        request.split(chunk),
        z.split(chunk),
        [None] * len(z.split(chunk)) if weight is None else weight.to(target.dtype).split(chunk),
        [None] * len(z.split(chunk))
        if z_star is None
        else (torch.nan_to_num(z_star, nan=0.0) * (1.0 - 1e-9)).split(chunk),
    ]
    for t_index, d_index, req, z_out, w, threshold in zip(*parts):
        n = req.numel()
        resid, rows_d = buf_t[:n], buf_d[:n]
        torch.index_select(target, 0, t_index, out=resid)
        if w is not None:
            resid.mul_(w[:, None])
        torch.index_select(draft, 0, d_index, out=rows_d)
        resid.sub_(rows_d).clamp_(min=0.0)
        z_chunk = resid.sum(dim=1)
        z_out.copy_(z_chunk)
        if threshold is None:
            weights.index_copy_(0, req, resid)
            continue
        keep = torch.nonzero(z_chunk >= threshold).flatten()
        if keep.numel() == n:
            weights.index_copy_(0, req, resid)
        elif keep.numel():
            weights.index_copy_(0, req[keep], resid[keep])
    return z


def _scan_block_cpu(lay, p_full, q, pt, weights, slack) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU BV scan, one request at a time in Python scalars: τ = max{i : η_i ≤ h_i}.

    Same decisions as the batched scan in :func:`accept_and_residual` (h_γ = p_γ; for
    i = γ−1..1 the bound ``Z_{i+1} ≤ p_i − min(p_i pt, q)`` rejects without a vocabulary pass,
    otherwise ``Z_{i+1}`` is computed straight into ``weights[b]``, see
    :func:`_residual_rows_cpu`), without a tensor operation per scan step.
    p_full # [B, K+1] (p_0 = 1), q, pt # [B, K].  returns (τ # [B] int64, done # [B] bool)
    """
    target, draft = lay["target_flat"], lay["draft_flat"]
    lengths, t_start, d_start = (lay[n].tolist() for n in ("lengths", "t_start", "d_start"))
    p_rows, q_rows, pt_rows = p_full.tolist(), q.tolist(), pt.tolist()
    eta_rows = lay["uniforms"].tolist()
    tau, done = [0] * len(lengths), [False] * len(lengths)
    for b, g in enumerate(lengths):
        if g == 0:
            continue
        p, eta = p_rows[b], eta_rows[b]
        if eta[g - 1] <= p[g]:
            tau[b] = g
            continue
        for i in range(g - 1, 0, -1):
            p_i, eta_i = p[i], eta[i - 1]
            bound = p_i - min(p_i * pt_rows[b][i], q_rows[b][i])
            if eta_i < 1.0:
                if eta_i * (1.0 - p_i) / (1.0 - eta_i) > bound * (1.0 + 1e-5) + slack:
                    continue  # Z* > bound: reject without a vocabulary pass
            elif p_i < 1.0:
                continue  # η = 1 > h
            out = weights[b]
            if p_i == 1.0:
                torch.sub(target[t_start[b] + i], draft[d_start[b] + i], out=out).clamp_(min=0.0)
                z = float(out.sum())
            else:
                row_t, row_d = target[t_start[b] + i], draft[d_start[b] + i]
                torch.sub(row_d, row_t, alpha=p_i, out=out).clamp_(max=0.0)
                z = -float(out.sum())
            denom = z + (1.0 - p_i)
            if eta_i <= (z / denom if denom > 0 else 1.0):
                if p_i != 1.0:
                    out.neg_()
                tau[b], done[b] = i, z > 0
                break
    return torch.tensor(tau, dtype=torch.long), torch.tensor(done, dtype=torch.bool)


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
    lengths = lay["lengths"]
    b, k = lay["tokens"].shape
    device = lengths.device
    v = lay["target_flat"].shape[1]
    q, pt = _drafted_probs(lay)
    log_r = torch.log(pt) - torch.log(q)  # [B, K], 0 past γ
    arange_b = torch.arange(b, device=device)
    weights = torch.empty((b, v), dtype=lay["target_flat"].dtype, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)  # weights already written

    if rule == "token":
        ok = (lay["uniforms"] <= torch.exp(torch.clamp(log_r, max=0.0))) & lay["inside"]
        tau = torch.cumprod(ok.long(), dim=1).sum(dim=1)  # leading successes
        p_full = None
    else:
        p = torch.exp(_log_block_weights(log_r))
        p_full = torch.cat([torch.ones((b, 1), dtype=torch.float64, device=device), p], dim=1)
        tau = torch.zeros(b, dtype=torch.long, device=device)
        slack = 1e-12 if lay["target_flat"].dtype == torch.float64 else 1e-6
        if device.type == "cpu" and CPU_ROW_LOOP:
            tau, done = _scan_block_cpu(lay, p_full, q, pt, weights, slack)
        else:
            # i = γ: h_γ = p_γ, no vocabulary work.
            has = lengths > 0
            last = torch.clamp(lengths - 1, min=0)
            accepted_last = has & (
                lay["uniforms"][arange_b, last] <= p[arange_b, last] if k else has
            )
            tau = torch.where(accepted_last, lengths, tau)
            pending = torch.nonzero(~accepted_last & (lengths >= 2)).flatten()
            step = 1
            while pending.numel():  # scan i = γ−1, γ−2, ..., 1 for still-unresolved requests
                position = lengths[pending] - step  # i: h_i needs Z_{i+1} from the rows of X^i
                p_i = p_full[pending, position]
                eta = lay["uniforms"][pending, position - 1]
                # η ≤ h_i ⇔ Z ≥ Z* := η (1 − p_i) / (1 − η). Z = p_i − Σ_x min(p_i Mb, Ms) is at
                # most U = p_i − min(p_i pt, q) of the next drafted token X_{i+1} (column i), so
                # Z* > U rejects without a vocabulary pass (margin: the computed Z exceeds the true
                # one by at most ~eps·(p_i + 1) plus summation error, far below 1e-5 relative plus
                # ``slack``).
                z_star = eta * (1.0 - p_i) / (1.0 - eta)
                bound = p_i - torch.minimum(p_i * pt[pending, position], q[pending, position])
                maybe = ~(z_star > bound * (1.0 + 1e-5) + slack)  # NaN (η = 1, p_i = 1): compute
                rows, position, p_i, eta = pending[maybe], position[maybe], p_i[maybe], eta[maybe]
                z = _residual_pass(lay, rows, position, p_i, weights, z_star[maybe])
                denom = z + (1.0 - p_i)
                h = torch.where(denom > 0, z / torch.where(denom > 0, denom, 1.0), 1.0)
                accept = eta <= h
                winners = rows[accept]
                tau[winners] = position[accept]
                done[winners] = z[accept] > 0
                still = torch.ones_like(pending, dtype=torch.bool)
                still[torch.nonzero(maybe).flatten()[accept]] = False
                pending = pending[still & (lengths[pending] - step > 1)]
                step += 1

    bonus = tau == lengths
    rows = torch.nonzero(bonus).flatten()
    _copy_rows(lay["target_flat"], lay["t_start"][rows] + tau[rows], weights, rows)
    rows = torch.nonzero(~bonus & ~done).flatten()  # TV corrections, BV corrections at τ = 0
    if rows.numel():
        weight = None if p_full is None else p_full[rows, tau[rows]]
        z = _residual_pass(lay, rows, tau[rows], weight, weights)
        empty = rows[z <= 0]  # probability-0 events
        if empty.numel():
            weights[empty] = _rows(lay, "target", empty, tau[empty])
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a batch with ``rule`` ("token" or "block"); see the module docstring for layouts.

    returns (τ # [B] int64, extra token # [B] int64: correction if τ < γ_b, bonus if τ = γ_b)
    """
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


#: rule name -> batched torch verifier
VERIFIERS_TORCH = {"token": verify_token_torch, "block": verify_block_torch}


def extra_token_law_torch(draft_rows, target_rows, tau, rule: str, *, gamma, p):
    """Law of the extra token (THEORY.md §2-§3), normalised, in float64 torch.

    τ = γ: the bonus law ``Mb(·|X^γ)``; τ < γ: ``max(w Mb(·|X^τ) − Ms(·|X^τ), 0)`` with w = 1
    (TV) or ``p_τ`` (BV, p_0 = 1); a zero-mass residual (rounding) falls back to ``Mb(·|X^τ)``.
    The torch tier of :func:`specbatch.theory.verify.extra_token_law` (same argument
    order, parity test) for ragged γ and precomputed BV weights, as the live loop has them.

    draft_rows:  # [n, K, V]   Ms(·|X^i), i = 0..K-1 (K ≥ max γ)
    target_rows: # [n, G+1, V] Mb(·|X^i), i = 0..G (G ≥ max γ)
    tau, gamma:  # [n] long
    p:           # [n, K]      p_1..p_K (BV weights)
    returns      # [n, V]
    """
    n = tau.shape[0]
    ar = torch.arange(n, device=tau.device)
    mb = target_rows[ar, tau]
    ms = draft_rows[ar, tau.clamp(max=draft_rows.shape[1] - 1)]
    if rule == "block":
        p0 = torch.cat([torch.ones_like(p[:, :1]), p], dim=1)  # p_0..p_K
        w = p0[ar, tau]
    else:
        w = torch.ones(n, dtype=mb.dtype, device=mb.device)
    residual = (w[:, None] * mb - ms).clamp_(min=0.0)
    law = torch.where((tau < gamma)[:, None], residual, mb)
    mass = law.sum(dim=1, keepdim=True)
    law = torch.where(mass > 0, law, mb)
    return law / law.sum(dim=1, keepdim=True)
