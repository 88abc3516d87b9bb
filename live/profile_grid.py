"""Timing both models of a live run on its (batch, query, KV) grid.

The passes run separately from the live run on uniform batches over random KV caches, and on
the target's mixed passes (running rows' decode tokens plus whole prompts, vLLM V1's step),
through the same slot-cache calls as the engine, so a cost model fitted to them (``specbatch
validate --fit RUN``) is out-of-sample for every run it predicts.
"""

from __future__ import annotations

import time

import pandas as pd

#: The mixed passes' prompt columns (simulator.cost.measured.profiled.MIXED_COLUMNS; live does not
#: import the simulator): prompts per pass and tokens per prompt, 0 on uniform rows.
MIXED_COLUMNS = ("prefill_batch", "prefill_tokens")


def visited_grid(n: int, depth: int, prompt_mean: float, max_new: int) -> dict:
    """The (batch, query, kv) cells a live run's workload visits, as a profiling grid.

    n = the run's running slots (``max_num_seqs``). Batches n, ⌈n/2⌉, ⌈n/4⌉, ..., 1; KV lengths
    prompt, prompt + max_new/2, prompt + max_new (prompt = mean prompt length); queries 1 (draft)
    and 1..K+1 (target); plus the prefill cell (query = mean prompt length, KV 0) at every batch
    size. The target also gets mixed cells (batch, K + 1, kv, m, prompt): every batch b < n at every
    KV length with m = 1 and m = n − b joiners' prompts in the same pass (a V1 step admitting one or
    filling the slots). returns role -> list of cells (3-tuples, mixed cells 5-tuples).
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
    mixed = [(b, depth + 1, kv, m, p) for b in batches if b < n for kv in kvs
             for m in sorted({1, n - b})]
    return {"draft": [(b, 1, kv) for b in batches for kv in kvs] + prefill,
            "target": [(b, q, kv) for b in batches for q in range(1, depth + 2) for kv in kvs]
            + prefill + mixed}


def time_masked_forward(model, batch: int, query: int, kv: int, warmup: int = 2,
                        repeats: int = 5, prefill_batch: int = 0,
                        prefill_tokens: int = 0) -> list[float]:
    """Wall seconds of ``repeats`` forward passes of ``[batch, query]`` new tokens on ``kv``
    random cached ones, called exactly as the live engine calls the model: a
    :class:`specbatch.live.cache.SlotCache` pass (in-place slot writes, 4-D mask, all
    ``query`` logits) over ``batch`` running rows, or for ``kv = 0`` the prefill of ``batch``
    prompts of ``query`` tokens (:meth:`SlotCache.prefill`), or with ``prefill_batch`` m > 0
    the mixed pass of the running rows and m prompts of ``prefill_tokens`` tokens
    (:meth:`SlotCache.mixed`); ``torch.cuda.synchronize`` around each pass on CUDA."""
    import numpy as np
    import torch

    from specbatch.live.cache import SlotCache

    p = next(model.parameters())
    device = p.device
    cuda = device.type == "cuda"
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (batch, query), generator=gen).to(device)
    joiners = torch.randint(0, model.config.vocab_size, (prefill_batch, prefill_tokens),
                            generator=gen).tolist()
    cache = SlotCache(model, slots=batch + prefill_batch,
                      length=max(kv + query, prefill_tokens) + 1)
    if kv:
        cache.fill_random(batch, kv)
    prompts = ids.tolist()
    width = np.full(batch, query, dtype=np.int64)
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeats):
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            if prefill_batch:
                cache.n = batch
                cache.mixed(model, ids, width, joiners)
            elif kv:
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
    """Median forward-pass time of uniform batches and mixed passes on random KV caches
    (:func:`time_masked_forward`) at every cell of :func:`visited_grid`; latency-profile columns
    (:data:`traces.capture.profile.PROFILE_COLUMNS`) and the mixed passes' prompts
    (:data:`MIXED_COLUMNS`, 0 on uniform rows). Measured separately from the live run, so a cost
    model fitted to it is out-of-sample for that run.

    progress: a bar on stderr, one tick per cell (None: only when stderr is a terminal; the
    grid of a small run takes tens of seconds)."""
    import statistics
    import sys

    import torch
    from tqdm import tqdm

    from specbatch.traces.capture.profile import PROFILE_COLUMNS

    rows = []
    bar = tqdm(total=len(cells["draft"]) + len(cells["target"]), desc="profile grid",
               unit="cell", file=sys.stderr, disable=None if progress is None else not progress)
    for role, model, name in (("draft", draft, names[0]), ("target", target, names[1])):
        for b, q, kv, *joiners in cells[role]:
            m, p = joiners or (0, 0)
            bar.set_postfix_str(f"{role} batch {b} query {q} kv {kv}"
                                + (f" + {m} prompts of {p}" if m else ""), refresh=False)
            times = time_masked_forward(model, b, q, kv, warmup, repeats, m, p)
            bar.update(1)
            rows.append({"model": name, "role": role, "device": device, "dtype": dtype,
                         "batch_size": b, "query_tokens": q, "kv_tokens": kv,
                         "latency_s": statistics.median(times), "repeats": repeats,
                         "latency_min_s": min(times), "latency_max_s": max(times),
                         "threads": torch.get_num_threads(), "prefill_batch": m,
                         "prefill_tokens": p})
    bar.close()
    return pd.DataFrame(rows, columns=[*PROFILE_COLUMNS, *MIXED_COLUMNS])
