"""Timing both models of a live run on its (batch, query, KV) grid.

The passes run separately from the live run on uniform batches over random KV caches, so a
cost model fitted to them (``specbatch validate``) is out-of-sample for that run.
"""

from __future__ import annotations

import time

import pandas as pd


def grid_cells(n: int, depth: int, prompt_mean: float, max_new: int) -> dict:
    """The (batch, query, kv) cells a live run's workload visits, as a profiling grid.

    Batches n, ⌈n/2⌉, ⌈n/4⌉, ..., 1; KV lengths prompt, prompt + max_new/2, prompt + max_new
    (prompt = mean prompt length); queries 1 (draft) and 1..K+1 (target); plus the prefill
    cell (query = mean prompt length, KV 0) at every batch size. returns role -> list of cells.
    """
    batches, b = [], int(n)
    while True:
        batches.append(b)
        if b == 1:
            break
        b = (b + 1) // 2
    p = max(1, int(round(prompt_mean)))
    kvs = sorted({p, p + max_new // 2, p + max_new})
    prefill = [(b, p, 0) for b in batches]
    return {"draft": [(b, 1, kv) for b in batches for kv in kvs] + prefill,
            "target": [(b, q, kv) for b in batches for q in range(1, depth + 2) for kv in kvs]
            + prefill}


def time_masked_forward(model, batch: int, query: int, kv: int, warmup: int = 2,
                        repeats: int = 5) -> list[float]:
    """Wall seconds of ``repeats`` forward passes of ``[batch, query]`` new tokens on ``kv``
    random cached ones, called exactly as the live loop calls the model (a 2-D attention mask
    and explicit position ids; only the last position's logits for a prefill, all ``query``
    positions otherwise); ``torch.cuda.synchronize`` around each pass on CUDA.

    :func:`traces.profile.time_forward` passes no mask (HF may then take a cheaper causal
    path), so this is the profile of the engine that
    :func:`specbatch.live.loop.run_live` actually runs.
    """
    import torch
    from transformers import DynamicCache

    p = next(model.parameters())
    device, dtype = p.device, p.dtype
    c = model.config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, c.vocab_size, (batch, query), generator=gen).to(device)
    mask = torch.ones((batch, kv + query), dtype=torch.long, device=device)
    pos = (kv + torch.arange(query, device=device))[None].expand(batch, -1)
    keep = 1 if kv == 0 else query
    cuda = device.type == "cuda"
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeats):
            cache = None
            if kv:
                shape = (batch, heads, kv, head_dim)
                cache = DynamicCache([(torch.randn(shape, device=device, dtype=dtype),
                                       torch.randn(shape, device=device, dtype=dtype))
                                      for _ in range(c.num_hidden_layers)])
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                  use_cache=True, logits_to_keep=keep)
            if cuda:
                torch.cuda.synchronize(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return times


def profile_grid(draft, target, names: tuple[str, str], cells: dict, device: str, dtype: str,
                 warmup: int = 2, repeats: int = 5) -> pd.DataFrame:
    """Median forward-pass time of uniform batches on random KV caches
    (:func:`time_masked_forward`) at every cell of :func:`grid_cells`; latency-profile columns
    (:data:`traces.profile.PROFILE_COLUMNS`). Measured separately from the live run, so a cost
    model fitted to it is out-of-sample for that run."""
    import statistics

    import torch

    from specbatch.traces.profile import PROFILE_COLUMNS

    rows = []
    for role, model, name in (("draft", draft, names[0]), ("target", target, names[1])):
        for b, q, kv in cells[role]:
            times = time_masked_forward(model, b, q, kv, warmup, repeats)
            rows.append({"model": name, "role": role, "device": device, "dtype": dtype,
                         "batch_size": b, "query_tokens": q, "kv_tokens": kv,
                         "latency_s": statistics.median(times), "repeats": repeats,
                         "latency_min_s": min(times), "latency_max_s": max(times),
                         "threads": torch.get_num_threads()})
    return pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
