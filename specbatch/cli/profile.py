"""``specbatch profile``: forward-pass latency over a grid (see :mod:`traces.capture.profile`)."""

from __future__ import annotations

import argparse
import sys

from specbatch.cli.common import (
    add_json_flag,
    add_threads_flag,
    device_arg,
    emit,
    example,
    int_list,
    nonneg_int,
    positive_int,
    set_threads,
)
from specbatch.io import prepare_output_file
from specbatch.limits import MAX_PROFILE_CELL_TOKENS, check_size


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="measure forward-pass latency over batch x query x KV length",
        description="Measure a model's forward-pass latency (warm-up, device synchronisation, "
                    "median of repeats) over batch size x query tokens per request x KV-cache "
                    "length. --model is a local HF model directory or a named shape (random "
                    "weights; step time does not depend on weight values).",
        epilog=example(
            "specbatch profile --model vicuna-68m --device cpu --out prof.csv --batch 1,4 "
            "--query 1,4 --kv 64,256",
            "specbatch profile --model llama-3.1-8b --layers 2 --device cpu --out smoke.parquet",
            "specbatch profile --model llama-3.1-70b --device cuda --dtype bfloat16 "
            "--out h100-70b.parquet",
            "specbatch profile --model llama-3.1-8b --device cuda --batch 1,64,256 "
            "--kv 512,2048 --max-cell-tokens 262144 --out h100-8b.parquet"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model directory or shape name "
                                                  "(traces.models.shapes)")
    p.add_argument("--device", type=device_arg, default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default=None, help="float32 (default on CPU), bfloat16 (default on "
                   "CUDA) or float16")
    p.add_argument("--out", required=True, help="output file: .parquet or .csv")
    p.add_argument("--role", default="target", choices=["draft", "target"])
    p.add_argument("--layers", type=positive_int, default=None, help="override the layer count")
    p.add_argument("--batch", type=int_list(positive_int), default=(1, 4, 16), help="batch sizes, "
                                                                                    "e.g. 1,4,16")
    p.add_argument("--query", type=int_list(positive_int), default=(1, 4, 8), help="query tokens "
                                                                                   "per request")
    p.add_argument("--kv", type=int_list(nonneg_int), default=(128, 512), help="KV-cache lengths")
    p.add_argument("--warmup", type=nonneg_int, default=2)
    p.add_argument("--repeats", type=positive_int, default=5)
    add_threads_flag(p)
    p.add_argument("--max-cell-tokens", type=int, default=None, metavar="N",
                   help="skip cells whose batch x (kv + query) exceeds N tokens (e.g. KV caches "
                        "that do not fit the GPU); the count goes to stderr and the JSON summary, "
                        "the skipped cells to the Parquet metadata")
    add_json_flag(p)
    p.set_defaults(func=_profile)


def _check_cells(args) -> None:
    """Refuse a grid whose largest cell holds more tokens than a workstation's memory, unless
    --max-cell-tokens skips such cells."""
    largest = max(args.batch) * (max(args.kv) + max(args.query))
    if args.max_cell_tokens is None:
        check_size("profile --batch x (--kv + --query)", largest, MAX_PROFILE_CELL_TOKENS,
                   "tokens in one cell", "pass --max-cell-tokens N to skip such cells")


def _profile(args) -> int:
    from specbatch.traces.capture.profile import ProfileGrid, profile_model, write_profile

    prepare_output_file(args.out, suffixes=(".parquet", ".csv"))  # before measuring
    _check_cells(args)
    threads = set_threads(args.threads, args.device)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    grid = ProfileGrid(batch_sizes=args.batch, query_tokens=args.query, kv_tokens=args.kv,
                       warmup=args.warmup, repeats=args.repeats,
                       max_cell_tokens=args.max_cell_tokens)
    frame = profile_model(args.model, grid, device=args.device, dtype=dtype, role=args.role,
                          layers=args.layers, progress=not args.json)
    write_profile(frame, args.out)
    skipped = frame.attrs["skipped_cells"]
    if skipped:
        sys.stderr.write(f"profile: skipped {len(skipped)} of {len(skipped) + len(frame)} cells "
                         f"with batch x (kv + query) > {args.max_cell_tokens} tokens\n")
    summary = {"out": args.out, "model": frame["model"].iloc[0], "device": args.device,
               "dtype": dtype, "threads": threads, "cells": len(frame),
               "cells_skipped": len(skipped),
               "max_cell_tokens": args.max_cell_tokens,
               "latency_min_s": float(frame["latency_s"].min()),
               "latency_max_s": float(frame["latency_s"].max())}
    if args.json:
        emit(summary, True)
    else:
        emit({}, False, frame.to_string(index=False) + f"\nwrote {args.out}")
    return 0
