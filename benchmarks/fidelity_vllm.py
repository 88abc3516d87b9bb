"""Fidelity against real vLLM servers: replay every bundled measured run (docs/fidelity.md).

Each bundled run (traces/data/vllm_runs/: a real vLLM 0.19 server on an RTX 4090 or an RTX PRO
6000 Blackwell, 300 ShareGPT requests at ~10 req/s, from casys-kaist/LLMServingSim) is
simulated with ``ar`` under the vllm-v1 composer with each ``--cost`` source, and one table
prints the signed errors y/x − 1 of TTFT, TPOT (vLLM's definition) and e2e (mean, p99) and of
throughput, the ±10 % TOST verdicts, and the anchor simulator's own published mean errors on
the same runs. A run the cost source cannot price (a shape without a profile) is a row that says
so. Nothing of the measured timing is fitted: the runs are an out-of-sample test (each cost
source's own fit data: docs/fidelity.md).

    .venv/bin/python benchmarks/fidelity_vllm.py [--cost roofline,calibrated] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cost", default="roofline,calibrated",
                        help="comma-separated cost sources (SimConfig cost names)")
    parser.add_argument("--runs", default=None, help="comma-separated bundled run names "
                        "(default: all)")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON object")
    args = parser.parse_args()

    from specbatch.analysis.validate.vllm_run import suite_row, suite_table
    from specbatch.io import dumps
    from specbatch.traces.public.vllm_runs import bundled_runs

    names = args.runs.split(",") if args.runs else list(bundled_runs())
    start = time.perf_counter()
    rows = [suite_row(name, cost) for cost in args.cost.split(",") for name in names]
    if args.json:
        sys.stdout.write(dumps({"rows": rows}) + "\n")
        return 0
    print(suite_table(rows))
    print(f"\n{len(rows)} replays in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
