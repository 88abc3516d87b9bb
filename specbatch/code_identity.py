"""What a stored result was computed with: the package's code and bundled data, by content.

A sweep or a plan keeps each run under a key (analysis.sweep.points.run_key, with the package
version: points.code_version) and a rerun reuses what it finds. Keyed by the package version
alone, a run stored before a change of the cost model (a new measured table, a corrected
envelope, a fixed rule) would be read back as if today's code had computed it: a wrong answer
that looks fresh. :func:`code_identity` is a digest of every file of the installed packages
(``specbatch`` and the five folders installed under it: their modules and the data they ship:
cost tables, profiles, configs, bundled traces aside), so any change of what the package
computes with gives new keys; the unchanged package gives the same identity in every process,
whatever its path. The bundled traces (``traces/data/<name>/`` folders holding a ``meta.json``)
are left out: a run names its trace and is keyed by that trace's own contents
(analysis.sweep.points.trace_fingerprint).

The identity is computed once per process (~8 MB read, ~0.1 s); ``__pycache__`` folders and
dot-files are left out (they are derived or local).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path

#: The installed package roots (pyproject's package-dir), by import name.
PACKAGES = ("specbatch", "specbatch.theory", "specbatch.traces", "specbatch.simulator",
            "specbatch.live", "specbatch.analysis")


def installed_roots() -> dict[str, Path]:
    """Import name -> folder of each package root (:data:`PACKAGES`), found, not imported."""
    return {name: Path(importlib.util.find_spec(name).origin).resolve().parent
            for name in PACKAGES}


def package_files(roots: dict[str, Path]) -> list[tuple[str, Path]]:
    """(name within its root, path) of every file the ``roots`` hold but the bundled traces,
    ``__pycache__`` folders and dot-files, sorted; a root nested in another is walked as its
    own."""
    out = []
    for name, root in roots.items():
        skip = {r for n, r in roots.items() if n != name and r != root and r.is_relative_to(root)}
        skip |= bundled_traces(root)
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if (path.is_file() and not any(p == "__pycache__" or p.startswith(".")
                                           for p in rel.parts)
                    and not any(path.is_relative_to(r) for r in skip)):
                out.append((f"{name}/{rel.as_posix()}", path))
    return sorted(out)


def files_digest(files: list[tuple[str, Path]]) -> str:
    """Hex digest of each (name, bytes) of ``files``: the same for the same contents under the
    same names, wherever they lie."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(f"{name}:{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()[:16]


def bundled_traces(root: Path) -> set[Path]:
    """The bundled trace folders under a package root: ``data/<name>/`` with a meta.json."""
    return {meta.parent for meta in root.glob("data/*/meta.json")}


@functools.cache
def code_identity() -> str:
    """:func:`files_digest` of the installed package's files (module docstring), computed once
    per process."""
    return files_digest(package_files(installed_roots()))
