"""Bounded readers for user-supplied text files: configs, sweep specs, model pairs, values.

A user may point any path at a directory, a FIFO, a device, a binary file, a file of
gigabytes or a TOML/JSON document nested thousands of levels deep. These readers turn each
of those into a one-line :class:`~specbatch.errors.SpecbatchError` prefixed with ``what``
(e.g. ``"spec runs.toml"``), before anything blocks, allocates without bound or recurses.
A missing file raises :class:`FileNotFoundError`, so each caller keeps its own wording.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

from specbatch.errors import SpecbatchError
from specbatch.limits import MAX_INPUT_BYTES, MAX_INPUT_DEPTH

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_text(path: str | os.PathLike, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes.

    Checks the file type with ``stat`` before opening, so a FIFO never blocks.
    """
    info = os.stat(path)  # FileNotFoundError for the caller
    if stat.S_ISDIR(info.st_mode):
        raise SpecbatchError(f"{what}: expected a file, got a directory")
    if not stat.S_ISREG(info.st_mode):
        raise SpecbatchError(f"{what}: expected a regular file, got a FIFO, socket or device")
    if info.st_size > max_bytes:
        raise SpecbatchError(f"{what}: expected at most {max_bytes // 2**20} MiB, got "
                             f"{info.st_size / 2**20:.1f} MiB")
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecbatchError(f"{what}: expected UTF-8 text, got binary data (byte "
                             f"{exc.start})") from None


def nesting_depth(obj: Any) -> int:
    """Deepest nesting of dicts and lists in ``obj`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _check_depth(obj: Any, what: str) -> Any:
    depth = nesting_depth(obj)
    if depth > MAX_INPUT_DEPTH:
        raise SpecbatchError(f"{what}: expected tables/arrays nested at most {MAX_INPUT_DEPTH} "
                             f"levels deep, got {depth}")
    return obj


def loads_toml(text: str, what: str) -> dict:
    """Parse TOML text; too deep a document is a one-line error (``TOMLDecodeError`` for
    invalid TOML is left to the caller's wording)."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise SpecbatchError(f"{what}: expected TOML nested at most {MAX_INPUT_DEPTH} levels "
                             "deep, got deeper") from None
    return _check_depth(data, what)


def loads_json(text: str, what: str) -> Any:
    """Parse JSON text; too deep a document is a one-line error (``JSONDecodeError`` for
    invalid JSON is left to the caller's wording)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise SpecbatchError(f"{what}: expected JSON nested at most {MAX_INPUT_DEPTH} levels "
                             "deep, got deeper") from None
    return _check_depth(data, what)
