"""Capture speed: shared-prefix KV fast path against naive per-position recomputation.

Same tiny pair (random weights with the ``tiny`` zoo shapes, a BPE tokenizer trained on a
slice of the stdlib), same prompts (~``--prompt-tokens`` tokens cut from stdlib source), same
random numbers, so both paths record the same positions. Rows of the table:

- ``naive``: :func:`traces.capture.chain.capture_request_naive` — for every output position t the
  draft reruns ``c + y_<t`` from scratch and the target reruns ``c + y_<t + X^K``;
- ``fast``: :func:`traces.capture.chain.capture_request` — one prefix pass per model, then P
  positions per batched draft decode / target pass over the shared cache;
- ``fast+batched-ref``: what ``specbatch capture`` runs — the requests' reference outputs in
  one batched decode, then the fast positions path.

Positions per second = recorded rows / wall seconds (reference generation included in all
three). The machine is shared: numbers are the best of ``--repeats``.

    .venv/bin/python benchmarks/capture_bench.py [--requests 4] [--max-new-tokens 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def build(args):
    from specbatch.traces.corpus import stdlib_documents
    from specbatch.traces.models.zoo import ZOO_SIZES, make_model, train_tokenizer

    docs = stdlib_documents("code", "train")[:20]
    tok = train_tokenizer(docs, 512)
    size = ZOO_SIZES["tiny"]
    torch.manual_seed(0)
    draft = make_model(size.draft, len(tok), 256, tok.eos_token_id).eval()
    target = make_model(size.target, len(tok), 256, tok.eos_token_id).eval()
    prompts = []
    for d in docs[: args.requests]:
        ids = tok(d, add_special_tokens=False)["input_ids"][: args.prompt_tokens]
        prompts.append(ids)
    return tok, draft, target, prompts


def run(mode, tok, draft, target, prompts, cfg):
    from specbatch.traces.capture.chain import (
        capture_positions,
        capture_request,
        capture_request_naive,
        generate_reference_batch,
        request_uniforms,
    )

    rows = 0
    t0 = time.perf_counter()
    if mode == "fast+batched-ref":
        with torch.inference_mode():
            refs = generate_reference_batch(
                target, prompts, [request_uniforms(cfg.seed, i, cfg.max_new_tokens, cfg.depth)[0]
                                  for i in range(len(prompts))], cfg, tok.eos_token_id)
        for i, (ids, ref) in enumerate(zip(prompts, refs)):
            rows += len(capture_positions(draft, target, ids, i, cfg, ref)["y"])
    else:
        fn = capture_request if mode == "fast" else capture_request_naive
        for i, ids in enumerate(prompts):
            rows += len(fn(tok, draft, target, ids, i, cfg)["y"])
    return rows, time.perf_counter() - t0


def main() -> None:
    from specbatch.traces.capture.chain import CaptureConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=192)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tok, draft, target, prompts = build(args)
    cfg = CaptureConfig(max_new_tokens=args.max_new_tokens, depth=args.depth, temperature=1.0,
                        batch_size=args.batch_size, stop_at_eos=False)
    results = {}
    for mode in ("naive", "fast", "fast+batched-ref"):
        best = None
        for _ in range(args.repeats):
            rows, secs = run(mode, tok, draft, target, prompts, cfg)
            best = secs if best is None else min(best, secs)
        results[mode] = {"positions": rows, "seconds": round(best, 3),
                         "positions_per_s": round(rows / best, 1)}
    base = results["naive"]["positions_per_s"]
    for r in results.values():
        r["speedup_vs_naive"] = round(r["positions_per_s"] / base, 2)
    setup = {"requests": args.requests, "prompt_tokens": args.prompt_tokens,
             "max_new_tokens": args.max_new_tokens, "K": args.depth,
             "batch_size": args.batch_size, "threads": args.threads,
             "draft_params": sum(p.numel() for p in draft.parameters()),
             "target_params": sum(p.numel() for p in target.parameters())}
    if args.json:
        print(json.dumps({"setup": setup, "results": results}))
        return
    print("capture speed, tiny pair: " + ", ".join(f"{k}={v}" for k, v in setup.items()))
    print(f"{'path':<18} {'positions':>9} {'seconds':>8} {'pos/s':>8} {'vs naive':>9}")
    for mode, r in results.items():
        print(f"{mode:<18} {r['positions']:>9} {r['seconds']:>8.2f} {r['positions_per_s']:>8.1f} "
              f"{r['speedup_vs_naive']:>8.2f}x")
    assert np.isfinite(base)


if __name__ == "__main__":
    main()
