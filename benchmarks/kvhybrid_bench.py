"""What vLLM V1's hybrid KV cache manager changes for a sliding-window model, and what it costs
the simulator (simulator.engine.group_tables), in the same run.

Gemma-3-270M (15 of 18 layers slide, W = 512) serving long prompts (1,500-4,000 tokens,
outputs 100-400, a seeded table) in paged mode on one H100 roofline with little memory left
(``--utilization``), n-gram drafts (fixed k = 3): the run with the hybrid manager (the default)
against ``disable_hybrid_kv_cache_manager = true``, alternating run by run, best of
``--repeat``. Printed per run: the pool (tokens of one group), preemptions, makespan and
throughput (simulated), and CPU seconds per engine step (the hybrid run composes every step
with the per-request walk; the knob's run keeps the vectorised composer and its fast paths).

    .venv/bin/python benchmarks/kvhybrid_bench.py [--requests 128] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.run import simulate


def workload(path: Path, requests: int) -> Path:
    """A seeded table of long prompts (the window is 512) and medium outputs."""
    rng = np.random.default_rng(0)
    prompt = rng.integers(1500, 4000, requests)  # [N]
    output = rng.integers(100, 400, requests)  # [N]
    path.write_text("prompt_len,output_len\n"
                    + "".join(f"{p},{o}\n" for p, o in zip(prompt, output)))
    return path


def run_rows(requests: int, repeat: int, utilization: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        table = workload(Path(tmp) / "long.csv", requests)
        best, summaries = {}, {}
        for _ in range(repeat):
            for name, disable in (("hybrid", False), ("disabled", True)):
                config = load_config(
                    None, target="gemma-3-270m", draft="ngram", policy="fixed", kv_mode="paged",
                    workload=str(table), requests=requests, max_num_seqs=128,
                    gpu_memory_utilization=utilization, enable_prefix_caching=False,
                    disable_hybrid_kv_cache_manager=disable, seed=1)
                start = time.process_time()
                result = simulate(config)
                cpu = time.process_time() - start
                steps = int(result.summary.get("steps", 0)) or len(result.step_table)
                best[name] = min(best.get(name, float("inf")), cpu / max(steps, 1))
                s = result.summary
                summaries[name] = {"kv_capacity": s["kv_capacity"],
                                   "preemptions": s["preemptions"],
                                   "makespan_s": round(s["makespan"], 3),
                                   "throughput": round(s["throughput"], 1), "steps": steps}
    return {name: {**summaries[name], "cpu_ms_per_step": round(1e3 * best[name], 3)}
            for name in best} | {"cpu_ratio": round(best["hybrid"] / best["disabled"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--utilization", type=float, default=0.0095,
                        help="gpu_memory_utilization (small: memory binds)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = run_rows(args.requests, args.repeat, args.utilization)
    if args.json:
        print(json.dumps(out))
        return
    for name in ("hybrid", "disabled"):
        print(name, out[name])
    print("CPU per step, hybrid / disabled:", out["cpu_ratio"])


if __name__ == "__main__":
    main()
