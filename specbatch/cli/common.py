"""What every sub-command shares: the one-line-error parser, ``--help`` examples, ``--json``.

A command that prints numbers also takes ``--json`` and then writes exactly one JSON object
to stdout (see :func:`emit`).
"""

from __future__ import annotations

import argparse
import sys

from specbatch.errors import require
from specbatch.io import dumps

#: ``--help`` of the shared ``--threads`` flag.
THREADS_HELP = ("torch CPU threads (default 1 on CPU: every core of a shared machine made "
                "steps 10-50x slower and the timings noisy; on CUDA torch's default)")


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2) instead of usage dumps."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def example(*lines: str) -> str:
    """Format an ``Example:`` epilog for a sub-command's ``--help``."""
    return "example:\n" + "\n".join(f"  {line}" for line in lines)


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """The shared ``--json`` flag: one JSON object on stdout and nothing else."""
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")

#: ``--help`` of ``--prompts``: the text sources every command that runs models accepts.
PROMPTS_HELP = ("a prompts file: JSONL ({\"prompt\": ...} per line), ShareGPT-style JSON or "
                "text (one prompt per line); or default:N[:SEED]: N code+prose prompts cut from "
                "held-out stdlib text")


def add_ngram_flags(parser: argparse.ArgumentParser) -> None:
    """``--ngram-min``/``--ngram-max``: the prompt-lookup drafter's suffix n-gram bounds
    (``--draft ngram``; resolved by :func:`specbatch.traces.ngram.ngram_bounds`)."""
    parser.add_argument("--ngram-min", type=int, default=None,
                        help="--draft ngram: shortest suffix n-gram to look up, integer >= 1 "
                             "(vLLM prompt_lookup_min; default 5, or --ngram-max when only "
                             "that is given)")
    parser.add_argument("--ngram-max", type=int, default=None,
                        help="--draft ngram: longest suffix n-gram to look up, >= --ngram-min "
                             "(vLLM prompt_lookup_max; default 5, or --ngram-min when only "
                             "that is given)")


def plural(n: int, word: str) -> str:
    """``1 run``, ``2 runs``: a count with its noun in the right number."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """The shared ``--threads N`` flag of the commands that run models (see :func:`set_threads`)."""
    parser.add_argument("--threads", type=int, default=None, metavar="N", help=THREADS_HELP)


def set_threads(threads: int | None, device: str) -> int:
    """Set torch's CPU thread count and return it (recorded in every output's metadata).

    ``threads`` when given; otherwise 1 on CPU, so measurements on a shared machine are not
    slowed down by oversubscription, and torch's own default on CUDA.
    """
    import torch

    require(threads is None or threads >= 1, f"--threads: expected N >= 1, got {threads}")
    if threads is not None or not device.startswith("cuda"):
        torch.set_num_threads(threads or 1)
    return torch.get_num_threads()


def emit(obj: dict, as_json: bool, text: str | None = None) -> None:
    """Print ``obj`` as one JSON object (``as_json``) or ``text`` (default: key: value lines)."""
    if as_json:
        sys.stdout.write(dumps(obj) + "\n")
        return
    if text is None:
        width = max((len(str(k)) for k in obj), default=0)
        text = "\n".join(f"{str(k):<{width}}  {v}" for k, v in obj.items())
    sys.stdout.write(text.rstrip("\n") + "\n")


def help_without_verb(parser: argparse.ArgumentParser) -> None:
    """A command group called without its verb prints its help and exits 2."""
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
