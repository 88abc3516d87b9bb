"""Writing results safely: one atomic writer and one JSON encoder for every package.

``atomic_write`` writes to a temporary file in the destination's folder and renames it onto
the destination, so a crash or Ctrl-C leaves either the old file or the new one, never half
a file (resumable capture and sweeps rely on this). ``jsonable`` turns numpy scalars and
arrays, paths and non-finite floats into strict JSON values (NaN and infinities become
``null``), so every ``--json`` output and every JSON file parses anywhere.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[str], None]) -> Path:
    """Write ``data`` to ``path`` atomically and return the path.

    ``data`` is the file's bytes, its text (UTF-8), or a function that writes the file given
    a temporary path (e.g. ``frame.to_parquet``). Parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
