"""What every sub-command shares: the one-line-error parser, ``--help`` examples, ``--json``.

A command that prints numbers also takes ``--json`` and then writes exactly one JSON object
to stdout (see :func:`emit`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import IO

from specbatch.cli.flags import Flag, add_flags, flag
from specbatch.errors import require
from specbatch.io import dumps
from specbatch.limits import ALLOW_ENV, INT64_MAX, allowed, is_supported_device

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


def add_command(subparsers: argparse._SubParsersAction, name: str, *, help: str,
                description: str, examples: Sequence[str], flags: Sequence[Flag],
                run: Callable[[argparse.Namespace], int],
                **defaults: object) -> argparse.ArgumentParser:
    """A sub-command (or verb) declared in one call: its ``--help`` (one-line help, the
    description, the ``example:`` epilog), its :class:`~specbatch.cli.flags.Flag` records and the
    function that runs it (``args.func``); ``defaults`` are further namespace values."""
    parser = subparsers.add_parser(name, help=help, description=description,
                                   epilog=example(*examples),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser, flags)
    parser.set_defaults(func=run, **defaults)
    return parser


#: The shared ``--json`` flag: one JSON object on stdout and nothing else.
JSON_FLAG = flag("--json", action="store_true", help="print one JSON object on stdout")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """The shared ``--json`` flag (:data:`JSON_FLAG`)."""
    add_flags(parser, (JSON_FLAG,))

#: ``--help`` of ``--prompts``: the text sources every command that runs models accepts.
PROMPTS_HELP = ("a prompts file: JSONL ({\"prompt\": ...} per line), ShareGPT-style JSON or "
                "text (one prompt per line); or default:N[:SEED]: N code+prose prompts cut from "
                "held-out stdlib text")


#: ``--ngram-min``/``--ngram-max``: the prompt-lookup drafter's suffix n-gram bounds
#: (``--draft ngram``; resolved by :func:`specbatch.traces.capture.ngram.ngram_bounds`).
NGRAM_FLAGS = (
    flag("--ngram-min", type=int, default=None,
         help="--draft ngram: shortest suffix n-gram to look up, integer >= 1 "
              "(vLLM prompt_lookup_min; default 5, or --ngram-max when only "
              "that is given)"),
    flag("--ngram-max", type=int, default=None,
         help="--draft ngram: longest suffix n-gram to look up, >= --ngram-min "
              "(vLLM prompt_lookup_max; default 5, or --ngram-min when only "
              "that is given)"),
)


def add_ngram_flags(parser: argparse.ArgumentParser) -> None:
    """The prompt-lookup drafter's flags (:data:`NGRAM_FLAGS`)."""
    add_flags(parser, NGRAM_FLAGS)


def plural(n: int, word: str) -> str:
    """``1 run``, ``2 runs``: a count with its noun in the right number."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """The shared ``--threads N`` flag of the commands that run models (see :func:`set_threads`)."""
    add_flags(parser, (THREADS_FLAG,))


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


#: Where :func:`emit` writes its JSON object while :func:`json_stdout` holds stdout back.
_JSON_STREAM: list[IO[str]] = []


@contextlib.contextmanager
def json_stdout(enabled: bool = True) -> Iterator[None]:
    """Keep stdout for the command's own output while it runs.

    Libraries that print at C level (HiGHS writes its licence banner when a solver object is
    created) bypass ``sys.stdout``, so file descriptor 1 itself is pointed at stderr for the
    command's duration. With ``--json`` (``enabled``) ``sys.stdout`` is stderr too and only
    :func:`emit`'s one JSON object reaches the stdout the command started with; in text mode
    ``sys.stdout`` is that stdout, so the command's own lines reach it and nothing else. When
    ``sys.stdout`` is not descriptor 1 (a test capturing it), that object is used as is.
    """
    original = sys.stdout
    original.flush()
    try:
        real = original.fileno() == 1
    except (AttributeError, OSError, io.UnsupportedOperation):
        real = False
    if not enabled and not real:
        yield
        return
    saved = os.dup(1)
    stream = (os.fdopen(os.dup(saved), "w", encoding=getattr(original, "encoding", "utf-8"),
                        errors=getattr(original, "errors", None),
                        buffering=1 if original.isatty() else -1)
              if real else original)
    os.dup2(2, 1)
    sys.stdout = sys.stderr if enabled else stream
    if enabled:
        _JSON_STREAM.append(stream)
    try:
        yield
    finally:
        if enabled:
            _JSON_STREAM.pop()
        sys.stdout.flush()
        stream.flush()
        if real:
            stream.close()
        os.dup2(saved, 1)
        os.close(saved)
        sys.stdout = original


def emit(obj: dict, as_json: bool, text: str | None = None) -> None:
    """Print ``obj`` as one JSON object (``as_json``) or ``text`` (default: key: value lines)."""
    if as_json:
        stream = _JSON_STREAM[-1] if _JSON_STREAM else sys.stdout
        stream.write(dumps(obj) + "\n")
        stream.flush()
        return
    if text is None:
        width = max((len(str(k)) for k in obj), default=0)
        text = "\n".join(f"{str(k):<{width}}  {v}" for k, v in obj.items())
    sys.stdout.write(text.rstrip("\n") + "\n")


def _integer(text: str, low: int, what: str) -> int:
    """``text`` as a base-10 integer in [low, 2^63 - 1] (argparse ``type=``)."""
    try:
        value = int(text.strip(), 10)
    except (ValueError, AttributeError):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    if value > INT64_MAX:
        shown = text if len(text) <= 24 else text[:20] + "..."
        raise argparse.ArgumentTypeError(f"expected {what} of at most 2^63 - 1 (int64), got "
                                         f"{shown}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 that fits int64 (counts, sizes, thread numbers)."""
    return _integer(text, 1, "an integer >= 1")


#: The shared ``--threads N`` flag of the commands that run models.
THREADS_FLAG = flag("--threads", type=positive_int, default=None, metavar="N", help=THREADS_HELP)


def auto_bool(text: str) -> bool | str:
    """"auto", or a boolean spelled as a config flag is (true/false, yes/no, 1/0): a switch the
    engine resolves itself when auto (specbatch.fields.AutoBool)."""
    from specbatch.fields import AutoBool, FieldSpec, convert

    spec = FieldSpec("", AutoBool, False, None, "", (), None, (), False, (), "", True)
    try:
        return convert(spec, text)  # type: ignore[return-value]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def nonneg_int(text: str) -> int:
    """An integer >= 0 that fits int64 (budgets, lengths, seeds)."""
    return _integer(text, 0, "an integer >= 0")


def capped_int(limit: int, low: int = 1) -> Callable[[str], int]:
    """An integer in [low, limit]; past ``limit`` (a size that cannot finish or fit) it is
    refused unless ``SPECBATCH_ALLOW_LARGE=1`` (see :mod:`specbatch.limits`)."""
    def parse(text: str) -> int:
        value = _integer(text, low, f"an integer >= {low}")
        if value > limit and not allowed():
            raise argparse.ArgumentTypeError(
                f"{value} exceeds the limit of {limit}; set {ALLOW_ENV}=1 to run it anyway")
        return value
    return parse


def nonneg_float(text: str) -> float:
    """A finite float >= 0 (temperatures, seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def add_user_timeout_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``--user-timeout SECONDS``: the limit on one call into user code (specbatch.deadline)."""
    from specbatch.deadline import DEFAULT_SECONDS

    parser.add_argument("--user-timeout", type=nonneg_float, default=DEFAULT_SECONDS,
                        metavar="SECONDS",
                        help=f"seconds one call into {what} may take before the command "
                             f"stops with an error (default {DEFAULT_SECONDS:g}; 0: no limit; "
                             "a SIGALRM watchdog in the main thread)")


#: Seeds are non-negative and fit int64: numpy, torch and the Parquet/JSON outputs take them.
seed_int = nonneg_int


def int_list(item: Callable[[str], int]) -> Callable[[str], tuple[int, ...]]:
    """A comma-separated list of ``item`` values (``--batch 1,4,16``), at least one."""
    def parse(text: str) -> tuple[int, ...]:
        values = tuple(item(v) for v in text.split(",") if v.strip())
        if not values:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
        return values
    return parse




def device_arg(text: str) -> str:
    """A torch device this project runs on: cpu, cuda, cuda:N or mps."""
    if not is_supported_device(text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N or mps, got {text!r}")
    return text


def help_without_verb(parser: argparse.ArgumentParser) -> None:
    """A command group called without its verb prints its help and exits 2."""
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
