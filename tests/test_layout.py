"""The package layout as a specification: one installed namespace and one import direction.

``cli -> analysis -> live -> simulator -> traces -> theory -> errors``: a module may import
its own package and the packages to its right, never one to its left (docs/DESIGN.md). The live
loop sits above the simulator because it reuses the simulator's policies.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("errors", "theory", "traces", "simulator", "live", "analysis", "cli")
FOLDERS = {"theory": "theory", "traces": "traces", "simulator": "simulator", "live": "live",
           "analysis": "analysis", "cli": "specbatch/cli"}
BARE = {"theory", "traces", "simulator", "analysis", "live"}


def _modules():
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield package, path
    yield "errors", ROOT / "specbatch" / "errors.py"


def _imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "specbatch" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in ORDER else None


@pytest.mark.parametrize("package, path", list(_modules()), ids=lambda v: str(v))
def test_imports_follow_the_dependency_direction(package, path):
    rank = ORDER.index(package)
    for module in _imported(path):
        assert module.split(".")[0] not in BARE, f"{path}: bare import {module!r} (use specbatch.*)"
        layer = _layer(module)
        if layer is not None:
            assert ORDER.index(layer) <= rank, (
                f"{path.relative_to(ROOT)} ({package}) imports {module} ({layer}): against "
                f"{' -> '.join(reversed(ORDER))}")


def test_every_package_folder_installs_under_specbatch():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = config["packages"]
    assert all(p == "specbatch" or p.startswith("specbatch.") for p in packages)
    mapped = set(config["package-dir"].values())
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"tests"}
    assert folders <= mapped, f"folders not installed under specbatch: {folders - mapped}"
    assert set(config["package-dir"]) <= set(packages)


def test_every_sub_package_is_listed_for_the_wheel():
    """A folder with an ``__init__.py`` under a mapped folder is in ``packages``, or a wheel
    (unlike the editable install) would leave it out."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    assert found <= set(config["packages"]), sorted(found - set(config["packages"]))


#: Inside each package, its folders (and top-level modules) from the bottom up: a module may
#: import its own folder and the ones before it, never one after it (docs/DESIGN.md, Layout).
FOLDER_ORDER = {
    "theory": ("verify", "exact", "allocate", "trees", "moe", "conform", "conform_ragged",
               "conform_samplers", "theorems"),
    "traces": ("corpus", "models", "format", "synth", "capture", "public", "acceptance"),
    "simulator": ("defaults", "replay", "cost", "policies", "config", "workload", "engine",
                  "metrics", "saturation", "step_stream", "sim_result", "engine_run", "run"),
    "analysis": ("sensitivity", "sweep", "report", "engines", "plan", "validate", "tune",
                 "config_docs", "optimum", "endpoint"),
}


#: Inside a sub-package, its folders and modules from the bottom up, as FOLDER_ORDER does for
#: the packages (docs/DESIGN.md, Layout; each folder's __init__ gives its reading order).
SUBFOLDER_ORDER = {
    "simulator.cost": ("interface", "tabulated", "gpus", "analytic", "measured", "features",
                       "resolve", "draft_cost", "verify_cost", "registry", "report"),
}


def _runtime_imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` of every import that runs (``if TYPE_CHECKING:`` blocks excluded)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for sub in node.body for n in ast.walk(sub)}
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def _unit(parts: tuple[str, ...]) -> str:
    """The folder (or top-level module) a module path inside a package belongs to."""
    return parts[0]


@pytest.mark.parametrize("package", sorted(FOLDER_ORDER))
def test_folders_inside_a_package_import_one_way(package):
    order = FOLDER_ORDER[package]
    base = ROOT / FOLDERS[package]
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).with_suffix("").parts
        if rel == ("__init__",) or rel[0] in ("data", "specs"):
            continue
        source = _unit(rel)
        assert source in order, f"{path.relative_to(ROOT)}: {source!r} has no place in FOLDER_ORDER"
        for module, name in _runtime_imports(path):
            parts = module.split(".")
            if parts[:2] != ["specbatch", package]:
                continue
            rest = tuple(parts[2:]) or ((name,) if name else ())
            if not rest or _unit(rest) == source:
                continue
            target = _unit(rest)
            assert target in order and order.index(target) < order.index(source), (
                f"{path.relative_to(ROOT)} ({source}) imports {module} ({target}): against "
                f"{' <- '.join(order)}")


@pytest.mark.parametrize("package", sorted(SUBFOLDER_ORDER))
def test_folders_inside_a_sub_package_import_one_way(package):
    order = SUBFOLDER_ORDER[package]
    top, *inner = package.split(".")
    base = ROOT / FOLDERS[top] / Path(*inner)
    prefix = ["specbatch", top, *inner]
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).with_suffix("").parts
        if rel == ("__init__",):
            continue
        source = _unit(rel)
        assert source in order, (f"{path.relative_to(ROOT)}: {source!r} has no place in "
                                 f"SUBFOLDER_ORDER[{package!r}]")
        for module, name in _runtime_imports(path):
            parts = module.split(".")
            if parts[:len(prefix)] != prefix:
                continue
            rest = tuple(parts[len(prefix):]) or ((name,) if name else ())
            if not rest or _unit(rest) == source:
                continue
            target = _unit(rest)
            assert target in order and order.index(target) < order.index(source), (
                f"{path.relative_to(ROOT)} ({source}) imports {module} ({target}): against "
                f"{' <- '.join(order)}")


def test_the_sub_package_orders_name_every_folder_and_module():
    for package, order in SUBFOLDER_ORDER.items():
        top, *inner = package.split(".")
        base = ROOT / FOLDERS[top] / Path(*inner)
        units = {p.stem for p in base.glob("*.py") if p.stem != "__init__"}
        units |= {p.name for p in base.iterdir() if (p / "__init__.py").is_file()}
        assert units == set(order), f"{package}: {sorted(units ^ set(order))}"
        assert len([u for u in units if (base / f"{u}.py").is_file()]) <= 9, (
            f"{package}: more than 10 modules at its top (issue 47)")


#: The shared helpers under specbatch/, from the bottom up: each imports specbatch.errors and
#: the helpers before it, never a package (theory ... cli), so that every package may use them.
HELPERS = ("limits", "lazy", "fields", "inputs", "io", "array_cache", "deadline",
           "code_identity")


def test_the_shared_helpers_are_listed():
    units = {p.stem for p in (ROOT / "specbatch").glob("*.py")}
    assert units - {"__init__", "__main__", "errors"} == set(HELPERS)


@pytest.mark.parametrize("helper", HELPERS)
def test_a_shared_helper_imports_only_errors_and_the_helpers_below_it(helper):
    path = ROOT / "specbatch" / f"{helper}.py"
    below = {"specbatch.errors"} | {f"specbatch.{h}" for h in HELPERS[:HELPERS.index(helper)]}
    for module in _imported(path):  # function-level imports included
        if module.split(".")[0] == "specbatch":
            assert module in below, (f"specbatch/{helper}.py imports {module}: a shared helper "
                                     f"imports only {sorted(below)}")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts[1:] if parts[0] == "specbatch" else parts
    return ".".join(("specbatch", *parts)).removesuffix(".__init__")


def _import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> modules it imports at module level when it runs, module -> modules it
    imports inside functions), over every module of the tree (``if TYPE_CHECKING:`` excluded)."""
    paths = [p for folder in FOLDERS.values() for p in (ROOT / folder).rglob("*.py")]
    paths += list((ROOT / "specbatch").glob("*.py"))
    names = {_module_name(p): p for p in paths}
    top: dict[str, set[str]] = {}
    inner: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test)
                       for sub in node.body for n in ast.walk(sub)}
        in_function = {id(n) for node in ast.walk(tree)
                       if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(node)}
        top[name], inner[name] = set(), set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names
                         else node.module for a in node.names}
            elif isinstance(node, ast.Import):
                found = {a.name for a in node.names}
            else:
                continue
            found = {m for m in found if m in names and m != name}
            (inner if id(node) in in_function else top)[name] |= found
    return top, inner


def _reaches(top: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for module in top.get(stack.pop(), ()):
            if module not in seen:
                seen.add(module)
                stack.append(module)
    return seen


def test_no_import_inside_a_function_dodges_a_cycle():
    """A function-level import is for a heavy or optional dependency, never to dodge a cycle:
    the module imported must not import (at module level, directly or not) the importer. A
    cycle is fixed by moving the shared piece down (issue 47: e.g. analysis.plan.entry.choose,
    traces.models.model_shape, simulator.replay.replay_tables)."""
    top, inner = _import_graph()
    dodges = [f"{a} -> {b}" for a in sorted(inner) for b in sorted(inner[a] - top[a])
              if a in _reaches(top, b)]
    assert not dodges, f"function-level imports that dodge a cycle: {dodges}"
