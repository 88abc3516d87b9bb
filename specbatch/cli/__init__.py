"""The ``specbatch`` command-line root.

Each sub-command lives in a module of this package that exposes ``register(subparsers)``.
:data:`COMMANDS` names every sub-command with its module and its one-line help, so the root
imports only the module of the command being run: ``specbatch --help`` and a mistyped
command answer without importing the library (numpy, pandas, torch). Adding a command is
one row of that table. CLI modules parse arguments and print; the work is done by the
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
import errno
import importlib
import sys
from collections.abc import Iterable, Sequence

import specbatch
from specbatch.cli.common import ArgumentParser, example, json_stdout
from specbatch.deadline import DEFAULT_SECONDS, set_limit
from specbatch.errors import SpecbatchError

#: Sub-command -> (module that registers it, its one-line ``--help``), in ``--help`` order.
#: A module may register several commands (``live`` and ``validate``); the help texts here
#: are the ones the modules register (a test keeps them equal).
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("specbatch.cli.demo",
             "run the main comparison on the bundled trace and write a report (< 2 min)"),
    "simulate": ("specbatch.cli.simulate", "simulate batch speculative decoding on a trace"),
    "sweep": ("specbatch.cli.sweep",
              "run a grid of simulations (local process pool or Dask), resumable"),
    "report": ("specbatch.cli.sweep", "tables and figures (PNG) for a sweep output directory"),
    "plan": ("specbatch.cli.plan",
             "find the cheapest deployment and speculation setting that meets latency SLOs"),
    "tune": ("specbatch.cli.tune",
             "dynamic draft-length schedules for vLLM, TensorRT-LLM and SGLang, validated"),
    "trace": ("specbatch.cli.trace", "inspect, validate or synthesise a trace"),
    "acceptance": ("specbatch.cli.acceptance", "import, export and show acceptance profiles"),
    "capture": ("specbatch.cli.capture", "capture a trace from a local draft/target model pair"),
    "profile": ("specbatch.cli.profile",
                "measure forward-pass latency over batch x query x KV length"),
    "zoo": ("specbatch.cli.zoo", "train an offline draft/target model pair on local text"),
    "models": ("specbatch.cli.models",
               "get, convert and derive real pretrained models (GGUF wheels)"),
    "cost": ("specbatch.cli.cost", "fit or inspect the step-time cost model"),
    "prove": ("specbatch.cli.prove", "check the theorem catalogue on seeded random instances"),
    "optimum": ("specbatch.cli.prove",
                "exact optima: verification LPs and allocation under a budget"),
    "live": ("specbatch.cli.live",
             "run batched speculative decoding on live HF models and measure it"),
    "validate": ("specbatch.cli.live",
                 "predict a live run with the simulator and compare (out of sample with --fit)"),
    "conform": ("specbatch.cli.conform",
                "check that a rejection sampler preserves the target's law"),
}


class VersionAction(argparse.Action):
    """``--version``: prints ``specbatch <version>`` and exits, reading the version only then
    (``specbatch.__version__`` is looked up on first use)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(f"specbatch {specbatch.__version__}\n", sys.stdout)
        parser.exit()


def build_parser(load: Iterable[str] | None = None) -> ArgumentParser:
    """The root parser. ``load``: the commands whose modules are imported and registered in
    full (None = every command); the others get a placeholder parser carrying their help."""
    parser = ArgumentParser(
        prog="specbatch",
        description="Batch speculative decoding: capture, simulate, sweep, report, prove.",
        epilog=example("specbatch demo", "specbatch prove --instances 50",
                       "specbatch simulate --policy tetris --k 3 --extra 1 --verify block"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    modules = {COMMANDS[name][0] for name in (COMMANDS if load is None else load)
               if name in COMMANDS}
    for name, (module, help_text) in COMMANDS.items():
        if name in sub.choices:
            continue
        if module in modules:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The sub-command an argument list names: its first word that is not an option (the
    root's own options, ``--help`` and ``--version``, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def parse_command(argv: Sequence[str]) -> tuple[ArgumentParser, argparse.Namespace]:
    """(parser, parsed arguments) of a command line; ``live serve`` has a parser of its own
    (:mod:`specbatch.cli.serve`: ``live`` itself takes a run's flags)."""
    argv = list(argv)
    command = chosen_command(argv)
    if command == "live" and chosen_command(argv[argv.index("live") + 1:]) == "serve":
        from specbatch.cli.serve import serve_parser

        rest = argv[argv.index("live") + 1:]
        rest.remove("serve")
        parser = serve_parser()
        args = parser.parse_args(rest)
        args.command = "live serve"
        return parser, args
    parser = build_parser(load=() if command is None else (command,))
    return parser, parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, args = parse_command(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0 if args.command is None else 2
    # the limit on a call into user code: the command's --user-timeout, else the default
    set_limit(getattr(args, "user_timeout", DEFAULT_SECONDS))
    try:
        with json_stdout(bool(getattr(args, "json", False))):
            code = args.func(args)
    except SpecbatchError as exc:
        return _fail(str(exc))
    except MemoryError:
        return _fail("out of memory: the job is larger than this machine can hold; make it "
                     "smaller (fewer requests, runs, rows or a smaller batch)")
    except OSError as exc:
        message = _path_error(exc)
        if message is None:
            raise
        return _fail(message)
    except KeyboardInterrupt:
        sys.stderr.write("specbatch: interrupted\n")
        return 130
    return 0 if code is None else int(code)


#: ``OSError`` numbers that describe a path the user gave (too long, not allowed, wrong kind).
_PATH_ERRNOS = {errno.ENAMETOOLONG, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR,
                errno.EROFS, errno.ELOOP}
#: ``OSError`` numbers that describe the machine's storage, whatever the path.
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


def _fail(message: str) -> int:
    """Print the one-line error and return its exit code."""
    first = " ".join(message.split("\n"))
    sys.stderr.write(f"specbatch: error: {first}\n")
    return 2


def _path_error(exc: OSError) -> str | None:
    """The one-line message for an ``OSError`` about a user's path or a full disk, or None for
    any other (a bug, which keeps its traceback)."""
    reason = exc.strerror or str(exc)
    if exc.errno in _DISK_ERRNOS:
        where = f" writing {exc.filename}" if exc.filename else ""
        return f"{reason}{where}; free some space and run again"
    if exc.errno in _PATH_ERRNOS and exc.filename is not None:
        name = str(exc.filename)
        shown = name if len(name) <= 80 else name[:40] + "..." + name[-20:]
        return f"{shown}: {reason}"
    return None


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
