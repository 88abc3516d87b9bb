"""Verification cost: torch BV vs torch TV (and the numpy reference) on one batch.

Serving-sized batch (default B = 256 requests, γ = 8 draft tokens, V = 32000, float32 rows on CPU).
Target rows are softmax(logits), draft rows softmax(logits + noise) so per-token acceptance is
realistic (noise 0.5: E[τ_TV] ≈ 3.6 of 8, like the block paper's PaLM-2 runs). Times are the best of
``--repeats`` runs (the machine is shared); ratios are taken within the same run.

TV touches the vocabulary once per request (the residual or bonus row at τ); BV also computes
``Z_{i+1}`` for positions γ-1 down to τ (lazy backward scan, theory/verify/torch_batched.py), so its
cost grows with γ − E[τ]. The "dense BV" line computes every Z
(theory.verify.path_stats.position_stats, numpy float64, one position at a time) for comparison, and
"softmax of both rows" is what producing the rows from logits costs (both rules pay it in a real
verifier).

    .venv/bin/python benchmarks/verify_bench.py [--batch 256] [--gamma 8] [--vocab 32000]
        [--repeats 5] [--noise 0.5] [--threads N] [--skip-numpy] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from specbatch.theory.verify.path_stats import position_stats
from specbatch.theory.verify.reference import verify_block, verify_token
from specbatch.theory.verify.torch_batched import verify_block_torch, verify_token_torch


def make_batch(batch: int, gamma: int, vocab: int, noise: float, seed: int):
    """(tokens # [B, γ], draft rows # [B, γ, V], target rows # [B, γ+1, V], uniforms # [B, γ])."""
    gen = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn((batch, gamma + 1, vocab), generator=gen)
    target = torch.softmax(logits, dim=-1)
    draft = torch.softmax(
        logits[:, :gamma] + noise * torch.randn((batch, gamma, vocab), generator=gen), dim=-1
    )
    tokens = torch.multinomial(draft.reshape(-1, vocab), 1, generator=gen).reshape(batch, gamma)
    uniforms = torch.rand((batch, gamma), generator=gen, dtype=torch.float64)
    return tokens, draft, target, uniforms


def best_time(fn, repeats: int) -> tuple[float, object]:
    result, best = None, float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--gamma", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--noise", type=float, default=0.5, help="draft logit noise (std)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (0: torch default; 1 is steadier on a shared box)",
    )
    parser.add_argument("--skip-numpy", action="store_true")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def time_torch(tokens, draft, target, uniforms, repeats: int) -> list[dict]:
    """Rows for torch TV and BV (interleaved, so a load spike on a shared box hits both)."""
    gen = torch.Generator().manual_seed(1)
    t_tv = t_bv = float("inf")
    for _ in range(repeats):
        seconds, (tau_tv, _) = best_time(
            lambda: verify_token_torch(tokens, draft, target, uniforms, generator=gen), 1
        )
        t_tv = min(t_tv, seconds)
        seconds, (tau_bv, _) = best_time(
            lambda: verify_block_torch(tokens, draft, target, uniforms, generator=gen), 1
        )
        t_bv = min(t_bv, seconds)
    return [
        {"impl": "torch TV", "seconds": t_tv, "mean_tau": float(tau_tv.float().mean())},
        {"impl": "torch BV", "seconds": t_bv, "mean_tau": float(tau_bv.float().mean())},
    ]


def time_softmax(target, repeats: int) -> dict:
    """Context: both rules first need the rows, softmax over [B, γ+1, V] and [B, γ, V] logits."""
    logits = torch.log(target)
    seconds, _ = best_time(
        lambda: (torch.softmax(logits, dim=-1), torch.softmax(logits[:, :-1], dim=-1)), repeats
    )
    return {"impl": "softmax of both rows", "seconds": seconds, "mean_tau": None}


def time_numpy(tokens, draft, target, uniforms) -> list[dict]:
    """Rows for the numpy reference verifiers and the dense statistics (one run each)."""
    tk, u = tokens.numpy(), uniforms.numpy()
    dr, tr = draft.double().numpy(), target.double().numpy()  # converted once, untimed
    rng = np.random.default_rng(2)
    rows = []
    for name, fn in (("numpy TV (reference)", verify_token),
                     ("numpy BV (reference)", verify_block)):
        seconds, (tau, _) = best_time(lambda fn=fn: fn(tk, dr, tr, u, rng), 1)
        rows.append({"impl": name, "seconds": seconds, "mean_tau": float(tau.mean())})
    seconds, _ = best_time(lambda: position_stats(tk, dr, tr), 1)
    rows.append({"impl": "dense BV stats (numpy)", "seconds": seconds, "mean_tau": None})
    return rows


def print_table(args, summary: dict) -> None:
    print(
        f"B={args.batch} gamma={args.gamma} V={args.vocab} float32 rows, "
        f"torch threads={summary['threads']}, best of {args.repeats}"
    )
    print(f"{'implementation':<24} {'ms':>10} {'x torch TV':>11} {'mean tau':>9}")
    for row in summary["rows"]:
        tau = "" if row["mean_tau"] is None else f"{row['mean_tau']:.3f}"
        print(f"{row['impl']:<24} {1e3 * row['seconds']:10.1f} {row['vs_torch_TV']:11.2f} {tau:>9}")
    print(f"torch BV / torch TV = {summary['bv_over_tv']:.2f} (goal <= 1.5)")
    print(f"including the softmax that produces the rows: {summary['with_softmax_bv_over_tv']:.2f}")


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokens, draft, target, uniforms = make_batch(
        args.batch, args.gamma, args.vocab, args.noise, seed=0
    )
    rows = time_torch(tokens, draft, target, uniforms, args.repeats)
    rows.append(time_softmax(target, args.repeats))
    if not args.skip_numpy:
        rows += time_numpy(tokens, draft, target, uniforms)
    t_tv, t_bv, t_soft = (row["seconds"] for row in rows[:3])
    for row in rows:
        row["vs_torch_TV"] = row["seconds"] / t_tv
    summary = {
        "batch": args.batch,
        "gamma": args.gamma,
        "vocab": args.vocab,
        "threads": torch.get_num_threads(),
        "bv_over_tv": t_bv / t_tv,
        "with_softmax_bv_over_tv": (t_soft + t_bv) / (t_soft + t_tv),
        "goal_bv_over_tv": 1.5,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(summary))
        return
    print_table(args, summary)


if __name__ == "__main__":
    main()
