"""``specbatch simulate``: run one simulation from a TOML config and/or flags.

Every :class:`~simulator.config.SimConfig` field is a flag (``max_num_seqs`` ->
``--max-num-seqs``; ``--k`` aliases ``--num-speculative-tokens``, ``--extra`` is e); flags
override the config file. Prints a summary table, or one JSON object with ``--json``
(keys include throughput, e2e_mean, e2e_p99, vsr, mal, tokens, requests). ``--out DIR``
writes requests.parquet, steps.parquet, summary.json and config.toml.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import fields

from specbatch.cli.common import add_json_flag, emit, example
from specbatch.io import jsonable
from specbatch.simulator.config import FIELD_TYPES, SimConfig, load_config

#: Summary keys printed in the text table, with units.
TEXT_KEYS = (
    ("policy", ""), ("verify", ""), ("requests", ""), ("tokens", ""), ("makespan", "s"),
    ("throughput", "tok/s"), ("speedup_vs_ar", "x"), ("e2e_mean", "s"), ("e2e_p50", "s"),
    ("e2e_p99", "s"), ("ttft_mean", "s"), ("tpot_mean", "s"), ("mal", "tok/step"),
    ("vsr", ""), ("draft_efficiency", ""), ("target_efficiency", "tok/s"), ("goodput", "req/s"),
    ("slo_attainment", ""),
)


def register(subparsers) -> None:

    p = subparsers.add_parser(
        "simulate", help="simulate batch speculative decoding on a trace",
        description=__doc__.split("\n\n")[0],
        epilog=example(
            "specbatch simulate --config sim.toml --out results/run1",
            "specbatch simulate --trace default --policy tetris --k 3 --extra 1 --verify block "
            "--max-num-seqs 64 --requests 512 --hardware h100 --target vicuna-33b "
            "--draft vicuna-68m --json",
            "specbatch simulate --trace synth --synth-alpha 0.8 --policy fixed --k 4",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", metavar="FILE.toml", help="TOML file of SimConfig fields")
    p.add_argument("--out", metavar="DIR", help="write result tables and summary here")
    p.add_argument("--allow-partial", action="store_true",
                   help="simulate a partial capture as it is (default: refuse it)")
    add_json_flag(p)
    group = p.add_argument_group("config overrides (SimConfig fields)")
    for f in fields(SimConfig):
        flag = "--" + f.name.replace("_", "-")
        names = [flag, "--k"] if f.name == "num_speculative_tokens" else [flag]
        kind = FIELD_TYPES[f.name].__name__
        group.add_argument(*names, dest=f.name, default=None, metavar=kind.upper(),
                           help=f"default {f.default!r}")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    from specbatch.simulator.run import simulate

    overrides = {f.name: getattr(args, f.name) for f in fields(SimConfig)
                 if getattr(args, f.name) is not None}
    config = load_config(args.config, **overrides)
    result = simulate(config, allow_partial=args.allow_partial)
    for note in result.notes:
        sys.stderr.write(f"note: {note}\n")
    if args.out:
        result.write(args.out)
    summary = jsonable(result.summary)
    emit(summary, args.json, text=None if args.json else format_summary(summary, args.out))
    return 0


def format_summary(summary: dict, out: str | None = None) -> str:
    lines = []
    for key, unit in TEXT_KEYS:
        if key not in summary:
            continue
        value = summary[key]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            text = "-"
        elif isinstance(value, float):
            text = f"{value:.4g}"
        else:
            text = str(value)
        lines.append(f"{key:<18} {text:>12} {unit}".rstrip())
    if out:
        lines.append(f"wrote {out}/ (requests.parquet, steps.parquet, summary.json, config.toml)")
    return "\n".join(lines)
