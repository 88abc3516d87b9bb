"""The CLI root: help, version, and one-line usage errors with exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specbatch import __version__
from specbatch.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specbatch", *args], capture_output=True, text=True)


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


def test_every_subcommand_has_help_with_example(capsys):
    from specbatch.cli import build_parser

    parser = build_parser()
    subparsers = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    for action in subparsers:
        for name, sub in action.choices.items():
            assert sub.epilog and "example" in sub.epilog, f"{name} --help lacks an example"


def test_project_error_is_printed_as_one_line(capsys, monkeypatch):
    from specbatch.errors import SpecbatchError

    def boom(args):
        raise SpecbatchError("file x.json: field 'vocab': expected a positive integer")

    import specbatch.cli as cli

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    boom_parser = sub.add_parser("boom", epilog="example:\n  specbatch boom")
    boom_parser.set_defaults(func=boom)
    assert main(["boom"]) == 2
    err = capsys.readouterr().err
    assert err == "specbatch: error: file x.json: field 'vocab': expected a positive integer\n"
