"""``cost = "aic"`` against measured per-layer profiles it was not fitted on.

    python benchmarks/aic_passes.py           # markdown tables (docs/fidelity.md)

Out of sample: the aic cost is fitted on AIConfigurator's tables only; these profiles come from
other profilers, other vLLM versions and other runs:

- LLMServingSim's RTX PRO 6000 per-layer profiles (traces.public.llmservingsim_profiles; vLLM
  0.19, eager, one layer): the four projection GEMMs of a layer summed (qkv, o, gate_up, down)
  at each token count; one attention call at every (prefill chunk, cached, decodes, cached)
  row (decode-only, prefill-only and *mixed* batches: the check of how a mixed call is priced,
  FlashAttention 2's unpacked call on this GPU, simulator.cost.measured.aic_mixed);
  the LM head at each row count; the whole non-attention layers(Q) (GEMMs + small ops,
  embedding and final norm; the small ops priced by the calibrated laws, not fitted on these).
- Vidur's H100 / A100 mlp.csv (traces.public.vidur_profiles, Vidur commit 7d47513, 2024
  kernels): the four projection GEMMs of a layer summed per (model, tp, Q) for the gated models.

Reported per set: MAPE and the mean signed error (aic / measured − 1).
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.aic_cost import SYSTEM_OF, AicCost
from specbatch.simulator.cost.measured.aic_op_curves import shape_curves
from specbatch.simulator.cost.measured.aic_pricer import gemm_dims
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import get_shape
from specbatch.traces.public.llmservingsim_profiles import bundled_profiles, read_profile
from specbatch.traces.public.vidur_profiles import load_public_profiles

GEMM_LAYERS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def stats(pred: np.ndarray, meas: np.ndarray) -> str:
    e = np.asarray(pred) / np.asarray(meas) - 1.0
    return f"{100 * np.abs(e).mean():.1f} % ({100 * e.mean():+.1f} %, {e.size} rows)"


def lss_rows() -> list[str]:
    out = ["| profile | GEMMs per layer | attention: decode-only | prefill-only | mixed | "
           "LM head | layers(Q) |", "|---|---|---|---|---|---|---|"]
    for (gpu, model, tp), ps in bundled_profiles().items():
        if gpu not in SYSTEM_OF or "moe" in ps.files:
            continue
        shape = get_shape(str(ps.config))
        cost = AicCost(get_hardware(gpu), shape, shape, tp=tp)
        r = cost.roles["target"]
        dense = read_profile(ps.files["dense"], "dense")
        wide = dense.pivot_table(index="tokens", columns="layer", values="time_us")
        q = wide.index.to_numpy(dtype=np.float64)
        meas = 1e-6 * wide[list(GEMM_LAYERS)].sum(axis=1).to_numpy()
        pred = np.array([sum(r.curves[n][1].at(x) for n in ("qkv", "o", "gate_up", "down"))
                         for x in q])
        per_layer = wide.drop(columns=["embedding", "final_layernorm"]).sum(axis=1).to_numpy()
        whole = 1e-6 * (shape.layers * per_layer + wide["embedding"].to_numpy()
                        + wide["final_layernorm"].to_numpy())
        layers = np.array([r.parts(x)[0] for x in q])
        att = read_profile(ps.files["attention"], "attention")
        p, cp = att["prefill_chunk"].to_numpy(float), att["kv_prefill"].to_numpy(float)
        d, cd = att["n_decode"].to_numpy(float), att["kv_decode"].to_numpy(float)
        n, sq = (p > 0) + d, p + d
        skv, sqkv, sqq = cp + d * cd, p * cp + d * cd, p * p + d
        a = np.array([r.attention.seconds(*row) for row in zip(n, sq, skv, sqkv, sqq)])
        a = a / shape.layers
        t = 1e-6 * att["time_us"].to_numpy()
        kinds = {"decode": (p == 0) & (d > 0), "prefill": (p > 0) & (d == 0),
                 "mixed": (p > 0) & (d > 0)}
        seq = read_profile(ps.files["per_sequence"], "per_sequence")
        head = seq[seq["layer"] == "lm_head"]
        hp = np.array([r.head_at(float(x)) for x in head["sequences"]])
        out.append(f"| {gpu} {model} tp {tp} | {stats(pred, meas)} | "
                   + " | ".join(stats(a[m], t[m]) if m.any() else "-" for m in kinds.values())
                   + f" | {stats(hp, 1e-6 * head['time_us'].to_numpy())} | "
                     f"{stats(layers, whole)} |")
    return out


def vidur_rows() -> list[str]:
    out = ["| GPU | cells (model x tp) | GEMMs per layer vs Vidur mlp.csv |", "|---|---|---|"]
    c = load_public_profiles().compute
    for gpu in ("h100", "a100"):
        sc = shape_curves(SYSTEM_OF[gpu], "gemm", "bfloat16")
        preds, meas, cells = [], [], 0
        for (model, tp), cell in c[(c["gpu"] == gpu) & c["gated"]].groupby(["model", "tp"]):
            row = cell.iloc[0]
            shape = ModelShape(model, 1, int(row.n_embd), int(row.n_head), int(row.n_kv_head),
                               int(row.n_expanded_embd), int(row.vocab_size))
            curves = [sc.curve(nk) for nk in gemm_dims(shape, int(tp)).values()]
            q = cell["num_tokens"].to_numpy(dtype=np.float64)
            preds.append([sum(cv.at(x) for cv in curves) for x in q])
            meas.append(1e-3 * cell[["attn_pre_proj_ms", "attn_post_proj_ms", "mlp_up_proj_ms",
                                     "mlp_down_proj_ms"]].sum(axis=1).to_numpy())
            cells += 1
        out.append(f"| {gpu} | {cells} | {stats(np.concatenate(preds), np.concatenate(meas))} |")
    return out


def main() -> int:
    print("\n".join(lss_rows()))
    print()
    print("\n".join(vidur_rows()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
