"""Lazy residual passes of the torch verifier (THEORY.md §3): ``Z_{i+1}`` and residual rows.

The vocabulary work of :mod:`specbatch.theory.verify.torch_batched`, for selected (request,
position)
pairs only: the residual ``r = max(w Mb(·|X^i) − Ms(·|X^i), 0)`` (w = 1 for TV, ``p_i`` for BV) and
its mass ``Z = Σ_x r(x)``, the same quantity as
:func:`specbatch.theory.verify.torch_path_stats.residual_masses_torch` (dense, every position) but
computed only where BV's backward scan or the extra token needs it, straight into the extra-token
weights table.

On CPU both the residual rows and the BV scan run one request at a time (``CPU_ROW_LOOP``):
``Ms − p_i · Mb`` is one ``torch.sub(..., alpha=p_i)`` pass over the two table rows written
straight into the request's weights row, then a clamp and a sum (no gathered copies, no tensor
op per scan step). CUDA takes the batched path (gather, multiply, subtract, clamp, sum in
chunks).

Layout dict ``lay`` (from ``verify_torch._layout``): ``draft_flat`` # [*, V],
``target_flat`` # [*, V], ``d_start``/``t_start`` # [B] first row of each request,
``lengths`` # [B], ``uniforms`` # [B, K], ``tokens`` # [B, K], ``inside`` # [B, K].
"""

from __future__ import annotations

import torch


def table_rows(lay, which: str, request: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
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


def copy_rows(table, index, weights, request) -> None:
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


def _residual_row_cpu(out, target_row, draft_row, w: float) -> float:
    """One residual row on CPU, straight into ``out``; returns ``Z = Σ_x max(w Mb − Ms, 0)``.

    w = 1: ``out = max(Mb − Ms, 0)`` is the residual itself. Otherwise ``out = min(Ms − w Mb, 0)``
    is the negated residual (one ``torch.sub(..., alpha=w)`` pass over the two table rows, no
    gathered copies); :func:`_keep_row_cpu` turns it into the residual when it is kept.
    """
    if w == 1.0:
        torch.sub(target_row, draft_row, out=out).clamp_(min=0.0)
        return float(out.sum())
    torch.sub(draft_row, target_row, alpha=w, out=out).clamp_(max=0.0)
    return -float(out.sum())


def _keep_row_cpu(out, w: float) -> None:
    """Make the row :func:`_residual_row_cpu` wrote the residual ``max(w Mb − Ms, 0)``."""
    if w != 1.0:
        out.neg_()


def _residual_rows_cpu(lay, request, position, weight, weights, z_star) -> torch.Tensor:
    """CPU twin of :func:`residual_pass`: one row at a time, straight into ``weights[b]``.

    A row that is not kept holds scratch, which is fine: that request is still unresolved
    and gets its extra-token weights written later.

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
        z.append(_residual_row_cpu(out, target[t], draft[d], w))
        if w != 1.0 and z[-1] >= threshold:
            out.neg_()  # _keep_row_cpu, inlined: this loop runs once per vocabulary row
    return torch.tensor(z, dtype=torch.float64)


def residual_pass(lay, request, position, weight, weights, z_star=None) -> torch.Tensor:
    """``r = max(w · Mb(·|X^i) − Ms(·|X^i), 0)`` and ``Z = Σ_x r(x)`` for (request, i) pairs.

    request, position # [U] (distinct requests), weight # [U] float64 or None (w = 1).
    With ``z_star`` # [U] None every row r is written to ``weights[request]``; otherwise only
    the rows whose Z reaches ``z_star`` (less a 1e-9 relative margin: the caller decides τ from
    Z with the exact h formula and writes only a superset here). On CPU the rows go one at a
    time (:func:`_residual_rows_cpu`) or, without ``CPU_ROW_LOOP``, a few at a time through
    scratch buffers that stay in cache; on CUDA in one chunk. Sums are taken in the rows' dtype
    (no float64 copy of a row).

    returns Z # [U] float64
    """
    u = request.numel()
    device = request.device
    if device.type == "cpu" and CPU_ROW_LOOP and u:
        return _residual_rows_cpu(lay, request, position, weight, weights, z_star)
    z = torch.empty(u, dtype=torch.float64, device=device)
    if u == 0:
        return z
    target, draft = lay["target_flat"], lay["draft_flat"]
    chunk = CPU_CHUNK_ROWS if device.type == "cpu" else u
    buf_t = torch.empty((min(chunk, u), target.shape[1]), dtype=target.dtype, device=device)
    buf_d = torch.empty_like(buf_t)
    n_chunks = len(z.split(chunk))
    parts = [
        (lay["t_start"][request] + position).split(chunk),
        (lay["d_start"][request] + position).split(chunk),
        request.split(chunk),
        z.split(chunk),
        [None] * n_chunks if weight is None else weight.to(target.dtype).split(chunk),
        [None] * n_chunks
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


def _rejects_without_pass(eta: float, p_i: float, pt_next: float, q_next: float,
                          slack: float) -> bool:
    """True when ``η_i > h_i`` is certain without computing ``Z_{i+1}`` (THEORY.md §3).

    ``η < h_i ⇔ Z > Z* := η (1 − p_i) / (1 − η)``. ``Z = p_i − Σ_x min(p_i Mb, Ms)`` is at most
    ``U = p_i − min(p_i pt, q)`` of the next drafted token ``X_{i+1}``, so ``Z* > U`` rejects
    (margin: the computed Z exceeds the true one by at most ~eps·(p_i + 1) plus summation
    error, far below 1e-5 relative plus ``slack``). η = 1 rejects unless p_i = 1 (h may be 1).
    """
    if eta < 1.0:
        bound = p_i - min(p_i * pt_next, q_next)
        return eta * (1.0 - p_i) / (1.0 - eta) > bound * (1.0 + 1e-5) + slack
    return p_i < 1.0


def scan_block_cpu(lay, p_full, q, pt, weights, slack) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU BV scan, one request at a time in Python scalars: τ = max{i : η_i < h_i}.

    Same decisions as :func:`scan_block_batched` (h_γ = p_γ; for i = γ−1..1 a bound on
    ``Z_{i+1}`` rejects without a vocabulary pass, otherwise ``Z_{i+1}`` is computed straight
    into ``weights[b]`` by :func:`_residual_row_cpu`), without a tensor operation per step.
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
        if eta[g - 1] < p[g]:
            tau[b] = g
            continue
        for i in range(g - 1, 0, -1):
            p_i, eta_i = p[i], eta[i - 1]
            # _rejects_without_pass, inlined (Python scalars, once per scan step)
            if eta_i < 1.0:
                bound = p_i - min(p_i * pt_rows[b][i], q_rows[b][i])
                if eta_i * (1.0 - p_i) / (1.0 - eta_i) > bound * (1.0 + 1e-5) + slack:
                    continue
            elif p_i < 1.0:
                continue
            out = weights[b]
            z = _residual_row_cpu(out, target[t_start[b] + i], draft[d_start[b] + i], p_i)
            denom = z + (1.0 - p_i)
            if eta_i < (z / denom if denom > 0 else 1.0):
                _keep_row_cpu(out, p_i)
                tau[b], done[b] = i, z > 0
                break
    return torch.tensor(tau, dtype=torch.long), torch.tensor(done, dtype=torch.bool)


def scan_block_batched(lay, p_full, q, pt, weights, slack, done) -> torch.Tensor:
    """Batched BV scan (CUDA, or CPU without ``CPU_ROW_LOOP``): τ = max{i : η_i < h_i}.

    i = γ: ``h_γ = p_γ``, no vocabulary work; then i = γ−1, γ−2, ..., 1 for the requests still
    unresolved, skipping ``Z_{i+1}`` where :func:`_rejects_without_pass`'s bound decides.
    Writes the residual rows of accepting positions to ``weights`` and marks them in ``done``.
    p_full # [B, K+1] (p_0 = 1), q, pt # [B, K].  returns τ # [B] int64
    """
    lengths, eta_all = lay["lengths"], lay["uniforms"]
    b, k = lay["tokens"].shape
    arange_b = torch.arange(b, device=lengths.device)
    has = lengths > 0
    last = torch.clamp(lengths - 1, min=0)
    accepted_last = has & (eta_all[arange_b, last] < p_full[arange_b, last + 1] if k else has)
    tau = torch.where(accepted_last, lengths, torch.zeros_like(lengths))
    pending = torch.nonzero(~accepted_last & (lengths >= 2)).flatten()
    step = 1
    while pending.numel():
        position = lengths[pending] - step  # i: h_i needs Z_{i+1} from the rows of X^i
        p_i = p_full[pending, position]
        eta = eta_all[pending, position - 1]
        z_star = eta * (1.0 - p_i) / (1.0 - eta)
        bound = p_i - torch.minimum(p_i * pt[pending, position], q[pending, position])
        maybe = ~(z_star > bound * (1.0 + 1e-5) + slack)  # NaN (η = 1, p_i = 1): compute
        rows, position, p_i, eta = pending[maybe], position[maybe], p_i[maybe], eta[maybe]
        z = residual_pass(lay, rows, position, p_i, weights, z_star[maybe])
        denom = z + (1.0 - p_i)
        h = torch.where(denom > 0, z / torch.where(denom > 0, denom, 1.0), 1.0)
        accept = eta < h
        winners = rows[accept]
        tau[winners] = position[accept]
        done[winners] = z[accept] > 0
        still = torch.ones_like(pending, dtype=torch.bool)
        still[torch.nonzero(maybe).flatten()[accept]] = False
        pending = pending[still & (lengths[pending] - step > 1)]
        step += 1
    return tau


def scan_block(lay, p_full, q, pt, weights, slack) -> tuple[torch.Tensor, torch.Tensor]:
    """BV's τ = max{i : η_i < h_i} with residual rows written at accepting positions.

    CPU with ``CPU_ROW_LOOP``: :func:`scan_block_cpu`; otherwise :func:`scan_block_batched`.
    returns (τ # [B] int64, done # [B] bool: weights already hold the extra-token residual)
    """
    if p_full.device.type == "cpu" and CPU_ROW_LOOP:
        return scan_block_cpu(lay, p_full, q, pt, weights, slack)
    done = torch.zeros(p_full.shape[0], dtype=torch.bool, device=p_full.device)
    return scan_block_batched(lay, p_full, q, pt, weights, slack, done), done
