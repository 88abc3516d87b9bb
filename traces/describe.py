"""Human-readable summaries of a trace: what ``specbatch trace info`` and reports print.

``trace_summary`` gives per draft position i the means over all rows of ``r_i``, ``min(1, r_i)``
and BV's ``p_i``, and the implied mean accepted length ``MAL(γ) = E[τ + 1] = 1 + Σ_{i≤γ} mean
P(τ ≥ i)`` for TV (``P = Π_{j≤i} min(1, r_j)``, THEORY.md §2) and BV (``P = p_i``, §3) at every
γ = 0..K, averaged uniformly over the recorded (request, position) rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def trace_summary(trace) -> dict:
    """The numbers ``specbatch trace info`` prints (means over all position rows)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = trace.pt / trace.q  # [rows, K]
    accept = np.minimum(r, 1.0)
    tv = trace.accept_tv.mean(axis=0)  # [K] mean P(τ ≥ i) under TV
    bv = trace.p.mean(axis=0)  # [K] under BV
    models = trace.meta.get("models") or {}
    names = {role: (m.get("name") or m.get("path")) if isinstance(m, dict) else m
             for role, m in models.items()} if isinstance(models, dict) else models
    categories, counts = np.unique(trace.category.astype(str), return_counts=True)
    return {
        "path": trace.path,
        "requests": trace.n_requests,
        "positions": trace.n_rows,
        "K": trace.K,
        "temperature": trace.temperature,
        "models": names,
        "model_params": {role: m.get("params") for role, m in models.items() if isinstance(m, dict)}
        if isinstance(models, dict) else {},
        "categories": dict(zip(categories.tolist(), counts.tolist())),
        "prompt_len_mean": float(trace.prompt_len.mean()),
        "output_len_mean": float(trace.output_len.mean()),
        "per_position": {
            "i": list(range(1, trace.K + 1)),
            "r_mean": r.mean(axis=0).tolist(),
            "accept_mean": accept.mean(axis=0).tolist(),
            "p_mean": bv.tolist(),
            "tv_reach_mean": tv.tolist(),
        },
        "mal": {
            "gamma": list(range(trace.K + 1)),
            "tv": (1 + np.concatenate([[0.0], np.cumsum(tv)])).tolist(),
            "bv": (1 + np.concatenate([[0.0], np.cumsum(bv)])).tolist(),
        },
    }


def describe_trace(meta: dict, depth: int) -> str:
    """``draft (0.37M params) -> target (3.44M params), 240 requests, temperature 1, K = 8``."""
    bits = []
    models = meta.get("models") or {}
    pair = []
    for role in ("draft", "target"):
        model = models.get(role) or meta.get(role) or {}
        if isinstance(model, str):
            pair.append(model)
            continue
        where = str(model.get("path") or model.get("name") or role)
        text = "/".join(Path(where).parts[-2:])
        if model.get("params"):
            text += f" ({model['params'] / 1e6:.2f}M params)"
        pair.append(text)
    bits.append(" -> ".join(pair))
    if "temperature" in meta:
        bits.append(f"temperature {meta['temperature']:g}")
    bits.append(f"K = {depth}")
    return ", ".join(bits)
