"""The local text every machine has: the Python standard library as a corpus.

The standard library's source files (``code``) and its bundled English prose (``prose``: the
``pydoc_data.topics`` help texts, ``LICENSE.txt`` and module/class/function docstrings). Every
file goes deterministically to a ``train`` or a ``heldout`` split (every 10th file of the sorted
list is held out), so the zoo (traces.models.zoo) trains on one part and the default capture
prompts (traces.capture.prompts) are cut from the other.
"""

from __future__ import annotations

import ast
import functools
import sysconfig
from pathlib import Path

#: Sub-trees of the standard library that are tests, vendored packages or data tables.
_EXCLUDED_PARTS = {"site-packages", "test", "tests", "idle_test", "__pycache__", "encodings",
                   "pydoc_data", "ensurepip", "lib2to3", "turtledemo"}
_MAX_FILE_BYTES = 200_000
HELDOUT_EVERY = 10


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_source_files() -> list[Path]:
    """Sorted list of the standard library's own ``.py`` files (no tests, no data tables)."""
    root = stdlib_root()
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if _EXCLUDED_PARTS.intersection(rel.parts[:-1]) or path.stat().st_size > _MAX_FILE_BYTES:
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def is_heldout(index: int) -> bool:
    """Every ``HELDOUT_EVERY``-th item of a sorted list is held out from training."""
    return index % HELDOUT_EVERY == HELDOUT_EVERY - 1


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""


def _docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= 80:
                out.append(doc)
    return out


def _pydoc_topics() -> list[str]:
    path = stdlib_root() / "pydoc_data" / "topics.py"
    try:
        namespace: dict = {}
        exec(compile(_read(path), str(path), "exec"), namespace)  # a plain dict literal
        topics = namespace.get("topics", {})
        return [topics[k] for k in sorted(topics)]
    except Exception:  # noqa: BLE001  (a stripped stdlib simply has no topics)
        return []


def stdlib_documents(kind: str, split: str) -> list[str]:
    """Documents of the local corpus, deterministic order (cached per process).

    kind:  ``code`` (source files) or ``prose`` (help topics, licence, docstrings)
    split: ``train``, ``heldout`` or ``all``
    """
    return list(_stdlib_documents(kind, split))


@functools.lru_cache(maxsize=8)
def _stdlib_documents(kind: str, split: str) -> tuple[str, ...]:
    if kind not in ("code", "prose") or split not in ("train", "heldout", "all"):
        raise ValueError(f"kind/split: got {kind!r}/{split!r}")
    keep = (lambda i: True) if split == "all" else (
        (lambda i: is_heldout(i)) if split == "heldout" else (lambda i: not is_heldout(i)))
    files = stdlib_source_files()
    if kind == "code":
        return tuple(t for i, f in enumerate(files) if keep(i) and (t := _read(f)).strip())
    docs: list[str] = []
    for i, topic in enumerate(_pydoc_topics()):
        if keep(i):
            docs.append(topic)
    if split in ("train", "all"):
        licence = _read(stdlib_root() / "LICENSE.txt")
        if licence:
            docs.append(licence)
    for i, f in enumerate(files):
        if keep(i):
            strings = _docstrings(_read(f))
            if strings:
                docs.append("\n\n".join(strings))
    return tuple(docs)
