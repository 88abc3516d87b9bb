"""The LLMServingSim GPUs' passes (simulator.cost.measured.lss.LssPricer) as PassTables
(simulator.cost.tabulated): the form the compiled vllm-v1 loop evaluates.

:meth:`LssPricer.total` is exactly the tabulated form with a sampler term::

    gpu = ((L[Q] + A(n, Σq, Σc, Σq·c, Σq²)) + C[Q]) + (H[r] + S[n])
    t   = gpu + (fixed + max(0, floor − gpu))

with L[Q] = ``layers(Q)`` (the cell's modules, a MoE block at E_touched(Q)), C[Q] =
``allreduce(Q)`` (tp ring all-reduces over the anchor's PCIe link; expert parallelism's
dispatch/combine of the rank's own Q), H[r] = ``logits(r)`` (the measured LogitsProcessor,
H[0] its first measured row as np.interp clamps it), S[n] = ``sampler_at(n)`` (the measured
sampler at max(n, 1) sequences) and A the two-regime attention law packed for
simulator.cost.tabulated.regime_attention (LssPricer.packed: the numpy engine prices its passes
through that same function). :func:`lss_table` fills the tables for Q, r, n = 0..Q_max.

The dense modules, the LM head, the sampler and the tp all-reduce are computed for every Q at
once by the pricer's expressions on arrays (np.interp elementwise, the same extrapolation
above a curve's last point); a MoE block and expert parallelism's dispatch by the scalar path.
A spot check against the scalar path (:data:`SPOT_POINTS` token counts and each curve's last
grid point ± 1) falls back to the scalar path at every Q if any value differs, so a table is the
pricer's own value bit for bit (parity: tests/simulator/cost/measured/test_lss_table.py).
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.cost.measured.lss import (
    LAYER_MODULES,
    MLP_MODULES,
    PASS_MODULES,
    PCIE_LINK,
)
from specbatch.simulator.cost.measured.lss_attention import DTYPE_BYTES
from specbatch.simulator.cost.tabulated import AttentionLaw, PassTable, tabulate

#: Token counts (besides Q = 0, 1, Q_max and each curve's last grid point ± 1) at which a
#: table is checked against the scalar path before use.
SPOT_POINTS = 16


def lss_table(r, max_tokens: int) -> PassTable:
    """The :class:`PassTable` of LssPricer ``r`` for Q, r, n = 0..``max_tokens`` (module
    docstring; the role has no sliding-window layers: calibrated_table.table_gap)."""
    qs = np.arange(1, max_tokens + 1, dtype=np.float64)  # [Q_max]
    counts = np.arange(0, max_tokens + 1, dtype=np.float64)  # [Q_max + 1]
    layers = np.zeros(max_tokens + 1)  # [Q_max + 1]
    comm = np.zeros(max_tokens + 1)
    if max_tokens:
        layers[1:] = layers_many(r, qs)
        comm[1:] = allreduce_many(r, qs)
    head = logits_many(r, counts)  # [Q_max + 1]
    sampler = sampler_many(r, counts)  # [Q_max + 1]
    if not spot_check(r, layers, comm, head, sampler):  # pragma: no cover - a platform's math
        layers = tabulate(r.layers, max_tokens)
        comm = tabulate(r.allreduce, max_tokens)
        head = np.array([r.logits(float(q)) for q in range(max_tokens + 1)])
        sampler = np.array([r.sampler_at(float(n)) for n in range(max_tokens + 1)])
    fixed, floor = r.launch
    law = AttentionLaw(flops=0.0, flops_rate=1.0, kv=0.0, kv_rate=1.0, regimes=r.packed)
    return PassTable(layers=layers, allreduce=comm, head=head, attention=law,
                     fixed=float(fixed), floor=float(floor), sampler=sampler)


def interp_many(c: tuple[np.ndarray, np.ndarray], xs: np.ndarray) -> np.ndarray:
    """lss.interp at every xs # [rows]: np.interp up to the grid's last point, above it the
    top two points' slope (a one-point grid: np.interp everywhere)."""
    grid, secs = c
    out = np.interp(xs, grid, secs)  # [rows]
    above = xs > grid[-1]
    if len(grid) >= 2 and above.any():
        slope = (secs[-1] - secs[-2]) / (grid[-1] - grid[-2])
        out[above] = secs[-1] + slope * (xs[above] - grid[-1])
    return out


def layers_many(r, qs: np.ndarray) -> np.ndarray:
    """LssPricer.layers at every qs # [rows]: its sums in its order, the MoE block by the
    scalar path."""
    s = r.shape
    block = np.zeros_like(qs)  # [rows]
    mlp = np.zeros_like(qs)
    for name, count in LAYER_MODULES.items():
        if name in r.modules:
            t = count * interp_many(r.modules[name], qs)
            block = block + t
            mlp = mlp + (t if name in MLP_MODULES else 0.0)
    total = s.layers * block
    moe_layers = s.moe_layers if s.is_moe else 0
    if moe_layers:
        moe = np.array([r.moe_block(float(q)) for q in qs])  # [rows]
        total = total + moe_layers * (moe - mlp)
    passes = np.zeros_like(qs)  # Python's sum() from 0: 0 + a is a
    for m in PASS_MODULES:
        if m in r.modules:
            passes = passes + interp_many(r.modules[m], qs)
    return total + passes


def allreduce_many(r, qs: np.ndarray) -> np.ndarray:
    """LssPricer.allreduce at every qs # [rows]: the tp ring all-reduces as arrays, expert
    parallelism's dispatch/combine by the scalar path."""
    if r.consts is not None and r.consts.ep_size > 1:
        return np.array([r.allreduce(float(q)) for q in qs])
    if r.tp == 1:
        return np.zeros_like(qs)
    bw, lat = PCIE_LINK
    nbytes = DTYPE_BYTES * r.shape.hidden * qs
    one = 2 * (r.tp - 1) * (lat + nbytes / (r.tp * bw))
    return 2 * r.shape.layers * one


def logits_many(r, qs: np.ndarray) -> np.ndarray:
    """LssPricer.logits at every qs # [rows]."""
    grid, secs = r.per_seq["lm_head"]
    lm = np.interp(qs, grid, secs)  # [rows]
    above = qs > grid[-1]
    if above.any():
        per_row = 2 * r.shape.hidden * r.shape.vocab / r.tp
        lm[above] = lm[above] + (qs[above] - grid[-1]) * per_row / (r.hw.peak_flops
                                                                  * r.hw.compute_eff)
    return lm


def sampler_many(r, ns: np.ndarray) -> np.ndarray:
    """LssPricer.sampler_at at every ns # [rows]."""
    sampler = r.per_seq.get("sampler")
    if sampler is None:
        return np.zeros_like(ns)
    return interp_many(sampler, np.maximum(ns, 1.0))


def spot_check(r, layers: np.ndarray, comm: np.ndarray, head: np.ndarray,
               sampler: np.ndarray) -> bool:
    """Whether the tables equal the scalar path at Q = 0, 1, Q_max, each curve's last grid
    point ± 1 and :data:`SPOT_POINTS` spread counts."""
    top = layers.shape[0] - 1
    points = {0, 1, top, *np.linspace(0, top, SPOT_POINTS).astype(int).tolist()}
    curves = [*r.modules.values(), *r.per_seq.values()]
    for grid, _ in curves:
        points.update(q for q in (int(grid[-1]) - 1, int(grid[-1]), int(grid[-1]) + 1)
                      if 0 <= q <= top)
    for q in sorted(points):
        x = float(q)
        want = (r.layers(x) if q else 0.0, r.allreduce(x) if q else 0.0, r.logits(x),
                r.sampler_at(x))
        if want != (layers[q], comm[q], head[q], sampler[q]):
            return False
    return True
