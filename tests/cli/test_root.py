"""The CLI root: help, version, one-line usage errors with exit code 2, and sub-commands
loaded only when run (help and mistakes answer without importing the library)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

from specbatch import __version__
from specbatch.cli import COMMANDS, build_parser, chosen_command, main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specbatch", *args], capture_output=True, text=True
    )


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_lists_usage_and_exits_zero():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "usage: specbatch" in result.stdout


def test_version_prints_package_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"specbatch {__version__}"


@pytest.mark.parametrize("args", [["no-such-command"], ["--no-such-option"]])
def test_unknown_command_or_option_is_one_line_exit_2(args):
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0]
    assert "Traceback" not in result.stderr


def test_every_subcommand_has_help_with_example():
    for name in COMMANDS:
        sub = subcommands(build_parser(load=[name]))[name]
        assert sub.epilog and "example" in sub.epilog, f"{name} --help lacks an example"


def test_the_command_table_names_every_command_with_its_own_help():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = {choice.dest: choice.help for choice in action._choices_actions}
    assert registered == {name: help_text for name, (_, help_text) in COMMANDS.items()}


def test_the_chosen_command_is_the_first_word_that_is_not_an_option():
    assert chosen_command(["--version"]) is None
    assert chosen_command(["simulate", "--k", "3"]) == "simulate"
    assert chosen_command(["-h"]) is None


def test_help_and_mistakes_do_not_import_the_library():
    """``specbatch --help``, a mistyped command, ``simulate --help`` and ``live --help`` load
    neither numpy, pandas nor torch; prints the time each took (not asserted: machines
    differ)."""
    code = ("import sys, time; t = time.perf_counter(); import specbatch.cli as cli\n"
            "try:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('numpy', 'pandas', 'torch', 'specbatch.simulator.run', "
            "'specbatch.analysis') if m in sys.modules)\n"
            "print('LOADED', heavy, time.perf_counter() - t, file=sys.stderr)")
    for argv in (["--help"], ["no-such-command"], ["simulate", "--help"], ["live", "--help"]):
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                                text=True)
        wall = time.perf_counter() - start
        line = next(x for x in result.stderr.splitlines() if x.startswith("LOADED"))
        assert line.split("]")[0] + "]" == "LOADED []", (argv, line)
        print(f"{' '.join(argv)}: {wall:.3f} s wall")


def test_project_error_is_printed_as_one_line(capsys, monkeypatch):
    from specbatch.errors import SpecbatchError

    def boom(args):
        raise SpecbatchError("file x.json: field 'vocab': expected a positive integer")

    import specbatch.cli as cli

    parser = cli.build_parser(load=())
    monkeypatch.setattr(cli, "build_parser", lambda load=None: parser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.add_parser("boom", epilog="example:\n  specbatch boom").set_defaults(func=boom)
    assert main(["boom"]) == 2
    err = capsys.readouterr().err
    assert err == "specbatch: error: file x.json: field 'vocab': expected a positive integer\n"
