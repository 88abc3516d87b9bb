"""AIConfigurator's measured attention cells of one GPU, as the aic attention laws read them.

AIConfigurator times vLLM's attention per call in two tables per system and KV dtype:
decode (B requests of one query token each at context c) and prefill (B prompts of s tokens).
:func:`attention_rows` keeps the serving range; :func:`shape_cells` groups them per head
shape (H, H_kv, d) into the measured cells of simulator.cost.measured.aic_attention
(``cells``), kept where the prefill table spans a grid. A role's attention law
(simulator.cost.measured.aic_role_attention) and the mixed-call law (aic_mixed) both read them
here.
"""

from __future__ import annotations

import functools

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_curves import load_curves

#: Attention rows the law is fitted on (the serving range; module aic_attention): decode
#: batches up to this many requests, contexts below 32k; prefill batches of few prompts.
DECODE_MAX_BATCH, DECODE_MAX_CONTEXT, PREFILL_MAX_BATCH = 512, 32767, 16


def attention_rows(system: str, kv_dtype: str, kind: str = "attention"):
    """(decode, prefill) rows of ``system`` at ``kv_dtype`` within the serving range, of the
    bundled families ``<kind>_decode`` and ``<kind>_prefill`` (full attention, or ``mla``)."""
    frames = load_curves(system)
    d, p = frames.get(f"{kind}_decode"), frames.get(f"{kind}_prefill")
    if d is None or p is None:
        raise SpecbatchError(f"aic {system}: no {'MLA' if kind == 'mla' else kind} curves "
                             "bundled")
    d = d[(d["kv_dtype"] == kv_dtype) & (d["batch"] <= DECODE_MAX_BATCH)
          & (d["context"] <= DECODE_MAX_CONTEXT)]
    p = p[(p["kv_dtype"] == kv_dtype) & (p["batch"] <= PREFILL_MAX_BATCH)]
    return d, p


def grid_cells(decode, prefill) -> tuple | None:
    """(decode cells or None, prefill cells) of one shape's rows where its prefill table spans
    a grid, else None (:func:`shape_cells`)."""
    from specbatch.simulator.cost.measured.aic_attention import cells, has_grid  # pandas

    if decode.empty or prefill.empty:
        return None
    dec, pre = cells(decode, prefill)
    if not has_grid((pre,)):
        return None
    return (dec if has_grid((dec,)) else None), pre


@functools.lru_cache(maxsize=32)
def own_cells(system: str, kv_dtype: str, key: tuple) -> tuple | None:
    """:func:`grid_cells` of head shape ``key`` alone (a timed model's start-up reads only its
    own rows)."""
    d, p = attention_rows(system, kv_dtype)
    md = (d["heads"] == key[0]) & (d["kv_heads"] == key[1]) & (d["head_dim"] == key[2])
    mp = (p["heads"] == key[0]) & (p["kv_heads"] == key[1]) & (p["head_dim"] == key[2])
    return grid_cells(d[md], p[mp])


@functools.lru_cache(maxsize=8)
def shape_cells(system: str, kv_dtype: str) -> dict:
    """Head shape (H, H_kv, d) -> its measured cells (aic_attention.cells) where the prefill
    table spans a grid (aic_attention.has_grid); the decode cells None where its table does
    not (L40S: a few contexts per shape; the law's decode cells stand in, AicPricer)."""
    from specbatch.simulator.cost.measured.aic_attention import SHAPE

    d, p = attention_rows(system, kv_dtype)
    gd, gp = d.groupby(list(SHAPE)), p.groupby(list(SHAPE))
    out = {}
    for key in sorted(set(gd.groups) & set(gp.groups)):
        got = grid_cells(gd.get_group(key), gp.get_group(key))
        if got is not None:
            out[tuple(int(x) for x in key)] = got
    return out
