"""Sliding-window attention under ``cost = "aic"`` judged against AIConfigurator's measured
windowed rows (nothing fitted on them).

    python benchmarks/aic_window.py --aic AIC/aic-core/src/aiconfigurator_core/systems/data

``cost = "aic"`` prices a sliding layer with the full-attention grid law at the sums the layer
presents (simulator.cost.analytic.window.windowed_sums; aic_pricer.AicPricer.attention_at);
the bundled tables keep the ``window_size = 0`` rows only (aic_curves). AIConfigurator's own
tables also time FlashAttention with a window (vLLM 0.24 on H100: W = 128, 1024, 8192, at head
widths 64 / 128 / 192): each such row of a head shape the bundled grid law prices (head widths
64 / 128 / 256, the serving range of aic_cells) is priced here by the one-layer law at its
windowed sums: the exact ones (simulator.cost.analytic.window: the keys the window holds) and
the ones FlashAttention 3's tiles compute (aic_fa3_window, what ``cost = "aic"`` prices on an
FA3 GPU: aic_pricer.AicPricer.window_sums; the exact ones again where the backend is not FA3),
and, for contrast, at its full sums (the window ignored); the errors are printed per table,
window and KV dtype, apart where the window binds (a decode's context c >= W, a prompt longer
than W) and where it does not (the law's own full-attention cells, read as the grid reads
them).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from specbatch.simulator.cost.analytic.window import batch_window_sums, window_sums, windowed_sums
from specbatch.simulator.cost.measured.aic_cells import (
    DECODE_MAX_BATCH,
    DECODE_MAX_CONTEXT,
    PREFILL_MAX_BATCH,
)
from specbatch.simulator.cost.measured.aic_curves import HEAD_DIMS
from specbatch.simulator.cost.measured.aic_fa3_window import fa3_window_sums
from specbatch.simulator.cost.measured.aic_mixed import backend, gpu_of
from specbatch.simulator.cost.measured.aic_role_attention import attention_law
from specbatch.simulator.cost.measured.aic_window_prefill import (
    TileShape,
    local_parts,
    local_seconds,
    prefill_split,
)
from specbatch.traces.public.aiconfigurator import import_aiconfigurator


def row_sums(family: str, batch: int, length: int) -> tuple:
    """(query # [B], cached # [B]) of one row: B decodes of one token over ``length`` cached
    tokens (the grid's context axis), or B prompts of ``length`` tokens, none cached."""
    if family == "attention_decode":
        return np.ones(batch, dtype=np.int64), np.full(batch, length, dtype=np.int64)
    return np.full(batch, length, dtype=np.int64), np.zeros(batch, dtype=np.int64)


def judge(tables, system: str) -> list[dict]:
    """One record per windowed row: its measured and priced seconds (windowed exact, FA3
    tiles, the per-token / per-product split ``cost = "aic"`` prices with, full)."""
    out, splits = [], {}
    for family, axis, most in (("attention_decode", "context", DECODE_MAX_BATCH),
                               ("attention_prefill", "prompt", PREFILL_MAX_BATCH)):
        frame = tables.frames[family]
        kernels = frame[frame["window"] == 0]["kernel"].value_counts()
        f = frame[(frame["window"] > 0) & (frame["kernel"] == kernels.index[0])
                  & frame["head_dim"].isin(HEAD_DIMS) & frame["kv_dtype"].isin(("bfloat16", "fp8"))
                  & (frame["batch"] <= most)]
        if family == "attention_decode":
            f = f[f["context"] <= DECODE_MAX_CONTEXT]
        for row in f.itertuples(index=False):
            kv = str(row.kv_dtype)
            e = 1.0 if kv == "fp8" else 2.0
            law, _ = attention_law(system, kv, int(row.heads), int(row.kv_heads),
                                   int(row.head_dim), e, 1)
            q, c = row_sums(family, int(row.batch), int(getattr(row, axis)))
            *sums, window = batch_window_sums(q, c, int(row.window))
            tiles = window
            fa3 = backend(gpu_of(system), kv) == "fa3"
            w, h, hkv, hd = int(row.window), int(row.heads), int(row.kv_heads), int(row.head_dim)

            def pairs(a, b, w=w, h=h, hkv=hkv, hd=hd, e=e, fa3=fa3):
                if fa3:
                    return fa3_window_sums(a, b, w, h, hkv, hd, e)[1]
                return window_sums(a, b, w)[1]

            if fa3:
                tiles = fa3_window_sums(q, c, w, h, hkv, hd, e)
            shape = TileShape(fa3, max(h // hkv, 1), hd, e)
            key = (kv, h, hkv, hd)
            if key not in splits:
                splits[key] = prefill_split(law.grid, shape)
            split = local_seconds(law, splits[key], sums[0], window[0],
                                  local_parts(q, c, w, pairs, shape))
            length = int(getattr(row, axis))
            out.append({"family": family.split("_")[1], "window": int(row.window), "kv": kv,
                        "binds": length >= int(row.window), "measured": row.latency_s,
                        "windowed": law.seconds(sums[0], *windowed_sums(*sums[1:], window)),
                        "tiles": law.seconds(sums[0], *windowed_sums(*sums[1:], tiles)),
                        "split": split,
                        "full": law.seconds(*sums)})
    return out


def table(records: list[dict]) -> list[str]:
    """Markdown: per (table, window, KV, binds) rows, MAPE and mean signed error of the
    windowed price (exact sums, FA3 tiles, the split) and of the full one."""
    import pandas as pd

    d = pd.DataFrame(records)
    lines = ["| table | W | KV | window binds | rows | exact window: MAPE / mean | FA3 tiles: "
             "MAPE / mean | split (priced): MAPE / mean | full sums: MAPE / mean |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, g in d.groupby(["family", "window", "kv", "binds"], sort=True):
        errs = []
        for col in ("windowed", "tiles", "split", "full"):
            e = (g[col] - g["measured"]) / g["measured"]
            errs.append(f"{100 * e.abs().mean():.1f} / {100 * e.mean():+.1f} %")
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {'yes' if key[3] else 'no'} | "
                     f"{len(g)} | {' | '.join(errs)} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aic", required=True, help="AIConfigurator's systems/data folder")
    ap.add_argument("--system", default="h100_sxm")
    ap.add_argument("--version", default="0.24.0", help="vLLM version of the tables (the "
                    "bundled curves' own)")
    args = ap.parse_args()
    tables = import_aiconfigurator(args.aic, args.system, args.version)
    records = judge(tables, args.system)
    if not records:
        print(f"{args.system} vLLM {args.version}: no windowed attention rows")
        return 1
    print("\n".join(table(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
