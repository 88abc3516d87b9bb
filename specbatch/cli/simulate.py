"""``specbatch simulate``: run one simulation from a TOML config and/or flags.

Every :class:`~simulator.config.sim_config.SimConfig` field is a flag generated from the field's own
declaration (``max_num_seqs`` -> ``--max-num-seqs``; ``--k`` aliases ``--num-speculative-tokens``,
``--extra`` is e); flags override the config file. A setting the run's policy would ignore is
refused (:func:`~simulator.config.sim_config.check_settings_apply`). Prints a summary table, or one
JSON object with ``--json`` (keys include the setting: trace, policy, verify, k (null for ar and
dsd, which have no fixed window), e; the KV cache: kv_mode, kv_capacity (tokens per replica used,
null = unlimited), preemptions, recomputed_tokens; and the metrics: throughput, e2e_mean, e2e_p99,
vsr, mal, tokens, requests; and ``acceptance``: {source, pair, pair_matches}, where acceptance came
from and whether it is the asked pair's). ``--out DIR`` writes requests.parquet, steps.parquet,
summary.json and config.toml, all at once (a kill leaves the old result or the new one); DIR must be
new, empty, or a simulate result of the same config (``--force``: of any config).
"""

from __future__ import annotations

import argparse
import math
import sys

from specbatch.cli.common import (
    add_json_flag,
    add_user_timeout_flag,
    emit,
    example,
)
from specbatch.fields import flag_help, metavar
from specbatch.io import check_result_dir, jsonable
from specbatch.simulator.config.sim_config import (
    SimConfig,
    applied_k,
    check_settings_apply,
    load_config_given,
    specs,
)

#: Summary keys printed in the text table, with units.
TEXT_KEYS = (
    ("trace", ""), ("policy", ""), ("verify", ""), ("k", ""), ("e", ""), ("requests", ""),
    ("held_out_requests", ""), ("tokens", ""), ("makespan", "s"),
    ("throughput", "tok/s"), ("speedup_vs_ar", "x"), ("e2e_mean", "s"), ("e2e_p50", "s"),
    ("e2e_p99", "s"), ("ttft_mean", "s"), ("tpot_mean", "s"), ("mal", "tok/step"),
    ("vsr", ""), ("draft_efficiency", ""), ("target_efficiency", "tok/s"),
    ("verify_share", ""), ("goodput", "req/s"),
    ("slo_attainment", ""), ("kv_mode", ""), ("kv_capacity", "tokens"), ("preemptions", ""),
    ("recomputed_tokens", "tokens"),
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
            "specbatch simulate --workload example --arrival trace --policy tetris --extra 1",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", metavar="FILE.toml", help="TOML file of SimConfig fields")
    p.add_argument("--out", metavar="DIR",
                   help="write result tables and summary here: a new or empty directory, or a "
                        "simulate result of the same config (replaced as a whole)")
    p.add_argument("--force", action="store_true",
                   help="--out may hold a simulate result of another config (replaced); "
                        "other files are never replaced")
    p.add_argument("--allow-partial", action="store_true",
                   help="simulate a partial capture as it is (default: refuse it)")
    p.add_argument("--sensitivity", choices=("auto", "on", "off"), default="auto",
                   help="rerun at step times x0.95 and x1.05 and warn when the answer moves "
                        "by more than 25 %% or the queue grows without bound: for open-loop "
                        "arrivals of <= 20,000 requests (auto), always (on), never (off); "
                        "--json carries it as 'capacity' (analysis.sensitivity)")
    add_user_timeout_flag(p, "a user's policy (module:Class)")
    add_json_flag(p)
    add_config_flags(p)
    p.set_defaults(func=run_command)


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per SimConfig field, generated from the fields' declarations: its
    spellings, metavar (the type), help (meaning, allowed values, default). Values stay
    strings (``none`` for an optional field); :func:`load_config` converts and checks them."""
    group = parser.add_argument_group("config overrides (SimConfig fields)")
    for spec in specs().values():
        group.add_argument(spec.option, *spec.flags, dest=spec.name, default=None,
                           metavar=metavar(spec), help=flag_help(spec))


def run_command(args: argparse.Namespace) -> int:
    from specbatch.simulator.run import simulate, simulate_to
    from specbatch.simulator.sim_result import RESULT_FILES, config_identity

    overrides = {name: getattr(args, name) for name in specs()
                 if getattr(args, name) is not None}
    config, given = load_config_given(args.config, **overrides)
    check_settings_apply(config, given)
    if args.out:  # the step table streams into the folder as the run goes
        check_result_dir(args.out, "simulate", config_identity(config), force=args.force,
                         legacy=RESULT_FILES)
        result = simulate_to(args.out, config, force=args.force, flag="--out",
                             allow_partial=args.allow_partial, progress=not args.json,
                             on_result=print_notes)
    else:
        result = simulate(config, allow_partial=args.allow_partial, progress=not args.json)
        print_notes(result)
    from specbatch.analysis.sensitivity import capacity_check, capacity_lines
    from specbatch.simulator.replay.acceptance_source import acceptance_source

    check = capacity_check(config, result, args.sensitivity)
    for line in capacity_lines(check):
        sys.stderr.write(line + "\n")
    summary = jsonable(setting(config) | result.summary | {"cost_source": run_sources(
        config, result.cost_model),
                                                           "acceptance": acceptance_source(config)}
                       | ({"capacity": check} if check is not None else {}))
    emit(summary, args.json, text=None if args.json else format_summary(summary, args.out))
    return 0


def print_notes(result) -> None:
    """The run's notes on stderr, one ``note:`` line each, and the #49548 warning of a vLLM
    batch-size schedule whose K switches at its thresholds (analysis.engines.graph_switch)."""
    for note in result.notes:
        sys.stderr.write(f"note: {note}\n")
    warning = schedule_warning(result)
    if warning:
        sys.stderr.write(f"warning: {warning}\n")


def schedule_warning(result) -> str | None:
    """The threshold warning of a ``batch-schedule`` run with vLLM's table, else None."""
    config = result.config
    table = getattr(config, "num_speculative_tokens_per_batch_size", None)
    if config.policy != "batch-schedule" or not table:
        return None
    from specbatch.analysis.engines.graph_switch import assess
    from specbatch.simulator.policies.schedules import parse_vllm_table

    ranges = parse_vllm_table(str(table), "config", "num_speculative_tokens_per_batch_size")
    return assess(ranges, result.steps).warning()


def run_sources(config: SimConfig, model=None) -> dict:
    """Which source priced the target's and the draft's passes (simulator.cost.report):
    ``model``'s, the run's own cost model (None: built from ``config``)."""
    from specbatch.simulator.cost.registry import run_cost
    from specbatch.simulator.cost.report import cost_sources
    from specbatch.simulator.run import build_cost

    model = build_cost(config) if model is None else model
    return {"cost": run_cost(config).to_dict(), **cost_sources(model)}


def setting(config: SimConfig) -> dict:
    """What was simulated, so a saved ``--json`` line says which run it is."""
    return {"trace": config.trace, "policy": config.policy, "verify": config.verify,
            "k": applied_k(config), "e": config.extra}


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
    if summary.get("cost_source"):
        from specbatch.simulator.cost.report import source_line

        lines.append(f"cost source: {source_line(summary['cost_source'])}")
    if summary.get("async_scheduling"):  # as resolved (simulator.cost.features.async_overhead)
        arm = summary.get("async_scheduling_ar")
        lines.append(f"async scheduling: {summary['async_scheduling']}"
                     + (f"; ar arm: {arm}" if arm else ""))
    if summary.get("acceptance"):
        from specbatch.simulator.replay.acceptance_source import source_line

        lines.append(source_line(summary["acceptance"]))
    if out:
        lines.append(f"wrote {out}/ (requests.parquet, steps.parquet, summary.json, config.toml)")
    return "\n".join(lines)
