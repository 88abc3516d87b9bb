"""Writing results safely: one atomic writer and one JSON encoder for every package.

``atomic_write`` writes to a temporary file in the destination's folder and renames it onto
the destination, so a crash or Ctrl-C leaves either the old file or the new one, never half
a file (resumable capture and sweeps rely on this). ``jsonable`` turns numpy scalars and
arrays, paths and non-finite floats into strict JSON values (NaN and infinities become
``null``), so every ``--json`` output and every JSON file parses anywhere.

``prepare_output_dir`` and ``prepare_output_file`` check an output path given on the command
line before any long work starts, so a typo costs a one-line error instead of a traceback
after minutes of measuring or training.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specbatch.errors import SpecbatchError, require


def _file_mode() -> int:
    """0666 less the process umask, read once: reading it means setting it, which would race
    with other threads creating files if done per write."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[str], None]) -> Path:
    """Write ``data`` to ``path`` atomically and return the path.

    ``data`` is the file's bytes, its text (UTF-8), or a function that writes the file given
    a temporary path (e.g. ``frame.to_parquet``). Parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, _FILE_MODE)  # mkstemp makes 0600; give the file the usual mode
    try:
        if isinstance(data, bytes):
            Path(tmp).write_bytes(data)
        elif isinstance(data, str):
            Path(tmp).write_text(data, encoding="utf-8")
        else:
            data(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def check_output_dir(path: str | os.PathLike, flag: str = "--out", *, force: bool = False,
                     allow_existing: bool = False) -> Path:
    """Refuse an unusable output folder with a one-line error naming ``flag``; create nothing.

    Refused: a path that is a file; a path whose nearest existing ancestor is a file or not
    writable; an existing non-empty folder unless ``allow_existing`` (resumable sweeps, reruns
    that overwrite their own files) or ``force``, so earlier results are never lost by
    accident. Side-effect free, so a command can call it before checking its other options.
    """
    path = Path(path)
    require(not path.exists() or path.is_dir(), f"{flag} {path}: exists and is not a directory")
    if path.is_dir() and not (allow_existing or force):
        require(not any(path.iterdir()),
                f"{flag} {path}: directory is not empty (pass --force to overwrite)")
    base = _existing_ancestor(path)
    require(base.is_dir(), f"{flag} {path}: cannot create the directory ({base} is not a "
            "directory)")
    require(os.access(base, os.W_OK | os.X_OK),
            f"{flag} {path}: cannot create the directory (Permission denied)")
    return path


def prepare_output_dir(path: str | os.PathLike, flag: str = "--out", *, force: bool = False,
                       allow_existing: bool = False) -> Path:
    """:func:`check_output_dir`, then create the folder (and parents) before any long work."""
    path = check_output_dir(path, flag, force=force, allow_existing=allow_existing)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbatchError(f"{flag} {path}: cannot create the directory "
                             f"({exc.strerror or exc})") from None
    return path


def _existing_ancestor(path: Path) -> Path:
    """``path`` itself or its nearest ancestor that exists (as a file or a folder)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def prepare_output_file(path: str | os.PathLike, flag: str = "--out",
                        suffixes: tuple[str, ...] = ()) -> Path:
    """Check an output file path (suffix, not a folder, folder creatable) before long work.

    ``suffixes`` (e.g. ``(".parquet", ".csv")``), when given, are the accepted endings. The
    parent folder is created; an existing file is left alone (the write replaces it
    atomically).
    """
    path = Path(path)
    require(not suffixes or path.suffix in suffixes,
            f"{flag} {path}: expected a file name ending in {' or '.join(suffixes)}")
    require(not path.is_dir(), f"{flag} {path}: is a directory, expected a file name")
    parent = path.parent
    require(not parent.exists() or parent.is_dir(),
            f"{flag} {path}: {parent} exists and is not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbatchError(f"{flag} {path}: cannot create the directory {parent} "
                             f"({exc.strerror or exc})") from None
    require(os.access(parent, os.W_OK | os.X_OK),
            f"{flag} {path}: cannot write into {parent} (Permission denied)")
    return path




def jsonable(obj: Any) -> Any:
    """``obj`` with numpy values as Python values and non-finite floats as ``None``."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "tolist"):  # numpy array or scalar, torch tensor
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON text of ``obj`` (see :func:`jsonable`)."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as pretty-printed strict JSON, atomically."""
    return atomic_write(path, dumps(obj, indent=2) + "\n")
