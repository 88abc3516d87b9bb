"""The attention law of one role's per-GPU head shape from AIConfigurator's measured attention
and MLA tables (simulator.cost.tabulated.AttentionLaw), built once and kept in the cache folder.

:func:`attention_law`: the grid law (aic_attention.grid_law) of the shape's own measured
cells, or of cells carried from the :data:`NEAREST` timed shapes of its head width by the width
law's ratio (:func:`attention_cells`), with the linear law's FLOP rate (:func:`attention_fit`);
the linear law alone where no grid reaches; the decode cells read cold (aic_mixed.cold_args)
and mixed decode + prefill calls as the GPU's backend runs them (aic_mixed.mixed_mode).
:func:`mla_attention_law`: the MLA core's grid law per head count (aic_mla).
"""

from __future__ import annotations

import functools

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured import aic_cache
from specbatch.simulator.cost.measured.aic_cells import attention_rows, own_cells, shape_cells
from specbatch.simulator.cost.measured.aic_mixed import cold_args, gpu_of, mixed_mode
from specbatch.simulator.cost.measured.aic_op_curves import mla_gemm
from specbatch.simulator.cost.tabulated import AttentionLaw

#: Timed head shapes an untimed one's attention grid is carried from (attention_cells), and
#: the weight of log H_kv against log H in choosing them, (decode, prefill): a decode's time is
#: its KV bytes and its B x H_kv CTAs; weighted 2 on decode, 1 on prefill (chosen on
#: benchmarks/aic_validate.py's shape-left-out errors: decode 7.7-7.8 % on A100 / RTX PRO 6000
#: bf16 against 8.6-9.5 % at 1; 0.5 and 4 worse or equal).
NEAREST = 2
KV_WEIGHT = (2.0, 1.0)


@functools.lru_cache(maxsize=64)
def attention_fit(system: str, kv_dtype: str, heads: int, kv_heads: int, head_dim: int):
    """(fit, how): the linear attention law of this per-GPU head shape (aic_attention): fitted
    on its own rows where both tables time it, else on every timed shape of the same head
    width. Its FLOP rate prices the grid law's cached-prefix term; alone, it prices a shape
    no grid reaches (:func:`attention_cells`)."""
    d, p = attention_rows(system, kv_dtype)
    mine_d = d[(d["heads"] == heads) & (d["kv_heads"] == kv_heads) & (d["head_dim"] == head_dim)]
    mine_p = p[(p["heads"] == heads) & (p["kv_heads"] == kv_heads) & (p["head_dim"] == head_dim)]
    from specbatch.simulator.cost.measured.aic_attention import fit_attention  # scipy

    if len(mine_d) >= 8 and len(mine_p) >= 8:
        return fit_attention(mine_d, mine_p), "shape"
    d, p = d[d["head_dim"] == head_dim], p[p["head_dim"] == head_dim]
    if d.empty or p.empty:
        raise SpecbatchError(f"aic {system}: no {kv_dtype} attention rows at head width "
                             f"{head_dim}")
    return fit_attention(d, p), "width"


@functools.lru_cache(maxsize=16)
def width_fit(system: str, kv_dtype: str, head_dim: int, decode_only: bool = False):
    """The linear attention law fitted on every timed shape of head width ``head_dim``: the
    ratio :func:`attention_cells` carries a timed shape's grid to an untimed one with.
    ``decode_only``: on the decode rows alone, the decode cells of a GPU whose decode table
    spans no grid (L40S: its decode kernel's floor is not its prefill's, 10.6 against 5.6 µs;
    held out by shape, 5.6 % against the joint law's 7.0 %)."""
    from specbatch.simulator.cost.measured.aic_attention import fit_attention  # scipy

    d, p = attention_rows(system, kv_dtype)
    d, p = d[d["head_dim"] == head_dim], p[p["head_dim"] == head_dim]
    if d.empty or p.empty:
        raise SpecbatchError(f"aic {system}: no {kv_dtype} attention rows at head width "
                             f"{head_dim}")
    return fit_attention(d, p.iloc[:0] if decode_only else p)


def attention_cells(system: str, kv_dtype: str, heads: int, kv_heads: int, head_dim: int,
                    exclude: bool = False):
    """(cells, how) of the grid law of this head shape (aic_attention.cells: plain arrays):
    its own where timed ("shape"; not with ``exclude``, the held-out check), else carried
    from the :data:`NEAREST` timed shapes of its head width nearest in log heads + w log KV
    heads (w :data:`KV_WEIGHT`, decode and prefill apart) by the width law's ratio
    (aic_attention.carried; "transfer from ..."); (None, "law") where no shape of the width is
    timed."""
    key = (heads, kv_heads, head_dim)
    if not exclude:
        own = own_cells(system, kv_dtype, key)
        if own is not None:
            return own, "shape"
    grids = shape_cells(system, kv_dtype)
    same = [k for k in grids if k != key and k[2] == head_dim]
    if not same:
        return None, "law"
    from specbatch.simulator.cost.measured.aic_attention import carried

    kv_bytes = 1.0 if kv_dtype == "fp8" else 2.0
    fit = width_fit(system, kv_dtype, head_dim)
    got, how = [], []
    for part, weight in enumerate(KV_WEIGHT):
        near = sorted(same, key=lambda k, w=weight: (abs(np.log(k[0] / heads))
                                                     + w * abs(np.log(k[1] / kv_heads)), k))
        near = near[:NEAREST]
        got.append(carried([(k, grids[k]) for k in near], fit, key, kv_bytes)[part])
        how.append(", ".join(map(str, near)))
    return tuple(got), f"transfer from {how[0]} (decode); {how[1]} (prefill)"
@functools.lru_cache(maxsize=16)
def mla_core(system: str, kv_dtype: str):
    """(core cells by head count, linear law) of the MLA core on ``system`` (aic_mla)."""
    from specbatch.simulator.cost.measured.aic_mla import core_rows, fit, head_cells  # pandas

    d, p = core_rows(system, kv_dtype, mla_gemm(system))
    return head_cells(d, p), fit(d, p)


@functools.lru_cache(maxsize=64)
def mla_attention_law(system: str, kv_dtype: str, heads: int, layers: int
                      ) -> tuple[AttentionLaw, str]:
    """(law of ``layers`` layers, how) of the MLA core at ``heads`` per-GPU heads: the grid
    law of its cells (timed, or carried: aic_mla.carried_cells) with the core's linear law's
    FLOP rate, decode and prefill requests in two launches or short queries in the decode
    launch, as the backend runs them (vLLM's MLACommonImpl; aic_mla.mixed_mode)."""
    from specbatch.simulator.cost.measured.aic_attention import grid_law, grid_tables
    from specbatch.simulator.cost.measured.aic_mla import (
        WIDTH,
        carried_cells,
        mixed_mode,
        triton_decode,
    )

    grids, law = mla_core(system, kv_dtype)
    kv_bytes = 1.0 if kv_dtype == "fp8" else 2.0
    got, how = carried_cells(grids, law, heads, kv_bytes,
                             triton=triton_decode(system, kv_dtype))
    mixed, mixed_how = mixed_mode(system, kv_dtype)
    return (grid_law(grid_tables(got, None), law, heads, WIDTH, kv_bytes, 1, layers, mixed),
            f"MLA core, {how}; {mixed_how}")


@functools.lru_cache(maxsize=64)
def attention_law(system: str, kv_dtype: str, heads: int, kv_heads: int, head_dim: int,
                  kv_bytes: float, layers: int) -> tuple[AttentionLaw, str]:
    """(law of ``layers`` layers, how it was built) at this per-GPU head shape: the grid law of
    :func:`attention_cells` (its own cells, or carried; L40S's decode by the width's decode
    law) with :func:`attention_fit`'s FLOP rate, or that linear law alone where no grid
    reaches; kept in the cache folder as the law's own dataclass fields (aic_cache)."""

    def build():
        from specbatch.simulator.cost.measured.aic_attention import (  # pandas, scipy
            grid_law,
            grid_tables,
            law_cells,
        )

        fit, fit_how = attention_fit(system, kv_dtype, heads, kv_heads, head_dim)
        got, how = attention_cells(system, kv_dtype, heads, kv_heads, head_dim)
        if got is None:
            return fit.law(heads, kv_heads, head_dim, kv_bytes, layers), f"law ({fit_how})"
        cold = cold_args(system, kv_dtype, kv_heads, head_dim)
        if got[0] is None:
            dec = width_fit(system, kv_dtype, head_dim, decode_only=True)
            got = (law_cells(dec, heads, kv_heads, head_dim, kv_bytes), got[1])
            how = f"{how}; decode by the width's decode law"
            cold = None  # a law, not cells timed over a warm cache
        mixed, mixed_how = mixed_mode(system, kv_dtype, heads, kv_heads, head_dim, layers)
        return grid_law(grid_tables(got, cold), fit, heads, head_dim, kv_bytes, kv_heads,
                        layers, mixed), f"{how}; {mixed_how}"

    def encode(built):
        return {"law": aic_cache.dataclass_fields(built[0]), "how": built[1]}

    def decode(d):
        return aic_cache.from_fields(d["law"]), str(d["how"])

    gpu = gpu_of(system)  # the catalogue numbers the mixed-call law reads (aic_mixed)
    return aic_cache.entry("attention", system,
                           (kv_dtype, heads, kv_heads, head_dim, kv_bytes, layers,
                            gpu.compute_capability, gpu.sm_count, gpu.l2_bytes),
                           build, encode, decode)
