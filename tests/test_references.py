"""Every dotted reference to the package in prose resolves: docstrings and comments of the
code, tests and benchmarks, and the pages under docs/ (issue 47, item 7).

A reference is a dotted name rooted at a package, with or without the ``specbatch.`` prefix
(``simulator.cost.measured.calibrated``, ``specbatch.traces.models.model_shape.ModelShape``,
``simulator.policies.view.StepView.cap``): its longest importable prefix is imported and the
rest read as attributes (a dataclass field or an annotated class attribute counts). A module
that needs an optional dependency absent here (``triton``) is read without importing it: its
top-level names. File paths (``simulator/cost/roofline.py``) and names with a file extension
are not references.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ("theory", "traces", "simulator", "live", "analysis", "specbatch", "benchmarks", "tests")
PAGES = (*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md")
PACKAGES = ("theory", "traces", "simulator", "live", "analysis")
#: A dotted name rooted at a package (``specbatch.`` optional), not inside a path or a longer name.
REFERENCE = re.compile(r"(?<![\w/.\-])(?:(?:specbatch\.)?(?:" + "|".join(PACKAGES)
                       + r")|specbatch)(?:\.[A-Za-z_]\w*)+")
EXTENSIONS = {"py", "md", "json", "jsonl", "toml", "csv", "parquet", "txt", "gz", "png", "svg",
              "yaml", "sh", "html", "pt"}


def references(text: str) -> set[str]:
    """The dotted package names in ``text`` (module docstring)."""
    return {m.group(0) for m in REFERENCE.finditer(text)
            if m.group(0).rsplit(".", 1)[-1] not in EXTENSIONS}


def static_names(module: str) -> set[str]:
    """Top-level names a module defines, read from its source without importing it."""
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for n in tree.body:
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
            n, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def has(obj, name: str) -> bool:
    """Whether ``name`` is an attribute, a dataclass field or an annotated attribute of obj."""
    return (hasattr(obj, name)
            or (dataclasses.is_dataclass(obj) and name in {f.name for f in dataclasses.fields(obj)})
            or (isinstance(obj, type) and any(name in getattr(c, "__annotations__", {})
                                              for c in obj.__mro__)))


def resolves_statically(parts: list[str]) -> bool:
    """Whether the longest prefix of ``parts`` that is a module file defines the next part
    (read from its source: the module needs a dependency that is not installed)."""
    for i in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:i]))
        except ModuleNotFoundError:  # its parent is the module that cannot be imported
            continue
        if spec is not None:
            return i == len(parts) or parts[i] in static_names(".".join(parts[:i]))
    return False


def resolves(reference: str) -> bool:
    """Whether ``reference`` names a module or an attribute chain under one."""
    parts = reference.split(".")
    parts = parts if parts[0] == "specbatch" else ["specbatch", *parts]
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and not e.name.startswith("specbatch"):  # an optional dependency
                return resolves_statically(parts)
            continue
        for name in parts[i:]:
            if not has(obj, name):
                return False
            obj = getattr(obj, name, None)
            if obj is None:  # a field without a class-level value: nothing deeper to read
                return True
        return True
    return False


def prose(path: Path):
    """(line, text) of every docstring and comment of a Python file."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def code_files() -> list[Path]:
    return sorted(p for folder in CODE for p in (ROOT / folder).rglob("*.py")
                  if ".venv" not in p.parts)


def broken(items) -> list[str]:
    return sorted({f"{where}: {ref}" for where, text in items for ref in references(text)
                   if not resolves(ref)})


def test_references_in_docstrings_and_comments_resolve():
    items = [(f"{p.relative_to(ROOT)}:{line}", text)
             for p in code_files() for line, text in prose(p)]
    dead = broken(items)
    assert not dead, "references that do not resolve:\n" + "\n".join(dead)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_references_in_the_docs_resolve(page):
    items = [(f"{page.relative_to(ROOT)}:{i}", line)
             for i, line in enumerate(page.read_text().splitlines(), 1)]
    dead = broken(items)
    assert not dead, "references that do not resolve:\n" + "\n".join(dead)


@pytest.mark.parametrize("reference, expected", [
    ("simulator.cost.gpus.catalogue.Gpu", True),
    ("specbatch.simulator.cost.measured.calibrated.CalibratedCost.sources", True),
    ("simulator.policies.view.StepView.cap", True),
    ("simulator.config.sim_config.SimConfig.hardware", True),  # a dataclass field
    ("specbatch.theory.verify.triton_fused.verify_triton_padded", True),  # needs triton
    ("specbatch.simulate", True),  # a lazily exported name
    ("simulator.traces.shapes", False),  # a package that does not exist
    ("simulator.cost.registry.NoSuchName", False),
    ("specbatch.theory.verify.triton_fused.no_such_kernel", False),
])
def test_the_resolver_tells_a_live_reference_from_a_dead_one(reference, expected):
    assert resolves(reference) is expected


def test_paths_and_file_names_are_not_references():
    assert references("simulator/cost/analytic/roofline.py and live.py, see "
                      "traces.models.shapes.") == {"traces.models.shapes"}
