"""``specbatch simulate``: run one simulation from a TOML config and/or flags.

Every :class:`~simulator.config.SimConfig` field is a flag (``max_num_seqs`` ->
``--max-num-seqs``; ``--k`` aliases ``--num-speculative-tokens``, ``--extra`` is e); flags
override the config file. Prints a summary table, or one JSON object with ``--json``
(keys include the setting: trace, policy, verify, k, e; the KV cache: kv_mode, kv_capacity
(tokens per replica used, null = unlimited), preemptions, recomputed_tokens; and the metrics:
throughput, e2e_mean, e2e_p99, vsr, mal, tokens, requests). ``--out DIR``
writes requests.parquet, steps.parquet, summary.json and config.toml.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import fields

from specbatch.cli.common import add_json_flag, emit, example
from specbatch.io import jsonable, prepare_output_dir
from specbatch.simulator import config as simconfig
from specbatch.simulator.config import FIELD_TYPES, SimConfig, check_extra_applies, load_config
from specbatch.simulator.free_draft import FREE_DRAFTS

#: What each override means; ``None`` defaults say what unset means.
FIELD_HELP = {
    "trace": "'default' (bundled), 'synth', or a trace directory",
    "workload": "request lengths/arrivals file (.csv/.parquet/.jsonl; columns prompt_len, "
                "output_len, optional arrival or timestamp, category) or 'example' (bundled); "
                "each request replays a seeded same-category trace request, wrapping positions "
                "past its end (default: the trace's own requests)",
    "requests": "simulated requests N (at most the workload file's rows)",
    "sampling": "how requests are drawn from the trace",
    "arrival": "arrival process (trace: the recorded times, the workload file's when given)",
    "rate": "arrival rate, requests/s (poisson, gamma)",
    "cv": "inter-arrival coefficient of variation (gamma)",
    "synth_alpha": "constant acceptance α of the synth trace (default: off)",
    "max_num_seqs": "running requests per replica",
    "max_num_batched_tokens": "prompt tokens per prefill step (default: unlimited)",
    "enable_chunked_prefill": "mix prefill chunks into decode steps: true or false",
    "kv_capacity": "KV-cache tokens per replica (default: unlimited in reserve mode; in paged "
                   "mode what the cost model's memory leaves next to the weights at "
                   "gpu_memory_utilization)",
    "kv_mode": "KV-cache management: reserve (prompt + output + K + 1 tokens reserved at "
               "admission, never preempted) or paged (vLLM-style blocks grown per step, the "
               "newest request preempted by recomputation when they run out)",
    "block_size": "tokens per KV block in paged mode",
    "gpu_memory_utilization": "fraction u in (0, 1] of each GPU's memory for weights and KV "
                              "(paged mode without kv_capacity)",
    "max_model_len": "longest prompt + output in tokens: longer prompts are refused, outputs "
                     "capped at max_model_len - prompt (default: no limit)",
    "replicas": "data-parallel replicas",
    "router": "request router across replicas",
    "policy": "speculation policy",
    "num_speculative_tokens": "k, verified draft tokens per request",
    "extra": "e, extra drafted tokens of budgeted policies (K = k + e; 0 for ar, fixed, dsd)",
    "budget": "C, draft tokens verified per step (default: k x running requests)",
    "verify": "verification rule: token (TV) or block (BV)",
    "threshold": "confidence threshold of the threshold policy",
    "threshold_mode": "how the threshold policy combines confidences",
    "dsd_interval": "steps between DSD re-plans",
    "cost": "step-time cost model",
    "hardware": "roofline hardware preset",
    "target": "target model: a shape name (roofline) or the profile's model name",
    "draft": "draft model: a shape name (roofline) or the profile's model name; ngram: a "
             "host-side prompt-lookup drafter whose passes cost 0 s (simulator.free_draft)",
    "tp": "tensor-parallel degree of the target",
    "profile": "latency profile (.parquet/.csv) for cost profiled (default: none)",
    "execution": "roofline launch-latency preset (cuda_graph: a serving engine; eager: ~1.07 ms "
                 "per decoder layer, fitted to H100 profiles)",
    "seed": "random seed",
    "slo": "e2e latency SLO in seconds for goodput (default: not computed)",
    "speedup": "also simulate ar for speedup_vs_ar: true or false",
}

#: Summary keys printed in the text table, with units.
TEXT_KEYS = (
    ("trace", ""), ("policy", ""), ("verify", ""), ("k", ""), ("e", ""), ("requests", ""), ("tokens", ""), ("makespan", "s"),
    ("throughput", "tok/s"), ("speedup_vs_ar", "x"), ("e2e_mean", "s"), ("e2e_p50", "s"),
    ("e2e_p99", "s"), ("ttft_mean", "s"), ("tpot_mean", "s"), ("mal", "tok/step"),
    ("vsr", ""), ("draft_efficiency", ""), ("target_efficiency", "tok/s"), ("goodput", "req/s"),
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
                           help=field_help(f.name, f.default))
    p.set_defaults(func=run_command)


def field_choices() -> dict[str, list[str]]:
    """The allowed values of every choice field (the lists validate_config checks)."""
    from specbatch.simulator.hardware import HARDWARE
    from specbatch.simulator.policies import POLICIES
    from specbatch.traces.shapes import SHAPES

    return {"sampling": list(simconfig.SAMPLINGS), "arrival": list(simconfig.ARRIVALS),
            "router": list(simconfig.ROUTERS), "policy": sorted(POLICIES),
            "verify": list(simconfig.VERIFY_RULES),
            "threshold_mode": list(simconfig.THRESHOLD_MODES), "cost": list(simconfig.COSTS),
            "execution": sorted(simconfig.EXECUTIONS), "kv_mode": list(simconfig.KV_MODES),
            "hardware": sorted(HARDWARE), "target": sorted(SHAPES), "draft": sorted(SHAPES) + list(FREE_DRAFTS)}


def field_help(name: str, default: object) -> str:
    """One override's ``--help``: its meaning, its allowed values, its default."""
    text = FIELD_HELP[name]
    options = field_choices().get(name)
    if options:
        text += f"; one of {', '.join(options)}"
    if default is not None:
        text += f" (default {default!r})"
    return text


def run_command(args: argparse.Namespace) -> int:
    from specbatch.simulator.run import simulate

    overrides = {f.name: getattr(args, f.name) for f in fields(SimConfig)
                 if getattr(args, f.name) is not None}
    config = load_config(args.config, **overrides)
    check_extra_applies(config)
    if args.out:
        prepare_output_dir(args.out, allow_existing=True)
    result = simulate(config, allow_partial=args.allow_partial)
    for note in result.notes:
        sys.stderr.write(f"note: {note}\n")
    if args.out:
        result.write(args.out)
    summary = jsonable(setting(config) | result.summary)
    emit(summary, args.json, text=None if args.json else format_summary(summary, args.out))
    return 0


def setting(config: SimConfig) -> dict:
    """What was simulated, so a saved ``--json`` line says which run it is."""
    return {"trace": config.trace, "policy": config.policy, "verify": config.verify,
            "k": config.num_speculative_tokens, "e": config.extra}


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
