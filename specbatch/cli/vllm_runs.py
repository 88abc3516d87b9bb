"""``specbatch validate --vllm DIR|NAME``: replay a measured vLLM serving run and compare
(argument parsing and printing; the work is in :mod:`specbatch.analysis.validate.vllm_run`)."""

from __future__ import annotations

import argparse
import contextlib

from specbatch.cli.common import emit
from specbatch.errors import require
from specbatch.io import check_result_dir, dumps, prepare_output_file, result_dir

#: The ``--vllm`` flags (argparse destinations).
VLLM_FLAGS = ("vllm", "cost", "hardware", "model", "figure")
#: Flags of the live-run validation that mean nothing for a vLLM run.
LIVE_ONLY = ("predict", "fit", "profile", "in_sample", "target_model", "draft_model",
             "overhead")


def add_vllm_flags(v: argparse.ArgumentParser) -> None:
    """The ``--vllm`` flags of ``specbatch validate``."""
    g = v.add_argument_group("measured vLLM runs (docs/fidelity.md)")
    g.add_argument("--vllm", default=None, metavar="DIR|NAME",
                   help="replay a measured vLLM run (a folder with requests.jsonl, meta.json, "
                        "timeseries.csv, config.json, or a bundled run's name; 'list' lists "
                        "them) with ar under vllm-v1 and print measured vs simulated TTFT, "
                        "TPOT, e2e, throughput with KS and +-10 %% TOST tests")
    g.add_argument("--cost", default="auto",
                   help="--vllm: the simulator's cost model (a SimConfig cost name; default "
                        "auto: the best validated source covering the GPU, "
                        "simulator/cost/resolve.py)")
    g.add_argument("--hardware", default=None,
                   help="--vllm: hardware preset (default: meta.json's device name, or the "
                        "bundled run's GPU)")
    g.add_argument("--model", default=None,
                   help="--vllm: the served model's config.json (default: the run folder's)")
    g.add_argument("--figure", default=None, metavar="PNG",
                   help="--vllm: also write measured vs simulated per-request latency here "
                        "(an existing file is replaced only if an earlier validate --vllm "
                        "wrote it, or with --force)")


def validate_vllm_command(args) -> int:
    """``specbatch validate --vllm``."""
    from specbatch.analysis.validate.vllm_run import (
        format_report,
        latency_figure,
        list_runs,
        validate_vllm,
    )

    for name in LIVE_ONLY:
        value = getattr(args, name, None)
        require(value in (None, False), f"--{name.replace('_', '-')}: expected no live-run "
                "flag with --vllm (it replays a measured vLLM run)")
    require(args.live_dir is None, f"validate: expected --vllm or LIVE_DIR, got both "
            f"({args.live_dir!r})")
    if args.vllm == "list":
        runs = list_runs()
        text = "\n".join(f"{n:<28}{r['gpu']:<12}{r['kind']:<7}{r['model']}"
                         for n, r in runs.items())
        emit({"runs": runs}, args.json, text)
        return 0
    if args.figure:
        check_figure(args.figure, args.force)
    kept = {"kind": "validate-vllm", "identity": _identity(args), "force": args.force}
    final = check_result_dir(args.out, **kept) if args.out else None
    with result_dir(args.out, **kept) if args.out else contextlib.nullcontext() as tmp:
        report, sim = validate_vllm(args.vllm, cost=args.cost, hardware=args.hardware,
                                    model=args.model, folder=tmp, final=final)
        if tmp is not None:
            sim.write_files(tmp)
            (tmp / "validate_vllm.json").write_text(dumps(report, indent=2) + "\n")
    if args.figure:
        from specbatch.traces.public.vllm_runs import load_run

        simulated = sim.requests.assign(output_len=sim.requests["tokens"])
        latency_figure(report["run"], load_run(args.vllm).requests, simulated, args.figure)
    emit(report, args.json, None if args.json else format_report(report))
    return 0


def check_figure(path: str, force: bool) -> None:
    """``--figure PATH``: a new file, an earlier figure of ``validate --vllm`` (its PNG mark,
    analysis.validate.vllm_run.is_latency_figure) or, with ``--force``, any file is replaced;
    anything else is refused before the replay runs (nothing written is lost)."""
    from pathlib import Path

    from specbatch.analysis.validate.vllm_run import is_latency_figure

    prepare_output_file(path, "--figure", (".png",))
    if Path(path).exists() and not force:
        require(is_latency_figure(path), f"--figure {path}: exists and is not a figure "
                "validate --vllm wrote (pass --force to replace it, or choose another name)")


def _identity(args) -> str:
    import hashlib

    flags = {k: str(getattr(args, k)) for k in ("vllm", "cost", "hardware", "model")}
    return hashlib.sha256(dumps(flags).encode()).hexdigest()[:20]
