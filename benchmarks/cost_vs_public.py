"""The cost models against Vidur's public GPU profiles: before (roofline) / after (calibrated).

Measured: the non-attention part of one forward pass, emb(Q) + L · block(Q), from the bundled
table (traces/data/profiles/vidur: Vidur commit 7d47513, H100 / A100 / A40, tp 1/2/4/8,
Q = 1..4096 tokens per pass; 32 768 for the A100 Llama-3 files), L from Vidur's
vidur/config/model_config.py. Predicted:

- before: the roofline (simulator.cost.analytic.roofline, ``cost = "roofline"``, unchanged)
  restricted to the same ops: max(2 P_layers Q / tp / (peak eff_c), (b P_layers / tp + activation
  bytes) / (bw eff_m)) + L · layer launch latency (the cuda_graph preset's 8 us).
- after: the calibrated laws (simulator.cost.measured.laws) fitted leave-one-shape-out: for each
  GPU and each model, fitted on the other models measured on that GPU *except those with the
  same per-layer shape* (Llama-2-70B and Llama-3-70B share theirs on A100), evaluated on the
  held-out one (phi-2, a non-gated parallel-block model outside ModelShape's family, is
  neither fitted on nor reported).
- cells: the table cells themselves as a source, each interior token count left out and
  interpolated linearly from its two neighbours (a pessimistic check of
  simulator.cost.measured.calibrated's interpolation: the gap is twice the bundled spacing).
- attention: the analytic term against LLMServingSim's measured FlashAttention-2 rows
  (casys-kaist/LLMServingSim 5daddb2, MIT; H100, Llama-3.1-70B and Mixtral-8x7B at tp 4),
  traces/data/profiles/llmservingsim.
- all-reduce: Vidur's NCCL curves (single node; median per half-octave size bin): each bin
  left out and interpolated from its neighbours (what the model does with the curve), and
  the law t = α + s/γ fitted on the even bins >= 1 MiB, evaluated on the odd ones.

    .venv/bin/python benchmarks/cost_vs_public.py [--json] [--write]

``--write`` stores the laws fitted on all models (simulator/cost/measured/data/calibrated_laws.json)
and the validated errors the calibrated model reports
(simulator/cost/measured/data/calibrated_validation.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.io import atomic_write, dumps
from specbatch.simulator.cost.analytic.roofline import pass_constants
from specbatch.simulator.cost.gpus.catalogue import GPUS as CATALOGUE
from specbatch.simulator.cost.gpus.catalogue import gpus_with
from specbatch.simulator.cost.gpus.hardware import get_execution, preset
from specbatch.simulator.cost.measured.laws import (
    GpuFit,
    embedding_seconds,
    envelope,
    fit_allreduce,
    fit_gpu,
    fit_to_dict,
    frame_shape,
    layer_seconds,
)
from specbatch.simulator.cost.measured.sources import LAWS, VALIDATION, allreduce_curve, gpu_peaks
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.public.vidur_profiles import OPS, load_public_profiles

#: Decoder layers of Vidur's profiled models (vidur/config/model_config.py at 7d47513).
LAYERS = {"Qwen/Qwen-72B": 80, "codellama/CodeLlama-34b-Instruct-hf": 48,
          "internlm/internlm-20b": 60, "meta-llama/Llama-2-70b-hf": 80,
          "meta-llama/Llama-2-7b-hf": 32, "meta-llama/Meta-Llama-3-70B": 80,
          "meta-llama/Meta-Llama-3-8B": 32, "microsoft/phi-2": 32}
#: The GPUs Vidur profiled (catalogue rows calibrated by "vidur"): h100, a100, a40.
GPUS = gpus_with("vidur")
#: Models with these per-layer dimensions equal are one shape: held out together.
SHAPE_KEY = ("n_embd", "n_head", "n_kv_head", "n_expanded_embd")
REGIMES = [0, 8, 64, 256, 1024, 1 << 20]
REGIME_NAMES = ["1-8", "9-64", "65-256", "257-1024", ">1024"]


def measured(cell: pd.DataFrame, layers: int) -> np.ndarray:
    """Seconds of emb + L · block per row # [rows]."""
    block = cell[[f"{op}_ms" for op in OPS if op != "emb"]].to_numpy(np.float64).sum(axis=1)
    return 1e-3 * (cell["emb_ms"].to_numpy(np.float64) + layers * block)


def roofline_layers(gpu: str, cell: pd.DataFrame, layers: int, tp: int) -> np.ndarray:
    """The roofline's time for the same ops # [rows] (module docstring)."""
    r = cell.iloc[0]
    shape = ModelShape("vidur", layers, int(r.n_embd), int(r.n_head), int(r.n_kv_head),
                       int(r.n_expanded_embd), int(r.vocab_size))
    hw = preset(CATALOGUE[gpu])  # a40 is no --hardware preset; its row prices it here
    c = pass_constants(shape, hw, tp, get_execution("cuda_graph"))
    q = cell["num_tokens"].to_numpy(np.float64)
    p_layers = layers * shape.layer_params
    flops = 2.0 * p_layers / tp * q
    nbytes = hw.dtype_bytes * p_layers / tp + c.act_bytes_per_token * q
    return np.maximum(flops * c.inv_compute, nbytes * c.inv_memory) + layers * hw.layer_latency


def calibrated_layers(fit: GpuFit, cell: pd.DataFrame, layers: int, tp: int) -> np.ndarray:
    """What simulator.cost.measured.calibrated prices for the cell's rows: the corrected laws under
    their non-decreasing envelope (simulator.cost.measured.laws.envelope)."""
    shape, q = frame_shape(cell.iloc[0]), cell["num_tokens"].to_numpy(np.float64)

    def law(x):
        return embedding_seconds(fit, shape, tp, x) + layers * layer_seconds(fit, shape, tp, x)
    return envelope(law, q, fit.corrections["attn_pre_proj"].grid)


def lomo_rows(compute: pd.DataFrame) -> pd.DataFrame:
    """One row per (gpu, model, tp, Q): measured, before, after (leave-one-shape-out)."""
    out = []
    for gpu in GPUS:
        rows = compute[(compute["gpu"] == gpu) & compute["gated"]]
        for model in sorted(rows["model"].unique()):
            held = rows[rows["model"] == model].iloc[0]
            same = np.ones(len(rows), dtype=bool)
            for col in SHAPE_KEY:
                same &= rows[col].to_numpy() == held[col]
            fit = fit_gpu(rows[~same], gpu, gpu_peaks(gpu))
            for tp, cell in rows[rows["model"] == model].groupby("tp"):
                L = LAYERS[model]
                frame = pd.DataFrame({
                    "gpu": gpu, "model": model, "tp": int(tp), "q": cell["num_tokens"].to_numpy(),
                    "measured": measured(cell, L),
                    "before": roofline_layers(gpu, cell, L, int(tp)),
                    "after": calibrated_layers(fit, cell, L, int(tp))})
                out.append(frame)
            print(f"  fitted {gpu} without {model}", file=sys.stderr, flush=True)
    return pd.concat(out, ignore_index=True)


def cell_rows(compute: pd.DataFrame) -> pd.DataFrame:
    """Leave-one-token-count-out interpolation error of every bundled cell."""
    out = []
    for (gpu, model, tp), cell in compute[compute["gated"]].groupby(["gpu", "model", "tp"]):
        cell = cell.sort_values("num_tokens")
        q, t = cell["num_tokens"].to_numpy(np.float64), measured(cell, LAYERS[model])
        pred = t[:-2] + (t[2:] - t[:-2]) * (q[1:-1] - q[:-2]) / (q[2:] - q[:-2])
        out.append(pd.DataFrame({"gpu": gpu, "model": model, "tp": int(tp), "q": q[1:-1],
                                 "err": pred / t[1:-1] - 1}))
    return pd.concat(out, ignore_index=True)


def allreduce_rows() -> pd.DataFrame:
    """The all-reduce as the calibrated model prices it against Vidur's NCCL curves: each
    half-octave bin left out and interpolated log-log from its neighbours (``curve``), and
    the law t = α + s/γ fitted on the even bins >= 1 MiB, evaluated on the odd ones (``law``;
    the model extrapolates with it beyond 64 MiB)."""
    out = []
    net = load_public_profiles().network
    for (cluster, world), _ in net[net["collective"] == "all_reduce"].groupby(
            ["cluster", "world"]):
        gpu = cluster.split("_")[0]
        curve = allreduce_curve(gpu, int(world)) if cluster.endswith("dgx") else None
        if curve is None:
            continue
        sizes, times = curve
        inner = np.arange(1, len(sizes) - 1)
        pred = np.exp(np.log(times[inner - 1]) + (np.log(times[inner + 1]) - np.log(
            times[inner - 1])) * (np.log(sizes[inner]) - np.log(sizes[inner - 1]))
            / (np.log(sizes[inner + 1]) - np.log(sizes[inner - 1])))
        out.append(pd.DataFrame({"cluster": cluster, "world": int(world), "how": "curve",
                                 "size": sizes[inner], "err": pred / times[inner] - 1}))
        big = np.flatnonzero(sizes >= 1 << 20)
        train, test = big[::2], big[1::2]
        law = fit_allreduce(sizes[train], times[train])
        out.append(pd.DataFrame({"cluster": cluster, "world": int(world), "how": "law",
                                 "size": sizes[test],
                                 "err": law.seconds(sizes[test]) / times[test] - 1}))
    return pd.concat(out, ignore_index=True)


#: LLMServingSim's H100 attention rows' models as project shapes.
ATTENTION_SHAPES = {"meta-llama/Llama-3.1-70B": "llama-3.1-70b",
                    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b"}


def attention_rows() -> pd.DataFrame:
    """The calibrated model's analytic attention per layer against LLMServingSim's measured
    FlashAttention-2 rows (traces/data/profiles/llmservingsim). Its profiler gives each of
    ``batch`` decode requests kv / batch cached tokens (``kv_cache_size`` is the batch's
    total; profiler/v0/profiler/attention/attention_profiler.py ``_build_varlen_qkv``), and
    a prefill chunk kv keys. ``gqa`` is a diagnostic, not a priced model: the same with the
    KV bytes read once per query head (heads / kv_heads times), as a varlen decode kernel
    without GQA packing does."""
    from specbatch.simulator.cost.registry import build_cost_model
    from specbatch.traces.public.llmservingsim_attention import load_attention

    out = []
    for (model, tp), rows in load_attention().groupby(["model", "tp"]):
        m = build_cost_model("calibrated", "h100", ATTENTION_SHAPES[model],
                             ATTENTION_SHAPES[model], int(tp))
        shape, pricer = m.target, m.roles["target"]
        for r in rows.itertuples():
            if r.phase == "decode":
                q, kv = np.ones(r.batch, dtype=np.int64), np.full(r.batch, r.kv // r.batch)
            else:
                q, kv = np.array([r.chunk]), np.array([max(r.kv - r.chunk, 0)])
            sq, skv, sqkv, sqq = float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q)
            pred = pricer.attention(sq, skv, sqkv, sqq) / shape.layers
            law = pricer.fit.gemm["mlp_up_proj"]
            gqa = max(pricer.consts.attn_flops * (sqkv + 0.5 * (sqq + sq)) / law.flops,
                      pricer.consts.kv_bytes * (skv + 2 * sq) * shape.heads / shape.kv_heads
                      / law.bandwidth) / shape.layers
            out.append({"model": model, "tp": int(tp), "phase": r.phase, "kv": r.kv,
                        "measured": 1e-3 * r.median_ms, "after": pred, "gqa": gqa})
    return pd.DataFrame(out)


def errors(frame: pd.DataFrame, by: list[str], col: str = "after") -> pd.DataFrame:
    e = frame[col] / frame["measured"] - 1 if col != "err" else frame["err"]
    g = frame.assign(e=e, ae=e.abs()).groupby(by, observed=True)
    return g.agg(rows=("e", "size"), mape=("ae", "mean"), mean_signed=("e", "mean"))


def both(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    before, after = errors(frame, by, "before"), errors(frame, by, "after")
    return before.add_suffix("_before").join(after.add_suffix("_after")).drop(columns="rows_after")


def fmt_table(t: pd.DataFrame) -> str:
    cols = [c for c in t.columns if c != "rows_before"]
    out = t.copy()
    for c in cols:
        spec = "+.1f" if "signed" in c else ".1f"
        out[c] = (100 * out[c]).map(lambda v, spec=spec: format(v, spec))
    return out.rename(columns={"rows_before": "rows"}).to_string()


def validation_record(lomo: pd.DataFrame, cells: pd.DataFrame, ar: pd.DataFrame) -> dict:
    per_tp = errors(lomo, ["gpu", "tp"])
    before = errors(lomo, ["gpu", "tp"], "before")
    per_cell = errors(cells.rename(columns={"err": "err"}), ["gpu", "model", "tp"], "err")
    per_ar = errors(ar[ar["how"] == "curve"], ["cluster", "world"], "err")

    def rec(r, what):
        return {"mape": round(float(r.mape), 4), "mean_signed": round(float(r.mean_signed), 4),
                "rows": int(r.rows), "check": what}
    return {
        "about": "written by benchmarks/cost_vs_public.py --write; errors of the "
                 "non-attention pass time (emb + L block) against Vidur's profiles",
        "lomo": {f"{g}|tp{tp}": rec(r, "leave-one-shape-out on Vidur's profiles of this GPU")
                 for (g, tp), r in per_tp.iterrows()},
        "roofline": {f"{g}|tp{tp}": rec(r, "cost = 'roofline' on the same ops and rows")
                     for (g, tp), r in before.iterrows()},
        "cells": {f"{g}|{m}|tp{tp}": rec(r, "each token count left out, interpolated from "
                                            "its neighbours")
                  for (g, m, tp), r in per_cell.iterrows()},
        "allreduce": {f"{c}|{w}": rec(r, "NCCL curve: each half-octave size bin left out, "
                                         "interpolated log-log from its neighbours")
                      for (c, w), r in per_ar.iterrows()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--write", action="store_true",
                    help="store the all-model laws and the validated errors in "
                         "simulator/cost/measured/data")
    args = ap.parse_args()
    compute = load_public_profiles().compute
    lomo = lomo_rows(compute)
    lomo["regime"] = pd.cut(lomo["q"], REGIMES, labels=REGIME_NAMES)
    cells, ar = cell_rows(compute), allreduce_rows()
    ar["band"] = pd.cut(ar["size"], [0, 1 << 20, 8 << 20, 1 << 40],
                        labels=["<1MiB", "1-8MiB", ">8MiB"])
    tables = {
        "per model, GPU, tp": both(lomo, ["gpu", "model", "tp"]),
        "per GPU, tp": both(lomo, ["gpu", "tp"]),
        "per GPU, tokens per pass": both(lomo, ["gpu", "regime"]),
        "overall": both(lomo.assign(all="all"), ["all"]),
    }
    cell_t = errors(cells, ["gpu", "tp"], "err")
    attn = attention_rows()
    attn["kv_tokens"] = pd.cut(attn["kv"], [0, 1024, 8192, 1 << 30],
                               labels=["<=1k", "1k-8k", ">8k"])
    attn_t = errors(attn, ["model", "phase", "kv_tokens"], "after").join(
        errors(attn, ["model", "phase", "kv_tokens"], "gqa").drop(columns="rows")
        .add_suffix("_gqa_diagnostic"))
    ar_t = errors(ar, ["cluster", "world", "how", "band"], "err")
    if args.write:
        atomic_write(LAWS, dumps({"about": "calibrated laws fitted on every bundled gated "
                                           "model per GPU (benchmarks/cost_vs_public.py)",
                                  "gpus": [fit_to_dict(fit_gpu(compute, g, gpu_peaks(g)))
                                           for g in GPUS]}) + "\n")
        atomic_write(VALIDATION, dumps(validation_record(lomo, cells, ar), indent=1) + "\n")
    if args.json:
        print(dumps({name: json.loads(t.reset_index().to_json(orient="records"))
                     for name, t in {**tables, "cells": cell_t, "allreduce": ar_t,
                                     "attention": attn_t}.items()}))
        return
    print("Non-attention pass time (emb + L x block) against Vidur's profiles; % error, "
          "before = roofline, after = calibrated (leave-one-shape-out)")
    for name, t in tables.items():
        print(f"\n== {name} ==\n{fmt_table(t)}")
    print("\n== table cells as the source (token count left out, neighbours interpolated) ==")
    print(fmt_table(cell_t.rename(columns={"rows": "rows_before"})))
    print("\n== all-reduce vs measured NCCL curve: curve = bin left out, interpolated; "
          "law = alpha + s/gamma on even bins >= 1 MiB, odd held out ==")
    print(fmt_table(ar_t.rename(columns={"rows": "rows_before"})))
    print("\n== analytic attention per layer vs LLMServingSim's measured FlashAttention-2 "
          "(H100, tp 4); gqa = diagnostic with KV read per query head ==")
    print(fmt_table(attn_t.rename(columns={"rows": "rows_before"})))


if __name__ == "__main__":
    Path(LAWS).parent.mkdir(parents=True, exist_ok=True)
    main()
