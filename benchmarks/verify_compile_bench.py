"""TV and BV on CPU: numpy reference vs torch eager vs ``torch.compile`` (THEORY.md §2-3).

Implementations, each timed on the same batch (rows as in verify_gpu_bench.py: target
softmax(3·N(0,1)), draft softmax(target logits + 0.5·noise), float32):

- ``numpy``: :func:`specbatch.theory.verify.reference.verify_token` / ``verify_block`` (float64);
- ``torch-lazy``: :func:`specbatch.theory.verify.torch_batched.verify_torch` on CPU (row loop, skips
  ``Z_{i+1}`` where a bound decides);
- ``torch-sync-free``: :func:`specbatch.theory.verify.torch_sync_free.verify_sync_free`
  eager (fixed operator sequence, every ``Z_{i+1}`` computed);
- ``compiled``: the same function through ``torch.compile`` (inductor, C++ on CPU); the
  first call's compile time is reported separately.

Timing: median of ``--repeats`` calls after ``--warmup`` (``time.perf_counter``); torch
threads as given (default 1: the machine is shared).

    python benchmarks/verify_compile_bench.py [--shapes 64x4x8192,16x8x32000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import numpy as np
import torch

from specbatch.theory.verify.reference import verify_block, verify_token
from specbatch.theory.verify.torch_batched import verify_torch
from specbatch.theory.verify.torch_sync_free import verify_sync_free


def make_batch(batch: int, gamma: int, vocab: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    target = torch.randn((batch, gamma + 1, vocab), generator=gen).mul_(3.0)
    draft = torch.randn((batch, gamma, vocab), generator=gen).mul_(0.5).add_(target[:, :gamma])
    target, draft = torch.softmax(target, -1), torch.softmax(draft, -1)
    tokens = torch.multinomial(draft.reshape(-1, vocab), 1, generator=gen).reshape(batch, gamma)
    return tokens, draft, target, torch.rand((batch, gamma), generator=gen, dtype=torch.float64)


def median_ms(fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def bench(shape, warmup: int, repeats: int) -> list[dict]:
    batch, gamma, vocab = shape
    tokens, draft, target, uniforms = make_batch(batch, gamma, vocab)
    arrays = [x.numpy() for x in (tokens, draft, target, uniforms)]
    rows = []
    for rule in ("token", "block"):
        reference = verify_token if rule == "token" else verify_block
        compiled = torch.compile(verify_sync_free, dynamic=False)
        t0 = time.perf_counter()
        compiled(rule, tokens, draft, target, uniforms)
        compile_s = time.perf_counter() - t0
        batch_args = (rule, tokens, draft, target, uniforms)
        calls = {
            "numpy": functools.partial(reference, *arrays, np.random.default_rng(0)),
            "torch-lazy": functools.partial(verify_torch, *batch_args, sync_free=False),
            "torch-sync-free": functools.partial(verify_sync_free, *batch_args),
            "compiled": functools.partial(compiled, *batch_args),
        }
        row = {"rule": rule, "batch": batch, "gamma": gamma, "vocab": vocab,
               "compile_s": compile_s}
        row.update({name: median_ms(fn, warmup, repeats) for name, fn in calls.items()})
        rows.append(row)
    return rows


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="64x4x8192,16x8x32000", help="BxγxV,...")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = [r for shape in shapes for r in bench(shape, args.warmup, args.repeats)]
    print(f"CPU, torch {torch.__version__}, {args.threads} thread(s), float32 rows, median ms "
          f"of {args.repeats} after {args.warmup} warm-up")
    print(f"{'rule':<6}{'B':>5}{'γ':>3}{'V':>7}{'numpy':>9}{'lazy':>9}{'syncfree':>10}"
          f"{'compiled':>10}{'compile s':>11}")
    for r in rows:
        print(f"{r['rule']:<6}{r['batch']:>5}{r['gamma']:>3}{r['vocab']:>7}{r['numpy']:>9.2f}"
              f"{r['torch-lazy']:>9.2f}{r['torch-sync-free']:>10.2f}{r['compiled']:>10.2f}"
              f"{r['compile_s']:>11.1f}")
    return rows


if __name__ == "__main__":
    main()
