"""Forward-pass latency profiles of a model over (batch size x query tokens x KV length).

A speculative-decoding step is one target pass that scores ``query_tokens`` new tokens per
request on top of ``kv_tokens`` cached ones (draft passes have ``query_tokens = 1``), for a
batch of ``batch_size`` requests. :func:`profile_model` measures exactly that: it fills a
random KV cache of ``kv_tokens`` entries per request, runs the forward pass on
``[batch_size, query_tokens]`` new tokens, and records the median wall time of ``repeats``
runs after ``warmup`` runs (``torch.cuda.synchronize`` around each run on CUDA).

The model is either a local HF model directory, or random weights of a named architecture
shape from :mod:`traces.models.shapes` (step time depends on the shape, not on the weight values);
``layers`` overrides the layer count so a CPU smoke run of a large shape stays feasible (the
``model`` column then says so, e.g. ``llama-3.1-8b@2L``).

``max_cell_tokens`` leaves out cells whose ``batch * (kv + query)`` exceeds it (the KV cache
of the largest cells may not fit a smaller GPU); the skipped cells are listed in the
frame's ``attrs``.

Output rows (the latency profile of docs/DESIGN.md): ``model, role, device, dtype, batch_size,
query_tokens, kv_tokens, latency_s, repeats, latency_min_s, latency_max_s, threads`` (torch
CPU threads of the measuring process: on CPU the latency depends on it).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from specbatch.errors import SpecbatchError, require
from specbatch.io import atomic_write
from specbatch.traces.capture.cache_api import cache_kwargs

PROFILE_COLUMNS = ("model", "role", "device", "dtype", "batch_size", "query_tokens", "kv_tokens",
                   "latency_s", "repeats", "latency_min_s", "latency_max_s", "threads")


@dataclass(frozen=True)
class ProfileGrid:
    """The measured grid and the timing protocol."""

    batch_sizes: tuple[int, ...] = (1, 4, 16)
    query_tokens: tuple[int, ...] = (1, 4, 8)
    kv_tokens: tuple[int, ...] = (128, 512)
    warmup: int = 2
    repeats: int = 5
    max_cell_tokens: int | None = None  # skip cells with batch * (kv + query) above this


def cell_tokens(batch: int, query: int, kv: int) -> int:
    """Tokens a cell holds in the KV cache after its pass: ``batch * (kv + query)``."""
    return batch * (kv + query)


def grid_cells(grid: ProfileGrid) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(measured, skipped) ``(batch, query, kv)`` cells: a cell is skipped when
    :func:`cell_tokens` exceeds ``grid.max_cell_tokens`` (e.g. its KV cache would not fit)."""
    cells = list(itertools.product(grid.batch_sizes, grid.query_tokens, grid.kv_tokens))
    cap = grid.max_cell_tokens
    keep = [c for c in cells if cap is None or cell_tokens(*c) <= cap]
    return keep, [c for c in cells if c not in keep]


def _dtype(name: str):
    import torch

    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    require(name in table, f"--dtype: expected one of {', '.join(table)}, got {name!r}")
    return table[name]


def load_profile_model(model: str, device: str = "cpu", dtype: str = "float32",
                       layers: int | None = None):
    """(model, label): a local HF model dir, or random weights of a named shape."""
    import torch

    if device.startswith("cuda"):
        require(torch.cuda.is_available(), f"--device {device}: expected a CUDA device, got none")
    path = Path(model)
    if path.is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoConfig, AutoModelForCausalLM

        require((path / "config.json").is_file(),
                f"model {model}: expected a Hugging Face model directory with config.json, "
                "got a directory without one")
        if layers is not None:
            try:
                config = AutoConfig.from_pretrained(path, local_files_only=True)
            except Exception as exc:  # a damaged config.json is bad input
                raise SpecbatchError(f"model {model}: expected a readable config.json, got "
                                     f"{type(exc).__name__}: {str(exc)[:160]}") from None
            config.num_hidden_layers = layers
            m = AutoModelForCausalLM.from_config(config, dtype=_dtype(dtype))
            label = f"{path.name}@{layers}L"
        else:
            from specbatch.traces.models.weights import load_pretrained

            m = load_pretrained(path, f"model {model}", _dtype(dtype))
            label = path.name
        return m.to(device).eval(), label
    from transformers import LlamaConfig, LlamaForCausalLM

    from specbatch.traces.models.shapes import get_shape

    try:
        shape = get_shape(model)
    except SpecbatchError as exc:
        raise SpecbatchError(f"--model {model}: expected a model directory or a shape name; "
                             f"{exc}") from None
    if shape.is_moe or shape.attention_head_dim:
        raise SpecbatchError(f"--model {model}: expected a dense Llama shape with head_dim = "
                             "hidden / heads (a shape name profiles a randomly initialised "
                             "Llama; mixture-of-experts and explicit-head_dim shapes are not "
                             "built), or a model directory")
    n_layers = shape.layers if layers is None else layers
    config = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden,
                         intermediate_size=shape.intermediate, num_hidden_layers=n_layers,
                         num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                         tie_word_embeddings=shape.tie_embeddings,
                         max_position_embeddings=131072)
    with torch.device(device):
        m = LlamaForCausalLM(config).to(_dtype(dtype))
    label = shape.name if layers is None else f"{shape.name}@{layers}L"
    return m.eval(), label


def _random_kv(model, batch: int, kv: int, device, dtype) -> list:
    """Per layer (keys, values), each ``[batch, kv_heads, kv, head_dim]`` random (values do not
    change the time)."""
    import torch

    c = model.config
    heads = getattr(c, "num_key_value_heads", c.num_attention_heads)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    data = []
    for _ in range(c.num_hidden_layers):
        k = torch.randn(batch, heads, kv, head_dim, device=device, dtype=dtype)
        data.append((k, torch.randn_like(k)))
    return data


def time_forward(model, batch: int, query: int, kv: int, warmup: int, repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` forward passes of ``[batch, query]`` tokens on ``kv`` cached.

    The random cache is built once per cell; after each pass it is cropped back to ``kv``
    entries (a view, outside the timed region), so every pass sees exactly ``kv`` cached
    entries, the time is the forward pass alone (including HF's cache concatenation) and the
    peak memory is one cache plus one layer's concatenation, as with a fresh cache per pass.
    ``crop(-n)`` removes ``n`` entries in both the old and the new transformers cache API.
    """
    import torch
    from transformers import DynamicCache

    p = next(model.parameters())
    device, dtype = p.device, p.dtype
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, vocab, (batch, query), generator=gen).to(device)
    pos = (kv + torch.arange(query, device=device))[None].expand(batch, -1)
    cuda = device.type == "cuda"
    times = []
    with torch.inference_mode():
        cache = DynamicCache(_random_kv(model, batch, kv, device, dtype)) if kv else None
        for i in range(warmup + repeats):
            if cache is not None and i:
                cache.crop(-query)  # back to kv entries: drop the last pass's query entries
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            model(input_ids=ids, **cache_kwargs(model, cache), position_ids=pos,
                  use_cache=kv > 0, logits_to_keep=query)
            if cuda:
                torch.cuda.synchronize(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return times


def profile_model(model: str, grid: ProfileGrid, device: str = "cpu", dtype: str = "float32",
                  role: str = "target", layers: int | None = None, progress: bool = False):
    """Measure the grid; returns a pandas DataFrame with :data:`PROFILE_COLUMNS`.

    Cells over ``grid.max_cell_tokens`` are left out; ``frame.attrs`` holds
    ``max_cell_tokens`` and ``skipped_cells`` (``[batch, query, kv]`` each; Parquet keeps the
    attrs in its metadata, CSV does not).
    """
    import pandas as pd
    import torch
    from tqdm import tqdm

    for name, values in (("batch sizes", grid.batch_sizes), ("query tokens", grid.query_tokens)):
        require(bool(values) and all(v >= 1 for v in values),
                f"{name}: expected positive integers, got {list(values)}")
    require(all(v >= 0 for v in grid.kv_tokens) and bool(grid.kv_tokens),
            f"kv tokens: expected non-negative integers, got {list(grid.kv_tokens)}")
    require(grid.repeats >= 1 and grid.warmup >= 0,
            f"repeats/warmup: expected >= 1 / >= 0, got {grid.repeats}/{grid.warmup}")
    require(grid.max_cell_tokens is None or grid.max_cell_tokens >= 1,
            f"--max-cell-tokens: expected a positive integer, got {grid.max_cell_tokens}")
    cells, skipped = grid_cells(grid)
    if not cells:
        raise SpecbatchError(f"--max-cell-tokens {grid.max_cell_tokens}: expected at least one "
                             "cell with batch x (kv + query) <= it, got none (smallest cell: "
                             f"{min(cell_tokens(*c) for c in skipped)} tokens)")
    m, label = load_profile_model(model, device, dtype, layers)
    torch.manual_seed(0)
    rows = []
    for b, q, kv in tqdm(cells, disable=not progress, desc="profile", unit="cell"):
        times = time_forward(m, b, q, kv, grid.warmup, grid.repeats)
        rows.append({"model": label, "role": role, "device": device, "dtype": dtype,
                     "batch_size": b, "query_tokens": q, "kv_tokens": kv,
                     "latency_s": statistics.median(times), "repeats": grid.repeats,
                     "latency_min_s": min(times), "latency_max_s": max(times),
                     "threads": torch.get_num_threads()})
    frame = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
    frame.attrs["max_cell_tokens"] = grid.max_cell_tokens
    frame.attrs["skipped_cells"] = [list(c) for c in skipped]  # [batch, query, kv] each
    return frame


def write_profile(frame, path: str | Path) -> None:
    """Write a profile as Parquet (``.parquet``) or CSV (``.csv``), atomically."""
    path = Path(path)
    require(path.suffix in (".parquet", ".csv"),
            f"--out {path}: expected a file name ending in .parquet or .csv")
    if path.suffix == ".parquet":
        atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))
    else:
        atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
