"""``specbatch demo``: the main job in one command.

On the bundled default trace (or a synthetic one when it is absent, which the output says):
``ar``; fixed k = 1..6; DSD (scanning k ≤ 6); TETRIS, oracle and hindsight with k = 1..6 and
e = 1, 2 (k + e capped at the trace's draft depth K); every speculative policy with token (TV)
and block (BV) verification. 512 requests arriving at once, 64 running, the default cost model
(``auto``: AIConfigurator's measured vLLM op tables on this H100 pair, simulator.cost.resolve)
of one H100 with a Vicuna-33B-shaped target and the 68M draft (the TETRIS paper's setting),
3 seeds. Runs on the local process pool, stores every run (a rerun is instant), prints the
headline table (best setting of each policy and verifier) and writes the full report.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from specbatch.analysis.report.demo import plan_demo, run_demo
from specbatch.analysis.sweep.points import claim_sweep_dir
from specbatch.cli.common import add_json_flag, emit, example, plural
from specbatch.io import check_output_dir
from specbatch.simulator.config.sim_config import NO_K_POLICIES

DEFAULT_OUT = "specbatch-demo"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the main comparison on the bundled trace and write a report (< 2 min)",
        description=(
            "Run the main comparison on the bundled default trace (synthetic when absent): "
            "ar; fixed k = 1..6; DSD; TETRIS, oracle and hindsight with k = 1..6, e = 1, 2; "
            "each speculative policy with token and block verification; 512 requests at "
            "once, 64 running, the default (auto) H100 cost model, Vicuna-33B-shaped target, 68M "
            "draft. Prints the best setting of each policy and writes a report to --out."),
        epilog=example("specbatch demo", "specbatch demo --out /tmp/demo --workers 4",
                       "specbatch demo --quick --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default=None,
                        help=f"output folder (default ./{DEFAULT_OUT}/, with --quick "
                             f"./{DEFAULT_OUT}-quick/; reused by a rerun of the "
                             "same demo, refused when it holds anything else: another sweep, "
                             "--quick or --seeds differing, other files; refused while another "
                             "run uses it)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny version (few requests, k in 1..2, one seed): a smoke test")
    parser.add_argument("--trace", default="default",
                        help="trace name or directory (default: the bundled default trace)")
    parser.add_argument("--workers", type=int, default=2, help="local processes (default 2)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="number of seeds (default 3, --quick 1)")
    parser.add_argument("--format", choices=("md", "html"), default="md", help="report format")
    add_json_flag(parser)
    parser.set_defaults(func=run_demo_command)


def headline_text(table) -> str:
    """Fixed-width headline table for the terminal."""
    cols = [("policy", 9, "{}"), ("verify", 6, "{}"), ("k", 2, "{}"), ("e", 2, "{}"),
            ("throughput", 11, "{:,.0f}"), ("speedup", 8, "{:.3f}x"), ("e2e_mean", 9, "{:.2f}"),
            ("e2e_p99", 8, "{:.2f}"), ("vsr", 6, "{:.3f}"), ("mal", 6, "{:.3f}")]
    heads = {"throughput": "tok/s", "speedup": "vs ar", "e2e_mean": "e2e mean",
             "e2e_p99": "e2e p99", "vsr": "VSR", "mal": "MAL"}
    lines = ["  ".join(f"{heads.get(c, c):>{w}}" for c, w, _ in cols)]
    for row in table.to_dict("records"):
        cells = []
        for c, w, f in cols:
            v = row.get(c)
            if ((row["policy"] == "ar" and c == "vsr")
                    or (row["policy"] in NO_K_POLICIES and c in ("k", "e"))):
                text = "-"  # ar verifies nothing; ar and dsd have no fixed window
            elif v is None or (isinstance(v, float) and math.isnan(v)):
                text = "-"
            else:
                text = f.format(v)
            cells.append(f"{text:>{w}}")
        lines.append("  ".join(cells))
    return "\n".join(lines)


def run_demo_command(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    plan = plan_demo(args.trace, args.quick, args.seeds)
    if args.out is None:  # the quick and the full demo are different sweeps: own folders
        args.out = DEFAULT_OUT + ("-quick" if args.quick else "")
    check_output_dir(args.out, allow_existing=True)  # reused on rerun: runs are stored
    claim_sweep_dir(args.out, plan.spec)  # ... but only this demo's: before any output
    if not args.json:
        from specbatch.simulator.config.sim_config import make_config
        from specbatch.simulator.cost.registry import run_cost

        base = plan.base
        cost = run_cost(make_config({k: v for k, v in base.items() if k != "trace"})).line()
        sys.stderr.write(
            f"specbatch demo: trace {plan.trace}\n"
            f"  {base['requests']} requests at once, {base['max_num_seqs']} running, "
            f"{base['hardware']} cost {cost}, target {base['target']}, draft {base['draft']}, "
            f"{plural(len(plan.spec.seeds), 'seed')}, {plural(args.workers, 'worker')} -> "
            f"{args.out}/\n")
    done = run_demo(plan, args.out, workers=args.workers, fmt=args.format,
                    progress=not args.json)
    outcome, table = done.outcome, done.headline
    elapsed = time.perf_counter() - start
    result = {
        "trace": plan.trace, "out": str(args.out), "report": done.report, "runs": outcome.total,
        "computed": outcome.computed, "reused": outcome.reused, "elapsed_s": round(elapsed, 1),
        "headline": table.to_dict("records"),
    }
    text = (
        f"Best setting of each policy and verifier (by throughput; mean over "
        f"{plural(len(plan.spec.seeds), 'seed')}; latency in "
        f"seconds):\n\n{headline_text(table)}\n\n"
        f"trace: {plan.trace}\n"
        f"{plural(outcome.total, 'run')} ({outcome.computed} computed, {outcome.reused} reused) in "
        f"{elapsed:.1f} s\nreport: {done.report}\ntable:  {Path(args.out) / 'results.parquet'}"
    )
    emit(result, args.json, text)
    return 0
