"""``specbatch zoo train``: a draft/target pair trained on local text (see
:mod:`traces.models.zoo`)."""

from __future__ import annotations

import argparse
import sys

from specbatch.cli.common import (
    add_json_flag,
    device_arg,
    emit,
    example,
    positive_int,
    seed_int,
)
from specbatch.io import check_output_dir


def register(subparsers) -> None:
    zoo = subparsers.add_parser(
        "zoo", help="train an offline draft/target model pair on local text",
        description="Train an offline draft/target pair (no downloads).",
        epilog=example("specbatch zoo train --out /tmp/zoo --size tiny",
                       "specbatch zoo train --out /work/zoo-small --size small --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = zoo.add_subparsers(dest="zoo_command", metavar="ACTION",
                             parser_class=type(zoo))
    train = sub.add_parser(
        "train", help="train a BPE tokenizer and a Llama draft/target pair",
        description="Train a byte-level BPE tokenizer and a Llama-architecture draft/target pair "
                    "(target ~10x the draft) on the Python standard library's source and prose "
                    "plus optional corpus files; save HF model dirs OUT/draft and OUT/target; "
                    "report held-out loss (nats/token) of both.",
        epilog=example("specbatch zoo train --out /tmp/zoo --size tiny --seed 0",
                       "specbatch zoo train --out zoo-small --size small --corpus notes/ --json",
                       "specbatch zoo train --out zoo-base --size base --device cuda "
                       "--max-seconds 270 --dtype bfloat16 --tf32 --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--out", required=True, help="output directory (draft/, target/, zoo.json)")
    train.add_argument("--force", action="store_true",
                       help="train into a non-empty --out, overwriting a pair already there")
    train.add_argument("--size", default="tiny", choices=["tiny", "small", "base"],
                       help="tiny: seconds (tests); small: minutes on 2 CPU cores; base: a GPU")
    train.add_argument("--corpus", nargs="*", default=[], metavar="PATH",
                       help="extra text files or directories to train on")
    train.add_argument("--seed", type=seed_int, default=0)
    train.add_argument("--steps", type=int, default=None, help="override the size's step count")
    train.add_argument("--threads", type=positive_int, default=None,
                       help="torch CPU threads (default 1: robust on a shared machine)")
    train.add_argument("--device", type=device_arg, default="cpu", help="cpu, cuda or cuda:N (base "
                                                                        "is for a GPU)")
    train.add_argument("--max-seconds", type=float, default=None, metavar="S",
                       help="wall-clock budget for the training loop: a 2-step probe shortens the "
                            "schedule to what fits, the loop stops between steps once S seconds "
                            "have passed; held-out loss is still evaluated and both models saved. "
                            "The step count then depends on the machine: zoo.json records "
                            "steps, steps_done and the options that replay it (reproduce)")
    train.add_argument("--max-steps", type=int, default=None, metavar="N",
                       help="stop after N steps without changing the --steps schedule (replays "
                            "a time-budgeted run: --steps STEPS --max-steps STEPS_DONE)")
    train.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                       help="training precision: bfloat16 = torch.autocast on CUDA only "
                            "(float32 weights and held-out loss)")
    train.add_argument("--tf32", action="store_true",
                       help="allow TF32 matmuls on CUDA while training (no effect on CPU)")
    add_json_flag(train)
    train.set_defaults(func=_train)


def _train(args) -> int:
    from specbatch.traces.models.zoo import train_zoo

    check_output_dir(args.out, force=args.force)  # before the minutes of training
    log = None if args.json else (lambda msg: sys.stderr.write(msg + "\n"))
    report = train_zoo(args.out, args.size, seed=args.seed, corpus=args.corpus,
                       steps=args.steps, threads=args.threads, log=log, device=args.device,
                       max_seconds=args.max_seconds, max_steps=args.max_steps, dtype=args.dtype,
                       tf32=args.tf32)
    summary = {
        "out": args.out, "size": report["size"], "seed": report["seed"],
        "vocab": report["vocab"], "steps": report["steps"], "steps_done": report["steps_done"],
        "stopped_early": report["stopped_early"], "dtype": report["dtype"],
        "tf32": report["tf32"], "reproduce": report["reproduce"],
        "draft_params": report["draft"]["params"], "target_params": report["target"]["params"],
        "param_ratio": report["param_ratio"],
        "draft_heldout_loss": report["draft"]["heldout_loss"],
        "target_heldout_loss": report["target"]["heldout_loss"],
        "seconds": report["seconds"]["total"],
        "stage_seconds": report["seconds"],  # tokenizer, train, eval, total
    }
    emit(summary, args.json)
    return 0
