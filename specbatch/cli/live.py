"""``specbatch live`` (a real batched speculative-decoding run) and ``specbatch validate``
(simulate the same workload and compare): argument parsing and printing; the work is in
:mod:`specbatch.live` and :mod:`specbatch.analysis.validate.live`."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

from specbatch.cli.common import (
    PROMPTS_HELP,
    add_json_flag,
    add_ngram_flags,
    add_threads_flag,
    emit,
    example,
    set_threads,
)
from specbatch.fields import FieldSpec, convert, flag_help
from specbatch.io import check_result_dir, result_dir
from specbatch.live.config import NGRAM, LiveConfig, live_specs

#: A live run on the tiny zoo pair whose output the ``validate`` examples read.
_LIVE_EXAMPLE = ("specbatch live --draft /tmp/zoo/draft --target /tmp/zoo/target "
                 "--prompts default:16 --max-new-tokens 32 --policy tetris --k 3 --extra 1 "
                 "--verify block --profile-grid --out /tmp/live")


def register(subparsers) -> None:
    _register_live(subparsers)
    _register_validate(subparsers)


def _register_live(subparsers) -> None:
    p = subparsers.add_parser(
        "live", help="run batched speculative decoding on live HF models and measure it",
        description="N requests through a real draft/target engine with iteration-level "
                    "continuous batching, as the simulator models it: arrivals by --arrival "
                    "(burst, poisson, gamma; the simulator's own draws for --seed), FCFS "
                    "admission into --max-num-seqs running slots, a prefill-only step for "
                    "joiners, otherwise a decode step over the running set (K draft passes, a "
                    "fixed or TETRIS allocation with budget C = k*running, one target pass, TV "
                    "or BV; THEORY.md §2-§5); requests leave when done. The clock advances by "
                    "measured step times and jumps to the next arrival when idle. Writes the "
                    "simulator's requests/steps tables, "
                    "summary.json, a manifest (live.json), a per-pass latency profile and a "
                    "trace of the visited positions so `specbatch validate` can replay it. "
                    "`specbatch live serve` puts the same engine behind an OpenAI-compatible "
                    "HTTP server (`specbatch live serve --help`, docs/live.md).",
        epilog=example(
            "specbatch zoo train --out /tmp/zoo --size tiny",
            _LIVE_EXAMPLE,
            "specbatch live --draft /tmp/zoo/draft --target /tmp/zoo/target --prompts "
            "default:16 --max-new-tokens 16 --max-num-seqs 4 --arrival poisson --rate 20 "
            "--seed 1 --profile-grid --out /tmp/live-b",
            "specbatch live --draft ngram --ngram-min 2 --ngram-max 4 --target /tmp/zoo/target "
            "--prompts default:16 --max-new-tokens 32 --k 4 --out /tmp/live-ngram",
            "specbatch live --target llama-3.1-8b --draft llama-3.2-1b --prompts random:64:256 "
            "--max-new-tokens 128 --temperature 1 --device cuda --dtype bfloat16 --out /tmp/l8b",
            "specbatch validate /tmp/live-b --fit /tmp/live"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draft", required=True,
                   help="local HF model directory of the draft Ms, a shape name "
                        "(traces.models.shapes, random weights), or 'ngram': prompt-lookup drafts "
                        "as "
                        "vLLM's ngram method (no draft model or draft cache; one-hot drafts, so "
                        "BV = TV; the proposer's CPU time is the draft time; a directory named "
                        "ngram must be written ./ngram)")
    add_ngram_flags(p)
    p.add_argument("--target", required=True,
                   help="local HF model directory of the target Mb, or a shape name")
    p.add_argument("--prompts", required=True,
                   help=PROMPTS_HELP + "; or random:N:LEN[:SEED]: N prompts of LEN uniform "
                        "random token ids (the only source for shape names: no tokenizer)")
    _add_run_flags(p)
    p.set_defaults(func=_live)


def _add_run_flags(p) -> None:
    """The live run's settings (one flag per LiveConfig field, generated from the fields'
    declarations), timing and output flags."""
    p.add_argument("--layers", type=int, default=None,
                   help="override the layer count (random weights; CPU smoke runs of big shapes)")
    p.add_argument("--requests", type=int, default=None,
                   help="use the first N prompts (default: all)")
    add_live_config_flags(p)
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="untimed warm-up runs of the same batch before the measured one "
                        "(default: 1)")
    p.add_argument("--profile-grid", action="store_true",
                   help="after the run, also profile both models on the run's (batch, query, KV) "
                        "grid into OUT/profile_grid.csv (validate's out-of-sample cost model)")
    p.add_argument("--grid-repeats", type=int, default=5, metavar="N",
                   help="timed passes per grid cell (default: 5)")
    add_threads_flag(p)
    p.add_argument("--out", required=True,
                   help="output directory: new, empty, or a live result of the same flags "
                        "(replaced as a whole once the run is complete)")
    p.add_argument("--force", action="store_true",
                   help="--out may hold a live result of other flags (replaced); other files "
                        "are never replaced")
    add_json_flag(p)


def add_live_config_flags(parser: argparse.ArgumentParser) -> None:
    """``--max-new-tokens``, ``--policy``, ``--k``, ...: one flag per LiveConfig field the
    command line sets, with its type, default and help read off the field."""
    for spec in live_specs().values():
        if spec.flag:
            parser.add_argument(spec.option, *spec.flags, dest=spec.name, default=spec.default,
                                type=_flag_type(spec), metavar=spec.kind.__name__.upper(),
                                help=flag_help(spec))


def _flag_type(spec: FieldSpec):
    """argparse ``type=``: the flag's text as the field's type (a one-line usage error)."""

    def parse(text: str) -> object:
        try:
            return convert(spec, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = spec.kind.__name__
    return parse


def _register_validate(subparsers) -> None:
    v = subparsers.add_parser(
        "validate", help="predict a live run with the simulator and compare (out of sample "
                         "with --fit)",
        description="Simulates a live run's workload (run B: its recorded per-position "
                    "statistics in trace/, requests, prompt and output lengths, arrival process "
                    "and seed, max_num_seqs, policy, budget and verifier uniforms) through "
                    "simulator.run.simulate with a profiled cost model, and prints measured vs "
                    "simulated throughput, makespan, e2e mean and p99, TTFT, TPOT and step "
                    "latency with relative errors (simulated - measured) / measured, plus the "
                    "per-step latency MAPE (every measured step priced on its own passes). "
                    "Cost model: with --fit RUN_A (out of sample), fitted to RUN_A's "
                    "profile_grid.csv (`live --profile-grid`; RUN_A's passes when it has none) "
                    "with RUN_A's mean overhead per step; without --fit, to B's own grid, or "
                    "to B's own passes (--in-sample, labelled in-sample).",
        epilog=example("specbatch zoo train --out /tmp/zoo --size tiny", _LIVE_EXAMPLE,
                       "specbatch live --draft /tmp/zoo/draft --target /tmp/zoo/target "
                       "--prompts default:16 --max-new-tokens 16 --policy tetris --k 3 "
                       "--extra 1 --verify block --max-num-seqs 4 --arrival poisson --rate 20 "
                       "--seed 1 --out /tmp/live-b",
                       "specbatch validate /tmp/live-b --fit /tmp/live",
                       "specbatch validate /tmp/live --in-sample --out /tmp/live-sim --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("live_dir", metavar="LIVE_DIR", nargs="?", default=None,
                   help="output directory of `specbatch live` to predict (or --predict)")
    v.add_argument("--predict", default=None, metavar="RUN_B",
                   help="the live run to predict (same as LIVE_DIR)")
    v.add_argument("--fit", default=None, metavar="RUN_A",
                   help="fit the cost model and overhead on this other live run (out of "
                        "sample); default: the predicted run itself")
    v.add_argument("--profile", nargs="+", default=None, metavar="FILE",
                   help="latency profile(s) (CSV/Parquet, e.g. one per role from `specbatch "
                        "profile`) to fit the cost model instead")
    v.add_argument("--in-sample", action="store_true",
                   help="fit the cost model to the predicted run's own passes (in-sample)")
    v.add_argument("--target-model", default=None,
                   help="select the target rows of a profile holding several models")
    v.add_argument("--draft-model", default=None,
                   help="select the draft rows of a profile holding several models")
    v.add_argument("--overhead", type=float, default=None,
                   help="per-step overhead seconds (default: the fitting run's mean measured "
                        "overhead per step)")
    v.add_argument("--out", default=None,
                   help="also write the simulated tables and validate.json here: a new or "
                        "empty directory, or a validate result of the same flags (replaced as "
                        "a whole)")
    v.add_argument("--force", action="store_true",
                   help="--out may hold a validate result of other flags (replaced); other "
                        "files are never replaced")
    add_json_flag(v)
    from specbatch.cli.vllm_runs import add_vllm_flags

    add_vllm_flags(v)
    v.set_defaults(func=_validate)


def _live(args) -> int:
    from specbatch.live.loop import run_live
    from specbatch.live.model_pair import load_live_pair
    from specbatch.live.record import LIVE_FILES, write_live

    cfg = _live_config(args)
    if cfg.verify == "block" and cfg.temperature == 0:
        sys.stderr.write("note: at temperature 0 the target's law is one-hot, so block "
                         "verification accepts exactly what token verification does\n")
    threads = set_threads(args.threads, args.device)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    prompts = None if args.prompts.startswith("random:") else _text_prompts(args)
    identity = _flags_identity(args)
    check_result_dir(args.out, "live", identity, force=args.force,  # before loading models
                     legacy=LIVE_FILES)
    tok, draft, target, identities = load_live_pair(args.draft, args.target, args.device,
                                                      args.dtype, args.seed, args.layers,
                                                      cfg.ngram if cfg.draft == NGRAM else (5, 5))
    ids, categories, source = _prompt_ids(args, prompts, tok, target)
    names = (identities["draft"]["name"], identities["target"]["name"])
    for _ in range(args.warmup):
        run_live(draft, target, ids, cfg, names)
    result = run_live(draft, target, ids, cfg, names)
    manifest = {
        "command": "specbatch " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "models": identities, "prompts": args.prompts, "prompt_source": source,
        "categories": categories, "warmup": args.warmup, "threads": threads,
        "layers_override": args.layers,
        "profile_grid": {"cells": "specbatch.live.profile_grid.visited_grid", "warmup": 2,
                         "repeats": args.grid_repeats} if args.profile_grid else None,
    }
    with result_dir(args.out, "live", identity, force=args.force, legacy=LIVE_FILES) as tmp:
        write_live(result, tmp, manifest, final=args.out)
        if args.profile_grid:
            _profile_grid(args, cfg, ids, draft, target, names, tmp)
    s = result.summary
    row = {"out": args.out, "threads": threads} | {key: s[key] for key in _PRINTED}
    emit(row, args.json, None if args.json else format_live(row))
    return 0


def format_live(row: dict) -> str:
    """``specbatch live``'s summary as aligned lines with units and sensible precision."""
    def num(key: str, fmt: str, unit: str = "", scale: float = 1.0) -> str:
        value = row[key]
        if value is None or (isinstance(value, float) and value != value):
            return "-"
        return f"{value * scale:{fmt}}" + (f" {unit}" if unit else "")

    lines = [
        ("out", str(row["out"])),
        ("run", f"{row['policy']}, verify {row['verify']} ({row['verifier']}), "
                f"{row['device']} {row['dtype']}, {row['threads']} thread(s)"),
        ("requests", f"{row['requests']:,} ({row['tokens']:,} output tokens)"),
        ("throughput", num("throughput", ",.1f", "tok/s")),
        ("makespan", num("makespan", ",.3f", "s")),
        ("steps", f"{row['steps']:,} (mean decode step "
                  f"{num('decode_step_latency_mean', ',.2f', 'ms', 1e3)})"),
        ("MAL", num("mal", ".3f", "tokens per request-step")),
        ("VSR", num("vsr", ".3f", "accepted / verified draft tokens")),
        ("time split", f"draft {num('draft_time', ',.3f', 's')}, target "
                       f"{num('target_time', ',.3f', 's')}, overhead "
                       f"{num('overhead_time', ',.3f', 's')}"),
    ]
    return "\n".join(f"{name:<11} {text}" for name, text in lines)


#: Summary fields ``specbatch live`` prints.
_PRINTED = ("requests", "tokens", "throughput", "makespan", "steps", "decode_step_latency_mean",
            "mal", "vsr", "draft_time", "target_time", "overhead_time", "policy", "verify",
            "device", "dtype", "verifier")


def _live_config(args):
    """The run's LiveConfig from the flags, every flag checked (one-line errors)."""
    from specbatch.errors import require

    ngram = args.draft == NGRAM
    settings = {name: getattr(args, name) for name, spec in live_specs().items() if spec.flag}
    cfg = LiveConfig(**settings, draft=NGRAM if ngram else "model",
                     ngram_min=args.ngram_min, ngram_max=args.ngram_max)
    cfg.check()
    if ngram:  # live.json records the resolved bounds
        n_min, n_max = cfg.ngram
        cfg = dataclasses.replace(cfg, ngram_min=n_min, ngram_max=n_max)
    require(not (ngram and args.profile_grid), f"--profile-grid: expected a draft model, got "
            f"--draft {NGRAM} (the grid profiles draft passes)")
    require(args.extra == 0 or args.policy == "tetris",
            f"--extra: expected 0 for policy {args.policy} (e widens tetris drafts only), "
            f"got {args.extra}")
    require(args.requests is None or args.requests >= 1,
            f"--requests: expected N >= 1, got {args.requests}")
    require(args.warmup >= 0, f"--warmup: expected >= 0, got {args.warmup}")
    require(args.layers is None or args.layers >= 1,
            f"--layers: expected >= 1, got {args.layers}")
    require(args.grid_repeats >= 1, f"--grid-repeats: expected >= 1, got {args.grid_repeats}")
    return cfg


def _text_prompts(args):
    """(prompts, source) of a prompts file or ``default:N`` (checked before loading models)."""
    from specbatch.errors import require
    from specbatch.traces.capture.prompts import resolve_prompts

    prompts, source = resolve_prompts(args.prompts, args.requests)
    require(bool(prompts), f"--prompts {args.prompts}: expected at least one prompt, got none")
    return prompts, source


def _prompt_ids(args, prompts, tok, target):
    """(token ids, categories, source): encoded text prompts, or ``random:N:LEN`` ids."""
    from specbatch.errors import require
    from specbatch.live.model_pair import random_prompts
    from specbatch.traces.capture.chain import encode_prompt

    if prompts is None:
        vocab = target.get_output_embeddings().weight.shape[0]
        ids, source = random_prompts(args.prompts, vocab)
        ids = ids[:args.requests] if args.requests else ids
        return ids, ["random"] * len(ids), source
    require(tok is not None, f"--prompts {args.prompts}: expected random:N:LEN for models "
            "without a tokenizer (shape names), got a text prompt source")
    items, source = prompts
    ids = [encode_prompt(tok, p.text, args.max_prompt_tokens) for p in items]
    return ids, [p.category for p in items], source


def _flags_identity(args) -> str:
    """A hash of the command's flags (all but where and how it prints): reruns with the same
    flags may replace each other's output directory."""
    import hashlib
    import json

    from specbatch.cli.vllm_runs import VLLM_FLAGS

    skip = ("out", "json", "force", "func") + (VLLM_FLAGS if getattr(args, "vllm", None) is None
                                               else ())  # live validations keep their identity
    flags = {k: v for k, v in sorted(vars(args).items()) if k not in skip}
    return hashlib.sha256(json.dumps(flags, default=str).encode()).hexdigest()[:20]


def _profile_grid(args, cfg, ids, draft, target, names, out) -> None:
    """Time both models on the run's (batch, query, KV) cells into OUT/profile_grid.csv."""
    import numpy as np

    from specbatch.live.profile_grid import profile_grid, visited_grid
    from specbatch.traces.capture.profile import write_profile

    cells = visited_grid(cfg.slots(len(ids)), cfg.depth, float(np.mean([len(i) for i in ids])),
                       cfg.max_new_tokens)
    frame = profile_grid(draft, target, names, cells, str(next(target.parameters()).device),
                         cfg.dtype, repeats=args.grid_repeats,
                         progress=False if args.json else None)
    write_profile(frame, f"{out}/profile_grid.csv")


def _validate(args) -> int:
    import contextlib

    from specbatch.analysis.validate.live import format_report, validate
    from specbatch.errors import require

    if args.vllm is not None:  # a measured vLLM serving run (docs/fidelity.md)
        from specbatch.cli.vllm_runs import validate_vllm_command

        return validate_vllm_command(args)
    require((args.live_dir is None) != (args.predict is None),
            "validate: expected the run to predict as LIVE_DIR or --predict RUN_B (one of them)")
    kept = {"kind": "validate", "identity": _flags_identity(args), "force": args.force,
            "legacy": VALIDATE_FILES}
    with result_dir(args.out, **kept) if args.out else contextlib.nullcontext() as tmp:
        report = validate(args.live_dir or args.predict, profile=args.profile,
                          target_model=args.target_model, draft_model=args.draft_model,
                          overhead=args.overhead, out=tmp, in_sample=args.in_sample,
                          fit_dir=args.fit)
    for line in report["warnings"]:
        sys.stderr.write(f"warning: {line}\n")
    emit(report, args.json, None if args.json else format_report(report))
    return 0


#: The files of a validate result (an older one without a marker holds only these).
VALIDATE_FILES = ("requests.parquet", "steps.parquet", "summary.json", "config.toml",
                  "validate.json")
