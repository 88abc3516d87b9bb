"""Measured attention-kernel times in LLMServingSim's profile layout, for validating the cost
models' analytic attention term.

casys-kaist/LLMServingSim (MIT) ships ``profiler/v0/perf_models/<gpu>/<org>/<model>/tp<N>/
attention.csv``: vLLM's FlashAttention backend timed per layer, one row per decode cell
(``batch_size`` requests with ``kv_cache_size`` cached tokens each) or prefill cell (one
``prefill_chunk_size``-token chunk, ``kv_cache_size`` tokens in the cache after it), with
``time_stats.attn_{decode,prefill}.{min,max,mean,median,std}`` in ms and the shape columns
``n_embd``, ``n_q_head``, ``n_kv_head``, ``num_tensor_parallel_workers``.

:func:`import_llmservingsim_attention` keeps, per cell, the median and std: every prefill
row, and the decode rows whose batch size is a power of two and whose cache is 32 x a power
of two (the rest of its dense grid adds nothing a check needs). Bundled:
``traces/data/profiles/llmservingsim/attention.csv`` (H100 Llama-3.1-70B and Mixtral-8x7B at
tp 4, the only measured attention rows of a datacentre GPU there) with PROVENANCE.json.
A bad file is a one-line error naming the file and column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.errors import require
from specbatch.traces.public.vidur_profiles import numeric, read_csv, sha256

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "profiles" / "llmservingsim"
LLMSERVINGSIM_SOURCE = {"repository": "https://github.com/casys-kaist/LLMServingSim",
                        "commit": "5daddb21a545658d5150b535712d0494584b5278", "licence": "MIT",
                        "copyright": "Copyright (c) 2024, CASYS Lab at KAIST"}
COLUMNS = ("gpu", "model", "tp", "phase", "batch", "chunk", "kv", "n_embd", "n_q_head",
           "n_kv_head", "median_ms", "std_ms")


def power_of_two(n: np.ndarray) -> np.ndarray:
    n = n.astype(np.int64)
    return (n > 0) & ((n & (n - 1)) == 0)


def read_attention(path: Path, gpu: str, model: str) -> pd.DataFrame:
    """One attention.csv as :data:`COLUMNS` rows (module docstring)."""
    raw = read_csv(path)
    require(len(raw) > 0, f"{path}: no rows; expected LLMServingSim's attention.csv")
    require("is_prefill" in raw.columns, f"{path}: column 'is_prefill' missing; expected "
            "LLMServingSim's attention.csv layout")
    flag = raw["is_prefill"].astype(str).str.lower()
    require(bool(flag.isin(("true", "false")).all()),
            f"{path}: column 'is_prefill': expected True or False")
    out = []
    for phase, rows in (("prefill", raw[flag == "true"]), ("decode", raw[flag == "false"])):
        if rows.empty:
            continue
        frame = pd.DataFrame({
            "batch": numeric(rows, path, "batch_size", positive=True),
            "chunk": (numeric(rows, path, "prefill_chunk_size", positive=True)
                      if phase == "prefill" else np.zeros(len(rows))),
            "kv": numeric(rows, path, "kv_cache_size"),
            "n_embd": numeric(rows, path, "n_embd", positive=True),
            "n_q_head": numeric(rows, path, "n_q_head", positive=True),
            "n_kv_head": numeric(rows, path, "n_kv_head", positive=True),
            "tp": numeric(rows, path, "num_tensor_parallel_workers", positive=True),
            "median_ms": numeric(rows, path, f"time_stats.attn_{phase}.median", positive=True),
            "std_ms": numeric(rows, path, f"time_stats.attn_{phase}.std"),
        })
        if phase == "decode":
            frame = frame[power_of_two(frame["batch"].to_numpy())
                          & power_of_two(frame["kv"].to_numpy() // 32)
                          & (frame["kv"].to_numpy() % 32 == 0)]
        frame.insert(0, "phase", phase)
        out.append(frame)
    frame = pd.concat(out, ignore_index=True)
    frame.insert(0, "model", model)
    frame.insert(0, "gpu", gpu)
    for col in ("tp", "batch", "chunk", "kv", "n_embd", "n_q_head", "n_kv_head"):
        frame[col] = frame[col].astype(np.int64)
    return frame[list(COLUMNS)]


def import_llmservingsim_attention(root: str | Path) -> tuple[pd.DataFrame, list[dict]]:
    """Every ``<gpu>/<org>/<model>/tp<N>/attention.csv`` under ``root`` (LLMServingSim's
    perf_models folder): the rows and the source files (path, SHA-256, rows kept)."""
    root = Path(root)
    paths = sorted(root.glob("*/*/*/tp*/attention.csv"))
    require(bool(paths), f"{root}: no <gpu>/<org>/<model>/tp<N>/attention.csv found; expected "
            "LLMServingSim's perf_models layout")
    frames, files = [], []
    for path in paths:
        gpu, org, name = path.parts[-5:-2]
        frame = read_attention(path, gpu.lower(), f"{org}/{name}")
        frames.append(frame)
        files.append({"path": path.relative_to(root).as_posix(), "sha256": sha256(path),
                      "rows_kept": len(frame)})
    return pd.concat(frames, ignore_index=True), files


def load_attention(folder: str | Path = BUNDLED) -> pd.DataFrame:
    """The bundled (or a written) attention table."""
    path = Path(folder) / "attention.csv"
    require(path.is_file(), f"{path}: missing; expected LLMServingSim attention rows")
    frame = read_csv(path)
    for col in COLUMNS:
        require(col in frame.columns, f"{path}: column {col!r} missing")
    return frame
