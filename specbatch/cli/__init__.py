"""The ``specbatch`` command-line root.

Each sub-command lives in a module of this package that exposes ``register(subparsers)``;
the root imports the modules listed in :data:`COMMAND_MODULES`, so adding a command never
touches this file's logic. CLI modules parse arguments and print; the work is done by the
library packages below them.

Conventions every sub-command follows:

- ``--help`` with an example (pass ``epilog=example("specbatch ...")`` to ``add_parser``);
- a command that prints numbers also takes ``--json`` and then writes exactly one JSON object
  to stdout (see :func:`emit`);
- user errors raise :class:`specbatch.errors.SpecbatchError`; the root prints
  ``specbatch: error: <message>`` on one line and exits 2, never a traceback.

A handler is set with ``parser.set_defaults(func=handler)``; ``handler(args)`` returns the
exit code (``None`` means 0).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from specbatch import __version__
from specbatch.cli.common import ArgumentParser, example
from specbatch.errors import SpecbatchError

#: Modules that contribute sub-commands, in the order they appear in ``--help``.
COMMAND_MODULES = (
    "specbatch.cli.demo",
    "specbatch.cli.simulate",
    "specbatch.cli.sweep",
    "specbatch.cli.trace",
    "specbatch.cli.capture",
    "specbatch.cli.profile",
    "specbatch.cli.zoo",
    "specbatch.cli.models",
    "specbatch.cli.cost",
    "specbatch.cli.prove",
    "specbatch.cli.live",
)


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
        importlib.import_module(name).register(sub)
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
