"""``specbatch trace info | validate | synth``: inspect, check and synthesise traces.

Format: traces/FORMAT.md.

``info`` summarises a trace (traces/FORMAT.md): per draft position i the means over all rows
of ``r_i``, ``min(1, r_i)`` and BV's ``p_i``, and the implied mean accepted length
``MAL(γ) = E[τ + 1] = 1 + Σ_{i≤γ} mean P(τ ≥ i)`` for TV (``P = Π_{j≤i} min(1, r_j)``,
THEORY.md §2) and BV (``P = p_i``, §3) at every γ = 0..K, averaged uniformly over the
recorded (request, position) rows.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from specbatch.cli.common import (
    add_json_flag,
    emit,
    example,
    help_without_verb,
    nonneg_int,
    seed_int,
)
from specbatch.io import check_result_dir, result_dir
from specbatch.limits import check_memory, trace_bytes
from specbatch.traces.format.describe import trace_summary
from specbatch.traces.format.files import read_trace, resolve_trace, write_trace
from specbatch.traces.synth import SURROGATES, SynthConfig, synth_trace

SYNTH_HELP = {
    "requests": "number of requests",
    "depth": "K, drafted tokens per position",
    "temperature": "sampling temperature (0 = greedy)",
    "vocab": "vocabulary size V of the synthetic models (2..64)",
    "prompt_mean": "mean prompt length (lognormal)",
    "prompt_sigma": "log-scale sigma of the prompt length",
    "prompt_max": "largest prompt length",
    "output_mean": "mean output length = position rows per request (lognormal)",
    "output_sigma": "log-scale sigma of the output length",
    "output_max": "largest output length",
    "similarity": "draft/target similarity λ of easy requests, in [0, 1]",
    "hard_fraction": "share of hard requests",
    "hard_similarity": "λ of hard requests",
    "similarity_spread": "std of the per-position jitter of logit(λ)",
    "concentration": "Dirichlet concentration of the Markov tables (smaller = peakier)",
    "surrogate": f"draft_conf quality: {', '.join(SURROGATES)}",
    "surrogate_noise": "noise weight w of the good/poor surrogate (default 0.1 / 0.8)",
    "constant_alpha": "make every min(1, r) equal this α exactly (default: off)",
    "arrival_rate": "Poisson arrival rate in requests/s (default: no arrival times)",
    "tables": "size of the shared pool of Markov tables",
    "seed": "random seed",
}



def register(subparsers: Any) -> None:
    """Add ``trace`` with verbs ``info``, ``validate`` and ``synth`` to the CLI root."""
    trace = subparsers.add_parser(
        "trace", help="inspect, validate or synthesise a trace",
        description="Inspect, validate or synthesise a specbatch trace (see traces/FORMAT.md).",
        epilog=example("specbatch trace info default", "specbatch trace validate my-trace/",
                       "specbatch trace synth --out /tmp/synth --requests 200 --depth 8"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = trace.add_subparsers(dest="verb", metavar="VERB", parser_class=type(trace))
    help_without_verb(trace)

    info = verbs.add_parser(
        "info", help="requests, positions, K, temperature, models; per-position acceptance",
        description="Summarise a trace: sizes, models, per draft position the means of r, "
        "min(1, r) and p_i, and the implied mean accepted length E[τ+1] of TV and BV at every "
        "draft length γ <= K.",
        epilog=example("specbatch trace info default", "specbatch trace info /tmp/synth --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    info.add_argument("path", metavar="PATH", help="trace directory, or 'default'")
    add_json_flag(info)
    info.set_defaults(func=run_info)

    validate = verbs.add_parser(
        "validate", help="check every rule of the trace format",
        description="Check every rule the reader relies on (traces/FORMAT.md); one line naming "
        "the file and field on the first violation, exit 2.",
        epilog=example("specbatch trace validate default"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("path", metavar="PATH", help="trace directory, or 'default'")
    add_json_flag(validate)
    validate.set_defaults(func=run_validate)

    synth = verbs.add_parser(
        "synth", help="write a synthetic trace from real arithmetic on synthetic distributions",
        description="Write a synthetic trace (traces/synth.py): Markov target and mixture draft "
        "over a small vocabulary, statistics computed exactly as a capture records them.",
        epilog=example("specbatch trace synth --out /tmp/synth --requests 200 --depth 8",
                       "specbatch trace synth --out /tmp/t0 --temperature 0 --surrogate perfect",
                       "specbatch trace synth --out /tmp/alpha --constant-alpha 0.7"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    synth.add_argument("--out", required=True, metavar="DIR",
                       help="output trace directory: new, empty, or a synth trace of the same "
                            "settings (replaced as a whole)")
    synth.add_argument("--force", action="store_true",
                       help="--out may hold another trace (replaced); a simulate or other "
                            "result, or other files, are never replaced")
    for field in dataclasses.fields(SynthConfig):
        default = field.default
        kind = {"int": nonneg_int, "float": float, "str": str}.get(str(field.type).split(" ")[0],
                                                                  float)
        kind = seed_int if field.name == "seed" else kind
        extra: dict[str, Any] = {"choices": SURROGATES} if field.name == "surrogate" else {}
        synth.add_argument(f"--{field.name.replace('_', '-')}", dest=field.name, type=kind,
                           default=default, help=SYNTH_HELP[field.name] + _default_text(default),
                           **extra)
    add_json_flag(synth)
    synth.set_defaults(func=run_synth)


def _default_text(default: Any) -> str:
    """`` (default X)``, or nothing for None: those help texts say what unset means."""
    return "" if default is None else f" (default {default})"



def _format_models(s: dict) -> str:
    if not isinstance(s["models"], dict):
        return str(s["models"])
    parts = []
    for role, name in s["models"].items():
        params = s["model_params"].get(role)
        parts.append(f"{role} {name}" + (f" ({params / 1e6:.1f}M params)" if params else ""))
    return ", ".join(parts) or "unknown"


def _format_info(s: dict) -> str:
    lines = [
        f"trace        {s['path']}",
        f"requests     {s['requests']}",
        f"positions    {s['positions']}",
        f"K            {s['K']}",
        f"temperature  {s['temperature']:g}",
        f"status       {s['status']}",
        f"models       {_format_models(s)}",
        *(f"  {role:<10} {text}" for role, text in s.get("identity", {}).items()),
        f"categories   {', '.join(f'{k}: {v}' for k, v in s['categories'].items())}",
        f"lengths      prompt mean {s['prompt_len_mean']:.1f}, output mean "
        f"{s['output_len_mean']:.1f}",
        "",
        "per draft position i (means over all rows; TV reach = Π_{j≤i} min(1, r_j)):",
        f"{'i':>3} {'r':>10} {'min(1,r)':>10} {'p_i (BV)':>10} {'TV reach':>10}",
    ]
    pp = s["per_position"]
    for i, r, a, p, t in zip(pp["i"], pp["r_mean"], pp["accept_mean"], pp["p_mean"],
                             pp["tv_reach_mean"]):
        lines.append(f"{i:>3} {r:>10.4f} {a:>10.4f} {p:>10.4f} {t:>10.4f}")
    lines += ["", "implied mean accepted length E[τ+1] per step at draft length γ:",
              f"{'γ':>3} {'TV':>8} {'BV':>8} {'BV/TV':>7}"]
    for g, tv, bv in zip(s["mal"]["gamma"], s["mal"]["tv"], s["mal"]["bv"]):
        lines.append(f"{g:>3} {tv:>8.4f} {bv:>8.4f} {bv / tv:>7.4f}")
    sig = s["signals"]
    lines += ["", "draft signals as predictors of acceptance (corr; expected AUC, 0.5 = none):",
              f"  first-token acceptance min(1, r_1), mean {sig['acceptance_mean']:.4f}"]
    for name in ("confidence", "neg_entropy", "top1", "cumulative_confidence"):
        lines.append(f"  {name:<22} corr {sig[name]['corr']:>7.4f}   AUC {sig[name]['auc']:.4f}")
    lines.append("  (cumulative_confidence: TETRIS's Π min(conf, 1) against TV's P(τ ≥ j), all j)")
    if "tree" in s:
        from specbatch.traces.format.tree_summary import format_tree_summary

        lines += format_tree_summary(s["tree"])
    return "\n".join(lines)


def run_info(args: argparse.Namespace) -> int:
    summary = trace_summary(read_trace(resolve_trace(args.path)))
    emit(summary, args.json, None if args.json else _format_info(summary))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """Exit 0 for a valid complete trace, 1 for a valid but partial capture."""
    trace = read_trace(resolve_trace(args.path))
    complete = trace.status == "complete"
    result = {"ok": complete, "status": trace.status, "path": trace.path,
              "requests": trace.n_requests, "positions": trace.n_rows, "K": trace.K,
              "temperature": trace.temperature}
    head = "ok" if complete else "partial capture (resume it with capture --resume)"
    emit(result, args.json, f"{head}: {trace.path}: {trace.n_requests} requests, {trace.n_rows} "
         f"positions, K = {trace.K}, temperature {trace.temperature:g}")
    return 0 if complete else 1


#: The files of a trace folder (traces/FORMAT.md): with ``--force`` a folder holding only
#: these (a capture, or a synth trace written before traces carried a marker) is replaced.
TRACE_FILES = ("meta.json", "requests.parquet", "positions-*.parquet", "nodes-*.parquet")


def run_synth(args: argparse.Namespace) -> int:
    """Write a synth trace as one result folder (specbatch.io.result_dir, kind ``trace``):
    a kill leaves the old folder or the new one; only a trace is ever replaced."""
    import hashlib

    config = SynthConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SynthConfig)})
    identity = hashlib.sha256(repr(dataclasses.astuple(config)).encode()).hexdigest()[:20]
    check_result_dir(args.out, "trace", identity, force=args.force, legacy=TRACE_FILES)
    check_memory("trace synth", trace_bytes(config.requests, min(config.output_mean,
                                                                  config.output_max),
                                            config.depth), "use fewer --requests")
    trace = synth_trace(config)
    with result_dir(args.out, "trace", identity, force=args.force, legacy=TRACE_FILES) as tmp:
        write_trace(trace, tmp)
    result = {"path": str(args.out), "requests": trace.n_requests, "positions": trace.n_rows,
              "K": trace.K, "temperature": trace.temperature}
    emit(result, args.json, f"wrote {args.out}: {trace.n_requests} requests, {trace.n_rows} "
         f"positions, K = {trace.K}, temperature {trace.temperature:g}")
    return 0
