"""The calibrated cost model's passes as PassTables (simulator.cost.tabulated): the form the
compiled vllm-v1 loop evaluates (simulator.engine.v1.kernel).

:class:`~simulator.cost.measured.calibrated_role.RolePricer.total` is exactly the tabulated form::

    gpu = ((L[Q] + A(Σq, Σc, Σq·c, Σq²)) + C[Q]) + H[r]
    t   = gpu + (fixed + max(0, floor − gpu))

with L[Q] = ``layers(Q)`` (a table cell or the monotone law), C[Q] = the two all-reduces per
layer, H[r] = the monotone LM head at r rows (``sampled_head``: r = Q unless the engine names
fewer rows; H[0] = 0), A = max(F_attn·P / π, B_kv·K / β) with the roofline's attention FLOPs
and KV bytes per token (PassConstants.attn_flops, kv_bytes) and the fitted MLP-up GEMM law's
π, β, and the launch terms of ``launch``. :func:`role_table` fills the tables for Q = 0..Q_max.

The layers and head tables are computed for every Q at once through the pricer's own array
expressions (RolePricer.law_layers_at, head_at: the scalar path is their one-row call), and
the running-maximum envelope, table cell and all-reduce curve by the same ``np.interp``; a MoE
/ MLA law and the law's value at the envelope's last grid point by the scalar path itself. A
spot check against the scalar path (:data:`SPOT_POINTS` token counts, the envelope's edges
among them) falls back to the scalar path at every Q if any value differs, so a table is the
model's own value bit for bit (parity: tests/simulator/cost/measured/test_calibrated_table.py).

The LLMServingSim GPUs' pricer (simulator.cost.measured.lss.LssPricer: two attention regimes
and a sampler at the pass's n requests) has its own tables (simulator.cost.measured.lss_table,
:func:`role_table` hands it over). Not tabulated (:func:`table_gap` says why; those runs stay on
the numpy engine): a role with sliding-window layers (its attention needs the window sums K^W,
P^W).
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.cost.tabulated import AttentionLaw, PassTable, finite_rates, tabulate

#: Token counts (besides Q = 1, Q_max and the envelope's last grid point ± 1) at which a
#: table is checked against the scalar path before use.
SPOT_POINTS = 16


def table_gap(r) -> str | None:
    """Why role pricer ``r`` has no PassTable (one phrase), or None."""
    from specbatch.simulator.cost.measured.lss import LssPricer

    if r.consts.sliding_layers:
        return f"{r.shape.name}'s sliding-window layers"
    if isinstance(r, LssPricer):  # lss_table: the regime law and the sampler
        return None
    law = attention_law(r)
    if not finite_rates(law):  # pragma: no cover - fitted laws are positive
        return f"{r.shape.name}'s attention rates"
    return None


def attention_law(r) -> AttentionLaw:
    """The :class:`AttentionLaw` of RolePricer.attention (no window): max(F/π, B/β)."""
    law = r.fit.gemm["mlp_up_proj"]
    return AttentionLaw(flops=r.consts.attn_flops, flops_rate=law.flops, kv=r.consts.kv_bytes,
                        kv_rate=law.bandwidth, overlap=True)


def role_table(r, max_tokens: int) -> PassTable:
    """The :class:`PassTable` of RolePricer ``r`` for Q = 0..``max_tokens`` (module docstring;
    :func:`table_gap` must be None); an LssPricer's from simulator.cost.measured.lss_table."""
    from specbatch.simulator.cost.measured.lss import LssPricer

    if isinstance(r, LssPricer):
        from specbatch.simulator.cost.measured.lss_table import lss_table

        return lss_table(r, max_tokens)
    qs = np.arange(1, max_tokens + 1, dtype=np.float64)  # [Q_max]
    layers = np.zeros(max_tokens + 1)  # [Q_max + 1]
    head = np.zeros(max_tokens + 1)
    if max_tokens:
        layers[1:] = many_layers(r, qs)
        head[1:] = monotone_many(r, "lm_head", r.head, r.head_at, qs)
    comm = np.zeros(max_tokens + 1)
    if r.tp > 1 and max_tokens:
        comm[1:] = allreduce_many(r, qs)
    if not spot_check(r, layers, head, comm):  # pragma: no cover - a platform's array math
        layers = tabulate(lambda q: r.per_token_parts(q)[0], max_tokens)
        head = tabulate(lambda q: r.per_token_parts(q)[1], max_tokens)
        comm = tabulate(lambda q: r.per_token_parts(q)[2], max_tokens)
    fixed, floor = r.launch
    return PassTable(layers=layers, allreduce=comm, head=head, attention=attention_law(r),
                     fixed=float(fixed), floor=float(floor))


def allreduce_many(r, qs: np.ndarray) -> np.ndarray:
    """RolePricer.per_token_parts' all-reduce term 2 L · one_allreduce(b h Q) at every qs
    # [rows]: vLLM's custom all-reduce (the roofline formula) and the measured curve inside
    its sizes and past its edges as arrays, the same expressions (sources.curve_seconds)."""
    from specbatch.simulator.cost.measured.laws import fit_allreduce
    from specbatch.simulator.cost.measured.sources import uses_custom_allreduce

    s, hw = r.shape, r.hw
    nbytes = hw.dtype_bytes * s.hidden * qs  # [rows]
    one = hw.allreduce_latency + 2 * (r.tp - 1) / r.tp * nbytes / hw.link_bw
    if r.allreduce is not None:
        sizes, times = r.allreduce
        curve = np.array([not uses_custom_allreduce(r.tp, b) for b in nbytes])  # [rows]
        low, high = curve & (nbytes <= sizes[0]), curve & (nbytes >= sizes[-1])
        inside = curve & ~low & ~high
        one[low] = float(times[0])
        one[inside] = np.exp(np.interp(np.log(nbytes[inside]), np.log(sizes), np.log(times)))
        if high.any():  # sources.curve_seconds past its last size: the edges' fitted law
            law = fit_allreduce(sizes[-4:], times[-4:])
            one[high] = times[-1] + (nbytes[high] - sizes[-1]) / law.bandwidth
    return 2 * s.layers * one


def dense_law(r) -> bool:
    """Whether ``r``'s law layers are the dense array expressions (RolePricer.law_layers_at)."""
    s = r.shape
    return not (s.is_moe or s.is_mla or s.attention_head_dim)


def law_many(r, qs: np.ndarray) -> np.ndarray:
    """RolePricer.law_layers at every qs # [rows]."""
    if dense_law(r):
        return r.law_layers_at(qs)
    return np.array([r.law_layers(float(q)) for q in qs])


def many_layers(r, qs: np.ndarray) -> np.ndarray:
    """RolePricer.layers at every qs # [rows]: the cell (interpolated, beyond its grid the edge
    times the law's growth) or the monotone law."""
    if r.cell is None:
        return monotone_many(r, "layers", r.law_layers, lambda q: law_many(r, q), qs)
    grid, secs = r.cell.grid, r.cell.seconds
    out = np.empty_like(qs)  # [rows]
    beyond = qs > grid[-1]
    if beyond.any():
        out[beyond] = secs[-1] * law_many(r, qs[beyond]) / r.law_layers(grid[-1])
    inside = ~beyond
    out[inside] = np.interp(qs[inside], grid, secs)
    return out


def monotone_many(r, name: str, fn, fn_many, qs: np.ndarray) -> np.ndarray:
    """RolePricer.monotone(name, fn, q) at every qs # [rows]: the envelope on the correction
    grid interpolated, beyond it its last value times fn's growth (``fn_many``: fn at an
    array of token counts)."""
    corr = next(iter((r.fit.corrections or {}).values()), None)
    if corr is None:
        return fn_many(qs)
    r.monotone(name, fn, float(corr.grid[0]))  # fills the envelope memo
    vals, grid = r.memo[name], corr.grid
    out = np.empty_like(qs)
    inside = qs <= grid[-1]
    out[inside] = np.interp(qs[inside], grid, vals)
    if (~inside).any():
        edge = fn(float(grid[-1]))
        out[~inside] = vals[-1] * fn_many(qs[~inside]) / edge
    return out


def spot_check(r, layers: np.ndarray, head: np.ndarray, comm: np.ndarray) -> bool:
    """Whether the tables equal the scalar path (RolePricer.per_token_parts) at Q = 1, Q_max,
    the envelope's last grid point ± 1 and :data:`SPOT_POINTS` spread token counts."""
    top = layers.shape[0] - 1
    if top < 1:
        return True
    points = {1, top, *np.linspace(1, top, SPOT_POINTS).astype(int).tolist()}
    corr = next(iter((r.fit.corrections or {}).values()), None)
    edges = [corr.grid[-1]] if corr is not None else []
    if r.cell is not None:
        edges.append(r.cell.grid[-1])
    for g in edges:
        points.update(q for q in (int(g) - 1, int(g), int(g) + 1) if 1 <= q <= top)
    for q in sorted(points):
        lay, hd, cm = r.per_token_parts(float(q))
        if (lay, hd, cm) != (layers[q], head[q], comm[q]):
            return False
    return True
