"""``specbatch tune``: ready-to-paste dynamic draft-length settings for vLLM, TensorRT-LLM and
SGLang, validated in simulation against the best fixed K.

Argument parsing and printing only; the tuner is :mod:`specbatch.analysis.tune.tuner`. The target,
draft, hardware and workload flags are ``plan``'s (specbatch.cli.plan's workload helpers).
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from specbatch.cli.common import JSON_FLAG, add_command, emit, positive_int
from specbatch.cli.flags import flag, grouped, pick
from specbatch.cli.plan import PLAN_FLAGS, hardware_choices
from specbatch.errors import SpecbatchError, require

HELP = "dynamic draft-length schedules for vLLM, TensorRT-LLM and SGLang, validated"


#: tune's flags in --help order: plan's workload and model flags (specbatch.cli.plan), each
#: with the help that says what it means here, and tune's own.
TUNE_FLAGS = (
    flag("--out", required=True, help="output directory: new, empty, or an earlier "
                                      "tune's (replaced whole); a directory holding anything "
                                      "else is refused"),
    *grouped(
        "workload",
        pick(PLAN_FLAGS, "--workload", help="request lengths file, as simulate's --workload"),
        pick(PLAN_FLAGS, "--prompt-len",
             help="prompt lengths: fixed:N, uniform:A,B, lognormal:MEDIAN,SIGMA, trace "
                  "or sharegpt (a preset fitted on public ShareGPT requests)"),
        pick(PLAN_FLAGS, "--output-len"),
        pick(PLAN_FLAGS, "--requests", help="simulated requests per validation run (default 256)"),
        pick(PLAN_FLAGS, "--trace", help="acceptance trace: 'default' or a trace directory"),
        flag("--acceptance", type=float, default=None, metavar="ALPHA",
             help="a constant acceptance alpha instead of the trace (synth trace)"),
        pick(PLAN_FLAGS, "--acceptance-profile",
             help="replay an acceptance profile (a file from `specbatch acceptance "
                  "import-*`, or a bundled name) on the trace's requests"),
        pick(PLAN_FLAGS, "--seed"),
        pick(PLAN_FLAGS, "--seeds",
             help="R: every run on seeds SEED..SEED+R-1; paired 95 %% intervals, "
                  "tie sets, and a schedule wins only when its interval against "
                  "the best fixed K is above 0 (default 3)"),
    ),
    *grouped(
        "models and engine",
        pick(PLAN_FLAGS, "--target"),
        pick(PLAN_FLAGS, "--draft",
             help="draft: a shape name, an id, a config.json path, ngram, or a "
                  "head: eagle, eagle3, mtp"),
        pick(PLAN_FLAGS, "--draft-head"),
        pick(PLAN_FLAGS, "--hardware",
             help=f"hardware preset: {hardware_choices()} (default h100)"),
        flag("--tp", type=positive_int, default=1, help="tensor parallel (default 1)"),
        pick(PLAN_FLAGS, "--max-num-seqs", help="the engine's batch cap (default 64)"),
    ),
    *grouped(
        "schedule",
        flag("--k-max", type=positive_int, default=None,
             help="largest K per batch size (default 6, or an acceptance "
                  "profile's K when smaller)"),
        flag("--rates", default=None, metavar="R1,R2,...",
             help="validation rates, requests/s (default 25/50/75 %% of the best "
                  "fixed K's burst capacity)"),
        flag("--tax", type=float, default=0.0,
             help="per-step cost of the dynamic path as a fraction of step time "
                  "(default 0; vLLM issue #49548 measured 0.066-0.216)"),
        flag("--vllm-context-buckets", default=None, metavar="C1,C2,...",
             help="also emit vLLM's PROPOSED per-(batch, context) table (RFC #48627 "
                  "/ PR #54801, not merged: no released vLLM accepts it) with context "
                  "ranges cut at these prompt lengths; not validated in simulation"),
    ),
    flag("--workers", type=positive_int, default=max(1, min(4, os.cpu_count() or 1)),
         help="local processes (default min(4, cores))"),
    JSON_FLAG,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    add_command(
        subparsers, "tune", help=HELP,
        description=(
            "Choose K per batch-size bucket by simulated throughput, emit it as vLLM's "
            "num_speculative_tokens_per_batch_size, TensorRT-LLM's draft_len_schedule and "
            "SGLang's adaptive config, then simulate each setting the way its engine applies "
            "it against every fixed K and the engine's default at several rates and a burst. "
            "A setting is recommended only where it beats the best fixed K at every load; "
            "otherwise tune says which fixed K to use. Writes OUT/tune.json and "
            "OUT/settings.txt."),
        examples=(
            "specbatch tune --target vicuna-33b --draft vicuna-68m --hardware h100 "
            "--max-num-seqs 64 --out runs/tune",
            "specbatch tune --acceptance 0.8 --max-num-seqs 128 --tax 0.066 --out runs/tune2 "
            "--json",
            "specbatch tune --target llama-3.1-8b --draft ngram --acceptance-profile "
            "ngram-llama3.1-8b-code-edit --seeds 3 --out runs/tune3"),
        flags=TUNE_FLAGS, run=run_command, arrival="poisson")


def parse_cuts(text: str | None, workload: str | None) -> tuple[int, ...] | None:
    """--vllm-context-buckets as increasing prompt lengths (one-line errors)."""
    if text is None:
        return None
    require(workload is None, "--vllm-context-buckets: expected length distributions or the "
            "trace's lengths, not --workload (each context row draws its own prompts)")
    try:
        cuts = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SpecbatchError(f"--vllm-context-buckets: expected comma-separated prompt "
                             f"lengths, got {text!r}") from None
    from specbatch.analysis.tune.context_table import context_ranges

    context_ranges(cuts)  # its own one-line check
    return cuts


def parse_rates(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        rates = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise SpecbatchError(f"--rates: expected comma-separated requests/s > 0, got {text!r}"
                             ) from None
    require(all(r > 0 and r < float("inf") for r in rates),
            f"--rates: expected comma-separated requests/s > 0, got {text!r}")
    return rates


def build_question(args: argparse.Namespace):
    """The tuner's :class:`~specbatch.analysis.tune.tuner.TuneQuestion` (one-line errors)."""
    from specbatch.analysis.tune.tuner import TuneQuestion
    from specbatch.simulator.config.sim_config import make_config

    require(args.tax >= 0 and args.tax < float("inf"),
            f"--tax: expected a fraction >= 0, got {args.tax}")
    require(args.acceptance is None or 0 < args.acceptance <= 1,
            f"--acceptance: expected 0 < alpha <= 1, got {args.acceptance}")
    base = {"trace": args.trace, "requests": args.requests, "target": args.target,
            "draft": args.draft, "hardware": args.hardware, "tp": args.tp, "seed": args.seed,
            **({"draft_head": args.draft_head} if args.draft_head else {})}
    if args.acceptance is not None:
        require(args.trace == "default", "--acceptance: expected no --trace with a constant "
                f"acceptance, got --trace {args.trace}")
        require(args.acceptance_profile is None, "--acceptance: expected no "
                "--acceptance-profile with a constant acceptance, got both")
        base.update(trace="synth", synth_alpha=args.acceptance)
    k_max = 6 if args.k_max is None else args.k_max
    fields_depth = None
    if args.acceptance_profile is not None:
        from specbatch.traces.acceptance.library import resolve_profile

        depth = resolve_profile(args.acceptance_profile).K
        fields_depth = depth
        k_max = min(k_max, depth) if args.k_max is None else k_max
        require(k_max <= depth, f"--k-max: expected at most the acceptance profile's K = "
                f"{depth} (it says nothing past it), got {k_max}")
        base["acceptance_profile"] = args.acceptance_profile
    make_config({**base, "max_num_seqs": args.max_num_seqs})  # one-line errors first
    return TuneQuestion(base=base, max_num_seqs=args.max_num_seqs, k_max=k_max,
                        rates=parse_rates(args.rates), tax=args.tax, seeds=args.seeds,
                        depth=fields_depth)


def runner(workers: int):
    """run(fields_list, taxes=None) -> summaries, on ``workers`` processes."""
    from specbatch.analysis.tune.tuner import simulate_fields

    def run(fields: list[dict], taxes: list[float] | None = None) -> list[dict]:
        taxes = taxes or [0.0] * len(fields)
        if workers == 1:
            return [simulate_fields(f, t) for f, t in zip(fields, taxes)]
        with ProcessPoolExecutor(workers) as pool:
            return list(pool.map(simulate_fields, fields, taxes))

    return run


def run_command(args: argparse.Namespace) -> int:
    """OUT is one result folder (specbatch.io.result_dir, kind ``tune``): written whole into a
    temporary sibling that replaces OUT at the end. OUT may be new, empty or an earlier tune
    result (its marker, or a pre-marker tune.json that reads as a tune report); anything else
    is refused before any run, and nothing in it is touched."""
    from dataclasses import replace

    from specbatch.analysis.tune.tune_out import TUNE_FILES, is_tune_result, write_tune
    from specbatch.analysis.tune.tuner import tune
    from specbatch.cli.plan import workload_lengths
    from specbatch.io import check_result_dir, result_dir

    question = build_question(args)
    lengths = workload_lengths(args)
    legacy = TUNE_FILES if Path(args.out).is_dir() and is_tune_result(Path(args.out)) else ()
    kept = {"kind": "tune", "identity": _identity(question), "force": True, "legacy": legacy}
    final = check_result_dir(args.out, **kept)
    cuts = parse_cuts(args.vllm_context_buckets, args.workload)
    with result_dir(args.out, **kept) as tmp:
        workload = workload_field(args, question.base, lengths, tmp)
        if workload is not None:
            question = replace(question, base={**question.base, "workload": workload})
        report = tune(question, runner(args.workers), out=final.resolve())
        if args.workload is None and lengths is not None:  # where the drawn table ends up
            report["question"]["workload"] = str(final / "workload.csv")
        if cuts is not None:
            from specbatch.analysis.tune.context_table import context_table
            from specbatch.simulator.workload.lengths import parse_lengths

            output = lengths[1] if lengths is not None else parse_lengths("trace", "--output-len")
            report["vllm_proposal"] = context_table(question, runner(args.workers), cuts, output)
        from specbatch.simulator.config.sim_config import make_config
        from specbatch.simulator.replay.acceptance_source import acceptance_source

        report["acceptance"] = acceptance_source(make_config(
            {**question.base, "max_num_seqs": question.max_num_seqs}))
        write_tune(report, tmp)
    emit(report, args.json, text=None if args.json else format_report(report))
    return 0


def _identity(question) -> str:
    """The question's hash, recorded in OUT's marker (any earlier tune result is replaced)."""
    import hashlib

    from specbatch.io import dumps

    text = dumps({"base": question.base, "max_num_seqs": question.max_num_seqs,
                  "k_max": question.k_max, "rates": question.rates, "tax": question.tax})
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def workload_field(args: argparse.Namespace, base: dict, lengths, folder: Path) -> str | None:
    """The runs' ``workload``: the file given, a table drawn from ``lengths`` written to
    ``folder``/workload.csv (analysis.plan.planner.write_length_workload, as plan draws it), or
    None (the trace's own requests)."""
    if args.workload is not None:
        from specbatch.simulator.workload.arrivals import resolve_workload

        return str(resolve_workload(args.workload).resolve())
    if lengths is None:
        return None
    from specbatch.analysis.plan.planner import write_length_workload

    return str(write_length_workload(base, *lengths, Path(folder).resolve() / "workload.csv"))


def format_report(report: dict) -> str:
    """The buckets, the validation table and each engine's advice."""
    from specbatch.analysis.report.ties import Interval
    from specbatch.simulator.replay.acceptance_source import source_line

    q = report["question"]
    ties = [f"{b['lo']}-{b['hi']}: K = {' ≈ '.join(map(str, b['tie_set']))}"
            for b in report["buckets"] if len(b.get("tie_set", [])) > 1]
    lines = [f"tune: {q['target']} + draft {q['draft']} on {q['hardware']} (tp {q['tp']}), "
             f"max_num_seqs {q['max_num_seqs']}, K <= {q['k_max']}, tax {q['tax']:g}, "
             f"seeds {', '.join(map(str, report.get('seeds', [q.get('seed', 0)])))}",
             *([source_line(report["acceptance"])] if report.get("acceptance") else []),
             "chosen K per batch size: " + ", ".join(f"{lo}-{hi}:{k}"
                                                     for lo, hi, k in report["ranges"]),
             *([f"  ties (K kept from the bucket before where tied): {'; '.join(ties)}"]
               if ties else []),
             *(f"{engine} within its rules: "
               + ", ".join(f"{lo}-{hi}:{k}" for lo, hi, k in v["ranges"])
               for engine, v in report["engines_verdict"].items()
               if v["ranges"] != report["ranges"]),
             f"best fixed K over the loads: {report['best_fixed_k']}"
             + (f" (tie set: K = {' ≈ '.join(map(str, report['fixed_tie_set']))})"
                if len(report.get("fixed_tie_set", [])) > 1 else ""),
             "loads: " + ", ".join(f"{x} req/s" if x != "burst" else x
                                   for x in report["loads"]),
             f"{'engine':<13} {'vs best fixed K at each load (%)':<40} {'default vs best (%)':<30}"]
    for engine, v in report["engines_verdict"].items():
        if "vs_best_fixed_pct" not in v:
            lines.append(f"{engine:<13} not simulated: {v.get('reason')}")
            continue
        pct = " ".join(f"{x:+.1f}" for x in v["vs_best_fixed_pct"])
        dflt = ("not compared (drafts past the acceptance's K)"
                if v["default_vs_best_fixed_pct"] is None else
                " ".join(f"{x:+.1f}" for x in v["default_vs_best_fixed_pct"]))
        lines.append(f"{engine:<13} {pct:<40} {dflt:<30}")
    for engine, v in report["engines_verdict"].items():
        state = "schedule wins" if v["wins"] else "use fixed K"
        g = v.get("gain")
        if g and g.get("mean") is not None:
            nan = float("nan")
            iv = Interval(g["mean"], nan if g["ci_low"] is None else g["ci_low"],
                          nan if g["ci_high"] is None else g["ci_high"], g["seeds"])
            state += f"; schedule vs best fixed K {iv.text()}"
        lines.append(f"{engine} ({state}): {v['advice']}")
        if engine == "tensorrt-llm" and v["wins"]:
            lines.append(f"  releases before PR #10860 (lower-bound keys): "
                         f"{v['lower_bound_release']}")
        lines += [f"  warning: {w}" for w in v.get("warnings", [])]
    proposal = report.get("vllm_proposal")
    if proposal:
        lines.append(f"vllm proposal ({proposal['status']}; not validated): "
                     f"{proposal['setting']}")
    lines.append("checked against: " + "; ".join(v["version"]
                                                 for v in report["engines_verdict"].values()))
    lines.extend(f"note: {note}" for note in report.get("notes", ()))
    return "\n".join(lines)
