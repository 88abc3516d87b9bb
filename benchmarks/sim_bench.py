"""Simulator speed: simulated output tokens per wall-clock second.

Headline: 10k requests arriving at once, max_num_seqs 64, TETRIS (k = 3, e = 1) with block
verification on the bundled toy trace ``tiny`` when present, whose numbers docs/benchmarks.md
records (else a synthetic trace; the table says which), roofline cost model (H100, vicuna-68m ->
vicuna-33b), under the vllm-v1 composer (the default) and, alternating with it in the same run,
the vllm-v0 one (best of ``--repeat`` each, CPU seconds: the machine may be shared); their
ratio is printed. The same workload also runs
through the engine's per-request reference step (``reference=True``: scalar hash and one
``accept_from_stats`` call per request per step) on a smaller request count, and the ratio of
the two rates is printed. Then paged KV mode at max_num_seqs 64 (simulator.kv): with a
pool that never runs out (the block bookkeeping's cost, as a ratio to the reserve headline)
and with the capacity the H100's memory leaves next to Vicuna-33B (preemption by
recomputation: more, smaller steps, so fewer tokens per wall second for a different
simulated run). Then the curve for max_num_seqs 8..512. Last, Vidur's own workload (issue 26:
the 19,200 requests Vidur generates for its splitwise_conv lengths, ``--vidur`` FILE; skipped
when absent) end to end: one ``specbatch simulate`` process per policy (ar, tetris) and
scheduler (vllm-v1, the default, and vllm-v0; their CPU-second ratio in the same run; best of
``--repeat`` alternating runs each) with
Vidur's settings (batch cap 64, 4,096 batched tokens, paged KV, Vicuna-7B on an A100), its
simulated tokens per wall and per CPU second, peak RSS, and the ratio to Vidur's figures
measured side by side on this machine kind (222k tokens per wall second, 1.5 GiB): per wall
second, and per CPU second (user + system, what an idle core's wall second would give; the
steadier figure on a loaded shared machine).

Usage: .venv/bin/python benchmarks/sim_bench.py [--requests N] [--repeat R] [--quick] [--json]
Goals (issue 26): the headline >= 2.5M simulated tokens per CPU second with vllm-v1 at least
as fast as vllm-v0; Vidur's workload >= 2.2M tokens per second (10x Vidur).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

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


#: Vidur's request list for splitwise_conv (issue 26), next to the repository.
VIDUR_WORKLOAD = Path(__file__).resolve().parents[2] / "shared" / "workloads" / \
    "vidur-splitwise-conv-19200.csv"
#: Vidur's own figures on that workload (vLLM scheduler, batch cap 64, Llama-2-7B on an A100,
#: metrics off), measured on this machine kind for issue 26.
VIDUR_TOKENS_PER_S = 222_000
VIDUR_RSS_MIB = 1.5 * 1024
#: ``specbatch simulate`` flags of Vidur's settings.
VIDUR_FLAGS = ["--arrival", "trace", "--max-num-seqs", "64", "--max-num-batched-tokens", "4096",
               "--kv-mode", "paged", "--hardware", "a100", "--target", "vicuna-7b"]


def vidur_rows(path: Path, requests: int | None, repeat: int = 1) -> list[dict]:
    """Vidur's workload end to end, one CLI process per policy and scheduler, the best of
    ``repeat`` rounds over all four (module docstring)."""
    spec = importlib.util.spec_from_file_location("scale_bench",
                                                  Path(__file__).with_name("scale_bench.py"))
    scale_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale_bench)
    cases = (("ar", "vllm-v1"), ("ar", "vllm-v0"), ("tetris", "vllm-v1"), ("tetris", "vllm-v0"))
    best: dict = {}
    for _ in range(repeat):  # rounds alternate the four, so load drifts hit them alike
        for policy, scheduler in cases:
            args = ["simulate", "--workload", str(path), "--policy", policy, "--scheduler",
                    scheduler, *VIDUR_FLAGS, "--requests",
                    str(requests if requests is not None else 19200)]
            row = scale_bench.run_cli(args)
            old = best.get((policy, scheduler))
            if old is None or (old["rc"] == 0 and (row["rc"] != 0  # a failure shows
                                                    or row["cpu_s"] < old["cpu_s"])):
                best[(policy, scheduler)] = row
    rows = []
    for policy, scheduler in cases:
        row = {"policy": policy, "scheduler": scheduler, **best[(policy, scheduler)]}
        if row["rc"] == 0:
            v1 = rows[-1] if scheduler == "vllm-v0" and rows and rows[-1]["rc"] == 0 else None
            if v1 is not None:  # the V1 composer's CPU seconds per the V0 one's, same workload
                v1["cpu_vs_v0"] = v1["cpu_s"] / row["cpu_s"]
            row["vs_vidur_speed"] = row["tokens_per_s"] / VIDUR_TOKENS_PER_S
            row["vs_vidur_speed_cpu"] = row["tokens_per_cpu_s"] / VIDUR_TOKENS_PER_S
            row["vs_vidur_rss"] = row["rss_mib"] / VIDUR_RSS_MIB
        rows.append(row)
    return rows


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
    parser.add_argument("--repeat", type=int, default=3,
                        help="alternating runs per V1/V0 comparison, the best kept")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--vidur", type=Path, default=VIDUR_WORKLOAD,
                        help="Vidur's splitwise_conv request list (skipped when absent)")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.reference_requests, args.repeat = 1000, 100, 1
    trace, source = load_bench_trace()
    base = load_config(None, trace="synth", policy="tetris", num_speculative_tokens=3, extra=1,
                       verify="block", max_num_seqs=64, requests=args.requests)
    cost = build_cost(base)
    out: dict = {"trace": source, "config": "tetris k=3 e=1 BV, burst, roofline h100 "
                 "vicuna-68m -> vicuna-33b", "numpy_op_us": numpy_op_us()}
    runs = {"vllm-v1": [], "vllm-v0": []}
    for _ in range(max(args.repeat, 1)):  # alternating: load drifts hit both alike
        for scheduler, results in runs.items():
            results.append(rate(base.replace(scheduler=scheduler), trace, cost))
    fast, info = max(runs["vllm-v1"], key=lambda r: r[1]["cpu_tokens_per_s"])
    _, info_v0 = max(runs["vllm-v0"], key=lambda r: r[1]["cpu_tokens_per_s"])
    ref_config = base.replace(requests=args.reference_requests)
    fast_small, _ = rate(ref_config, trace, cost)
    slow_small, _ = rate(ref_config, trace, cost, reference=True)
    out["headline"] = {"requests": args.requests, "max_num_seqs": 64, "tokens_per_s": fast, **info}
    out["headline_v0"] = {"cpu_tokens_per_s": info_v0["cpu_tokens_per_s"],
                          "steps": info_v0["steps"],
                          "v1_over_v0": info["cpu_tokens_per_s"] / info_v0["cpu_tokens_per_s"]}
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
    if args.vidur.is_file():  # --quick: the first 2,000 requests
        out["vidur"] = vidur_rows(args.vidur, 2000 if args.quick else None, args.repeat)
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
          f"{h['tokens']} tokens, {h['steps']} steps, {h['wall_s']:.2f} s wall; goal >= 2,500,000 per CPU second)")
    v0 = out["headline_v0"]
    print(f"same workload under vllm-v0 ({v0['steps']} steps): {v0['cpu_tokens_per_s']:,.0f} "
          f"per CPU second; vllm-v1 / vllm-v0 = {v0['v1_over_v0']:.2f} (best of {args.repeat} "
          f"alternating runs each)")
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
    if "vidur" not in out:
        print(f"\nVidur's workload: {args.vidur} not found, skipped")
        return 0
    print(f"\nVidur's workload ({args.vidur.name}), one `specbatch simulate` process each, "
          f"{' '.join(VIDUR_FLAGS)}")
    print(f"{'policy':>8} {'scheduler':>9} {'wall s':>7} {'CPU s':>6} {'tokens/wall s':>14} "
          f"{'tokens/CPU s':>13} {'x Vidur':>8} {'(CPU)':>6} {'peak RSS':>10} {'/ Vidur':>8} "
          f"{'CPU v1/v0':>9}")
    for row in out["vidur"]:
        if row["rc"] != 0:
            print(f"{row['policy']:>8} {row['scheduler']:>9} failed: {row['error']}")
            continue
        ratio = f"{row['cpu_vs_v0']:>8.2f}x" if "cpu_vs_v0" in row else f"{'':>9}"
        print(f"{row['policy']:>8} {row['scheduler']:>9} {row['wall_s']:>7.2f} {row['cpu_s']:>6.2f} "
              f"{row['tokens_per_s']:>14,.0f} {row['tokens_per_cpu_s']:>13,.0f} "
              f"{row['vs_vidur_speed']:>7.1f}x {row['vs_vidur_speed_cpu']:>5.1f}x "
              f"{row['rss_mib']:>6.0f} MiB "
              f"{row['vs_vidur_rss']:>7.2f}x {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
