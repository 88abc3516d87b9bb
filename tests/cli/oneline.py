"""Helpers for the CLI's output contract: ``--json`` stdout is one JSON object, and bad input
is one ``specbatch: error:`` line on stderr with exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(argv: list[str], cwd: Path, timeout: float = 120, **env: str
            ) -> subprocess.CompletedProcess:
    """``python -m specbatch ARGV`` in a fresh process (C-level output included)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", "specbatch", *argv], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(code: int, err: str, needle: str = "") -> None:
    """Exit 2 and exactly one stderr line ``specbatch...: error: ...`` (containing ``needle``)."""
    lines = err.splitlines()
    assert code == 2, f"exit {code}, stderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{err[-3000:]}"
    assert lines[0].startswith("specbatch") and ": error: " in lines[0], lines[0]
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


def run_main(capsys, argv: list[str]) -> tuple[int, str, str]:
    """``specbatch ARGV`` in this process: (exit code, stdout, stderr); argparse's usage
    errors (SystemExit) count as their exit code."""
    from specbatch.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, argv: list[str]) -> tuple[int, dict]:
    """``specbatch ARGV --json`` in this process: (exit code, the stdout JSON object)."""
    from specbatch.cli import main

    code = main(argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)
