"""The ``specbatch`` command-line root.

Each package owns its sub-commands in a module that exposes ``register(subparsers)``; the
root imports the modules listed in :data:`COMMAND_MODULES` (skipping ones not yet present),
so adding a command never touches this file's logic.

Conventions every sub-command follows:

- ``--help`` with an example (pass ``epilog=example("specbatch ...")`` to ``add_parser``);
- a command that prints numbers also takes ``--json`` and then writes exactly one JSON object
  to stdout (see :func:`emit`);
- user errors raise :class:`theory.errors.SpecbatchError`; the root prints
  ``specbatch: error: <message>`` on one line and exits 2, never a traceback.

A handler is set with ``parser.set_defaults(func=handler)``; ``handler(args)`` returns the
exit code (``None`` means 0).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from analysis import __version__
from theory.errors import SpecbatchError

#: Modules that contribute sub-commands, in the order they appear in ``--help``.
COMMAND_MODULES = (
    "analysis.demo_cli",
    "simulator.cli",
    "analysis.sweep_cli",
    "traces.cli",
    "traces.capture_cli",
    "traces.profile_cli",
    "traces.zoo_cli",
    "simulator.cost_cli",
    "theory.cli",
    "analysis.live_cli",
)


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


def _jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays and non-finite floats to strict-JSON values."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy array or scalar
        return _jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def emit(obj: dict, as_json: bool, text: str | None = None) -> None:
    """Print ``obj`` as one JSON object (``as_json``) or ``text`` (default: key: value lines)."""
    if as_json:
        sys.stdout.write(json.dumps(_jsonable(obj), sort_keys=False) + "\n")
        return
    if text is None:
        width = max((len(str(k)) for k in obj), default=0)
        text = "\n".join(f"{str(k):<{width}}  {v}" for k, v in obj.items())
    sys.stdout.write(text.rstrip("\n") + "\n")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="specbatch",
        description="Batch speculative decoding: capture, simulate, sweep, report, prove.",
        epilog=example("specbatch demo", "specbatch prove --instances 50",
                       "specbatch simulate --policy tetris --k 3 --extra 1 --verify block"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"specbatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the module itself is absent: that package has no commands yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        code = args.func(args)
    except SpecbatchError as exc:
        sys.stderr.write(f"specbatch: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("specbatch: interrupted\n")
        return 130
    return 0 if code is None else int(code)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
