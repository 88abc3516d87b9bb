"""The documentation runs: every ```python block of README.md and docs/*.md executes, and the
commands on the README's first screen answer.

A page's blocks run top to bottom in one namespace (as a notebook would), in a fresh temporary
working directory, so a page may build on its earlier blocks and write files. A block right
after a ``<!-- skip-test -->`` line is left out; that comment must say why (models, a GPU).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SKIP = re.compile(r"<!--\s*skip-test\b[^>]*-->\s*$")


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, source) of every ```python block not marked skip-test."""
    blocks = []
    for match in FENCE.finditer(text):
        if match.group(1) != "python":
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if SKIP.search(before):
            continue
        blocks.append((text.count("\n", 0, match.start()) + 2, match.group(2)))
    return blocks


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p.read_text())]


def test_the_extractor_finds_blocks_and_honours_skip_markers():
    text = ("intro\n```python\nx = 1\n```\n<!-- skip-test: needs a GPU -->\n```python\n"
            "raise SystemExit\n```\n```bash\nls\n```\n")
    assert python_blocks(text) == [(3, "x = 1\n")]


def test_readme_and_the_api_page_have_python_examples():
    names = {p.name for p in PAGES_WITH_CODE}
    assert {"README.md", "api.md"} <= names


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_block_of_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for line, source in python_blocks(page.read_text()):
        code = compile(source, f"{page.relative_to(ROOT)}:{line}", "exec")
        exec(code, namespace)  # noqa: S102 - the documentation's own examples


def _commands_in_table(text: str) -> list[str]:
    """Sub-command names in the README's command table (`specbatch NAME ...` cells)."""
    names = re.findall(r"^\| `specbatch ([a-z]+)[ `]", text, re.MULTILINE)
    names += re.findall(r"/ `specbatch ([a-z]+)[ `]", text)
    return sorted(set(names))


def test_every_command_in_the_readme_table_has_help():
    from specbatch.cli import main

    names = _commands_in_table((ROOT / "README.md").read_text())
    assert {"demo", "simulate", "sweep", "report", "prove", "live", "validate"} <= set(names)
    for name in names:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0, name


def test_the_root_command_answers_help_and_version():
    for flag in ("--help", "--version"):
        out = subprocess.run([sys.executable, "-m", "specbatch", flag], capture_output=True,
                             text=True, check=True)
        assert "specbatch" in out.stdout


def shell_commands(text: str) -> list[str]:
    """Every ``specbatch ...`` command of the ```bash blocks: continuation lines joined,
    split at ``&&``, ``;``, ``|`` and redirections, comments and here-documents left out."""
    commands = []
    for match in FENCE.finditer(text):
        if match.group(1) != "bash":
            continue
        source = re.sub(r"<<'?(\w+)'?\n.*?^\1$", "", match.group(2), flags=re.S | re.M)
        for line in source.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)
            for part in re.split(r"&&|;|\||\s\d?>", line):
                if part.strip().startswith("specbatch "):
                    commands.append(part.strip())
    return commands


DOC_COMMANDS = sorted({(p.relative_to(ROOT).as_posix(), c) for p in PAGES
                       for c in shell_commands(p.read_text())})


def test_the_shell_extractor_joins_lines_and_drops_comments_and_heredocs():
    text = ("```bash\nspecbatch a --x 1 \\\n    --y 2   # note\ncat > f <<'EOF'\nspecbatch "
            "no\nEOF\n"
            "specbatch b && specbatch c | tail\n```\n")
    assert shell_commands(text) == ["specbatch a --x 1      --y 2", "specbatch b", "specbatch c"]


@pytest.mark.parametrize("page, command", DOC_COMMANDS, ids=lambda v: str(v)[:80])
def test_every_documented_command_parses(page, command, capsys):
    """Flags and sub-commands in the docs exist (parsed, not run; ``--help`` answers 0)."""
    from specbatch.cli import parse_command

    try:
        parse_command(shlex.split(command)[1:])
    except SystemExit as exc:
        assert exc.code == 0, f"{page}: `{command}` does not parse: {capsys.readouterr().err}"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", [*PAGES, ROOT / "traces" / "FORMAT.md"],
                         ids=lambda p: p.name)
def test_every_relative_link_points_at_a_file_that_exists(page):
    """Links to other pages, figures and source files resolve from the page's folder."""
    missing = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor on the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.name}: broken links {missing}"
