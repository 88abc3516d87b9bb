"""Simulator speed: simulated output tokens per wall-clock second.

Headline: 10k requests arriving at once, max_num_seqs 64, TETRIS (k = 3, e = 1) with block
verification on the bundled toy trace ``tiny`` when present, whose numbers docs/benchmarks.md
records (else a synthetic trace; the table says which), roofline cost model (H100, vicuna-68m ->
vicuna-33b). The same workload also runs
through the engine's per-request reference step (``reference=True``: scalar hash and one
``accept_from_stats`` call per request per step) on a smaller request count, and the ratio of
the two rates is printed. Then paged KV mode at max_num_seqs 64 (simulator.kv): with a
pool that never runs out (the block bookkeeping's cost, as a ratio to the reserve headline)
and with the capacity the H100's memory leaves next to Vicuna-33B (preemption by
recomputation: more, smaller steps, so fewer tokens per wall second for a different
simulated run). Then the curve for max_num_seqs 8..512.

Usage: .venv/bin/python benchmarks/sim_bench.py [--requests N] [--quick] [--json]
Goal: >= 1M simulated tokens/s for the headline row.
"""

from __future__ import annotations

import argparse
import json
import time

from specbatch.simulator.config import load_config
from specbatch.simulator.run import build_cost, simulate


def load_bench_trace():
    """(trace, description): the bundled `tiny` trace if present, else a synthetic one."""
    try:
        from specbatch.traces.format import read_trace, resolve_trace

        path = resolve_trace("tiny")
        trace = read_trace(path)
        return trace, f"tiny trace ({path}, {trace.n_requests} requests, K={trace.K})"
    except Exception:  # noqa: BLE001 - a checkout without the bundled trace
        from specbatch.traces.synth import SynthConfig, synth_trace

        cfg = SynthConfig(requests=256, seed=0)
        return synth_trace(cfg), (f"synthetic trace (traces.synth defaults, {cfg.requests} "
                                  f"requests, K={cfg.depth}; no bundled tiny trace found)")


def rate(config, trace, cost, reference: bool = False) -> tuple[float, dict]:
    """Simulated output tokens per wall second of one simulate() call (best of one run)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = simulate(config, trace, cost_model=cost, reference=reference)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    s = result.summary
    return s["tokens"] / wall, {"wall_s": wall, "cpu_s": cpu, "cpu_tokens_per_s": s["tokens"] / cpu,
                                "tokens": s["tokens"], "steps": s["steps"], "mal": s["mal"],
                                "sim_throughput": s["throughput"],
                                "preemptions": s["preemptions"], "kv_capacity": s["kv_capacity"]}


def numpy_op_us() -> float:
    """Machine calibration: microseconds of one small numpy op (64-element add, best of 5)."""
    import timeit

    import numpy as np

    a, b = np.arange(64), np.ones(64, dtype=np.int64)
    return min(timeit.repeat(lambda: a + b, number=20000, repeat=5)) / 20000 * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--reference-requests", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.reference_requests = 1000, 100
    trace, source = load_bench_trace()
    base = load_config(None, trace="synth", policy="tetris", num_speculative_tokens=3, extra=1,
                       verify="block", max_num_seqs=64, requests=args.requests)
    cost = build_cost(base)
    out: dict = {"trace": source, "config": "tetris k=3 e=1 BV, burst, roofline h100 "
                 "vicuna-68m -> vicuna-33b", "numpy_op_us": numpy_op_us()}
    fast, info = rate(base, trace, cost)
    ref_config = base.replace(requests=args.reference_requests)
    fast_small, _ = rate(ref_config, trace, cost)
    slow_small, _ = rate(ref_config, trace, cost, reference=True)
    out["headline"] = {"requests": args.requests, "max_num_seqs": 64, "tokens_per_s": fast, **info}
    out["reference"] = {"requests": args.reference_requests, "vectorised_tokens_per_s": fast_small,
                        "reference_tokens_per_s": slow_small, "ratio": fast_small / slow_small}
    paged = []
    for label, capacity in (("paged, pool never full", 10**8), ("paged, H100 memory", None)):
        config = base.replace(kv_mode="paged", kv_capacity=capacity)
        r, info = rate(config, trace, cost)
        paged.append({"label": label, "requests": args.requests, "tokens_per_s": r,
                      "ratio_to_reserve": r / fast, **info})
    out["paged"] = paged
    curve = []
    for batch in (8, 16, 32, 64, 128, 256, 512):
        n = max(args.requests // 5, 8 * batch) if not args.quick else 4 * batch
        r, info = rate(base.replace(max_num_seqs=batch, requests=n), trace, cost)
        curve.append({"max_num_seqs": batch, "requests": n, "tokens_per_s": r, **info})
    out["curve"] = curve
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"simulator benchmark on {source}")
    print(f"config: {out['config']}")
    print(f"machine: one 64-element numpy add takes {out['numpy_op_us']:.2f} us "
          f"(typically ~0.5 us on an idle core); a decode step is ~45 numpy calls")
    h = out["headline"]
    print(f"\nheadline: {h['requests']} requests, max_num_seqs 64: {h['tokens_per_s']:,.0f} "
          f"simulated tokens per wall second ({h['cpu_tokens_per_s']:,.0f} per CPU second; "
          f"{h['tokens']} tokens, {h['steps']} steps, {h['wall_s']:.2f} s wall; goal >= 1,000,000)")
    ref = out["reference"]
    print(f"reference per-request loop ({ref['requests']} requests): vectorised "
          f"{ref['vectorised_tokens_per_s']:,.0f} vs reference {ref['reference_tokens_per_s']:,.0f}"
          f" tokens/s -> ratio {ref['ratio']:.1f}x")
    print(f"\n{'paged KV, max_num_seqs 64':<26} {'capacity':>10} {'preemptions':>11} "
          f"{'steps':>7} {'tokens/wall s':>14} {'vs reserve':>10}")
    for row in out["paged"]:
        print(f"{row['label']:<26} {row['kv_capacity']:>10} {row['preemptions']:>11} "
              f"{row['steps']:>7} {row['tokens_per_s']:>14,.0f} {row['ratio_to_reserve']:>9.2f}x")
    print(f"\n{'max_num_seqs':>12} {'requests':>9} {'steps':>7} {'MAL':>6} {'wall s':>8} "
          f"{'tokens/wall s':>14} {'tokens/CPU s':>13}")
    for row in curve:
        print(f"{row['max_num_seqs']:>12} {row['requests']:>9} {row['steps']:>7} "
              f"{row['mal']:>6.2f} {row['wall_s']:>8.2f} {row['tokens_per_s']:>14,.0f} "
              f"{row['cpu_tokens_per_s']:>13,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
