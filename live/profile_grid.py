"""Timing both models of a live run on its (batch, query, KV) grid.

The passes run separately from the live run on uniform batches over random KV caches, through
the same slot-cache calls as the engine, so a cost model fitted to them (``specbatch
validate --fit RUN``) is out-of-sample for every run it predicts.
"""

from __future__ import annotations

import time

import pandas as pd


def grid_cells(n: int, depth: int, prompt_mean: float, max_new: int) -> dict:
    """The (batch, query, kv) cells a live run's workload visits, as a profiling grid.

    n = the run's running slots (``max_num_seqs``). Batches n, ⌈n/2⌉, ⌈n/4⌉, ..., 1; KV lengths prompt, prompt + max_new/2, prompt + max_new
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
    random cached ones, called exactly as the live engine calls the model: a
    :class:`specbatch.live.cache.SlotCache` pass (in-place slot writes, 4-D mask, all
    ``query`` logits) over ``batch`` running rows, or for ``kv = 0`` the prefill of ``batch``
    prompts of ``query`` tokens (:meth:`SlotCache.prefill`); ``torch.cuda.synchronize``
    around each pass on CUDA."""
    import torch

    from specbatch.live.cache import SlotCache

    p = next(model.parameters())
    device = p.device
    cuda = device.type == "cuda"
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (batch, query), generator=gen).to(device)
    cache = SlotCache(model, slots=batch, length=kv + query + 1)
    if kv:
        cache.fill_random(batch, kv)
    prompts = ids.tolist()
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeats):
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            if kv:
                cache.forward(model, ids)
            else:
                cache.n = 0
                cache.prefill(model, prompts)
            if cuda:
                torch.cuda.synchronize(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return times


def profile_grid(draft, target, names: tuple[str, str], cells: dict, device: str, dtype: str,
                 warmup: int = 2, repeats: int = 5, progress: bool | None = None) -> pd.DataFrame:
    """Median forward-pass time of uniform batches on random KV caches
    (:func:`time_masked_forward`) at every cell of :func:`grid_cells`; latency-profile columns
    (:data:`traces.profile.PROFILE_COLUMNS`). Measured separately from the live run, so a cost
    model fitted to it is out-of-sample for that run.

    progress: a bar on stderr, one tick per cell (None: only when stderr is a terminal; the
    grid of a small run takes tens of seconds)."""
    import statistics
    import sys

    import torch
    from tqdm import tqdm

    from specbatch.traces.profile import PROFILE_COLUMNS

    rows = []
    bar = tqdm(total=len(cells["draft"]) + len(cells["target"]), desc="profile grid",
               unit="cell", file=sys.stderr, disable=None if progress is None else not progress)
    for role, model, name in (("draft", draft, names[0]), ("target", target, names[1])):
        for b, q, kv in cells[role]:
            bar.set_postfix_str(f"{role} batch {b} query {q} kv {kv}", refresh=False)
            times = time_masked_forward(model, b, q, kv, warmup, repeats)
            bar.update(1)
            rows.append({"model": name, "role": role, "device": device, "dtype": dtype,
                         "batch_size": b, "query_tokens": q, "kv_tokens": kv,
                         "latency_s": statistics.median(times), "repeats": repeats,
                         "latency_min_s": min(times), "latency_max_s": max(times),
                         "threads": torch.get_num_threads()})
    bar.close()
    return pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
