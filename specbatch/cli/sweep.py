"""``specbatch sweep`` and ``specbatch report``: run a what-if grid, then tabulate and plot it."""

from __future__ import annotations

import argparse
import os

from specbatch.cli.common import add_json_flag, emit, example, positive_int
from specbatch.io import check_output_dir
from specbatch.limits import check_sweep


def register(subparsers: argparse._SubParsersAction) -> None:
    sweep = subparsers.add_parser(
        "sweep",
        help="run a grid of simulations (local process pool or Dask), resumable",
        description=(
            "Run every point x seed of a sweep spec (TOML: [base], [axes] or [[axes]], seeds). "
            "Each run is stored under OUT/points/<hash of config + version>.json, so a rerun "
            "computes only missing runs. Writes OUT/results.parquet and OUT/results.csv "
            "(one row per point x seed: config fields, then summary metrics)."
        ),
        epilog=example(
            "specbatch sweep analysis/specs/tetris.toml --out runs/tetris --workers 2 --report",
            "specbatch sweep analysis/specs/tetris.toml --out runs/t-synth --set trace=synth",
            "specbatch sweep analysis/specs/block_gamma.toml --out runs/bv --scheduler local",
            "specbatch sweep spec.toml --out runs/x --scheduler tcp://scheduler-host:8786",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sweep.add_argument("spec", help="sweep spec TOML file")
    sweep.add_argument("--out", required=True,
                       help="output directory (created; reused by a rerun of the same spec; "
                            "refused when it holds another spec's sweep or other files, and "
                            "while another sweep runs on it: no waiting)")
    sweep.add_argument("--workers", type=positive_int, default=max(1, min(4, os.cpu_count() or 1)),
                       help="local processes (or LocalCluster workers); default: min(4, cores)")
    sweep.add_argument("--scheduler", default=None, metavar="ADDRESS|local",
                       help="run on Dask distributed: a scheduler address, or 'local' for a "
                            "LocalCluster")
    sweep.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="set a config field for every run (replaces any axis over it, whether "
                            "spelled by its name or an alias: k, e, n); every run is then "
                            "checked against its trace before any starts; repeatable, "
                            "e.g. --set trace=synth --set k=2")
    sweep.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    sweep.add_argument("--report", action="store_true", help="also write the report afterwards")
    add_json_flag(sweep)
    sweep.set_defaults(func=run_sweep_command)

    report = subparsers.add_parser(
        "report",
        help="tables and figures (PNG) for a sweep output directory",
        description=(
            "Read DIR/results.parquet and write DIR/report/: figures as PNG (throughput and "
            "e2e latency vs k per policy, VSR/MAL per policy, latency CDFs, throughput-latency "
            "across load, BV over TV gain vs gamma, whichever the sweep's axes allow), "
            "the best setting per policy with paired confidence intervals, and report.md "
            "(or report.html) linking them."
        ),
        epilog=example("specbatch report runs/tetris", "specbatch report runs/bv --format html"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("dir", help="a sweep output directory (has sweep.json, results.parquet)")
    report.add_argument("--format", choices=("md", "html"), default="md")
    add_json_flag(report)
    report.set_defaults(func=run_report_command)


def run_sweep_command(args: argparse.Namespace) -> int:
    from specbatch.analysis.sweep.points import claim_sweep_dir
    from specbatch.analysis.sweep.runner import run_sweep
    from specbatch.analysis.sweep.spec import load_spec, parse_override

    overrides = dict(parse_override(text) for text in args.set)
    spec = load_spec(args.spec, overrides=overrides)
    check_sweep(f"spec {args.spec}", spec.grids, len(spec.seeds))  # before expanding the grid
    if args.scheduler is not None:
        from specbatch.analysis.sweep.executors import check_scheduler

        check_scheduler(args.scheduler)  # an unreachable scheduler fails before the progress bar
    check_output_dir(args.out, allow_existing=True)  # reused on rerun: runs are resumable
    claim_sweep_dir(args.out, spec)  # ... but by this spec only (checked again under its lock)
    outcome = run_sweep(spec, args.out, workers=args.workers, scheduler=args.scheduler,
                        progress=not (args.no_progress or args.json))
    result = {
        "name": spec.name, "out": outcome.out, "runs": outcome.total,
        "computed": outcome.computed, "reused": outcome.reused,
        "elapsed_s": round(outcome.elapsed_s, 2),
        "results": os.path.join(outcome.out, "results.parquet"),
    }
    if args.report:
        from specbatch.analysis.report.sweep_report import build_report

        result["report"] = build_report(args.out)
    emit(result, args.json)
    return 0


def run_report_command(args: argparse.Namespace) -> int:
    from specbatch.analysis.sweep.points import read_manifest

    read_manifest(args.dir)  # a one-line error before the plotting stack is imported
    from specbatch.analysis.report.sweep_report import build_report

    path = build_report(args.dir, fmt=args.format)
    emit({"report": path}, args.json)
    return 0
