"""What every sub-command shares: the one-line-error parser, ``--help`` examples, ``--json``.

A command that prints numbers also takes ``--json`` and then writes exactly one JSON object
to stdout (see :func:`emit`).
"""

from __future__ import annotations

import argparse
import sys

from specbatch.io import dumps


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




def emit(obj: dict, as_json: bool, text: str | None = None) -> None:
    """Print ``obj`` as one JSON object (``as_json``) or ``text`` (default: key: value lines)."""
    if as_json:
        sys.stdout.write(dumps(obj) + "\n")
        return
    if text is None:
        width = max((len(str(k)) for k in obj), default=0)
        text = "\n".join(f"{str(k):<{width}}  {v}" for k, v in obj.items())
    sys.stdout.write(text.rstrip("\n") + "\n")
