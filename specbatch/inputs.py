"""Bounded readers for user-supplied text files: configs, sweep specs, model pairs, values.

A user may point any path at a directory, a FIFO, a device, a binary file, a file of
gigabytes or a TOML/JSON document nested thousands of levels deep. These readers turn each
of those into a one-line :class:`~specbatch.errors.SpecbatchError` prefixed with ``what``
(e.g. ``"spec runs.toml"``), before anything blocks, allocates without bound or recurses.
A missing file raises :class:`FileNotFoundError`, so each caller keeps its own wording.

:func:`read_regular_file` (and its text and JSON forms :func:`read_regular_text`,
:func:`load_json_file`) does the same for files read with a standard ``file F: expected X,
got Y`` message (a missing file included); the descriptor is opened non-blocking and checked
again, so a path swapped for a FIFO in between cannot block either. :func:`check_regular_file`
is the type check alone, for files a library opens itself (Parquet, safetensors, GGUF).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from specbatch.errors import SpecbatchError, require
from specbatch.limits import MAX_INPUT_BYTES, MAX_INPUT_DEPTH

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_text(path: str | os.PathLike, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes; errors start ``what:``.

    Checks the file type with ``stat`` before opening, so a FIFO never blocks; a missing file
    raises :class:`FileNotFoundError` for the caller's own wording.
    """
    os.stat(path)  # FileNotFoundError for the caller
    data = _read_bounded(Path(path), max_bytes, f"{what}: expected", "a regular file")
    return _utf8(data, f"{what}: expected UTF-8 text")


def _utf8(data: bytes, expected: str) -> str:
    """``data`` decoded as UTF-8; binary content is ``{expected}, got binary data (byte N)``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecbatchError(f"{expected}, got binary data (byte {exc.start})") from None


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
    return _loads(tomllib.loads, "TOML", text, what)


def loads_json(text: str, what: str) -> Any:
    """Parse JSON text; too deep a document is a one-line error (``JSONDecodeError`` for
    invalid JSON is left to the caller's wording)."""
    return _loads(json.loads, "JSON", text, what)


def _loads(parse: Any, language: str, text: str, what: str) -> Any:
    """``parse(text)`` with its recursion limit and then :data:`MAX_INPUT_DEPTH` enforced."""
    try:
        data = parse(text)
    except RecursionError:
        raise SpecbatchError(f"{what}: expected {language} nested at most {MAX_INPUT_DEPTH} "
                             "levels deep, got deeper") from None
    return _check_depth(data, what)


def _file_kind(mode: int) -> str:
    """What a non-regular file is, in words, from its ``st_mode``."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def check_regular_file(path: str | os.PathLike, what: str = "a file") -> Path:
    """Refuse, in one line, a path that is missing or not a regular file (FIFO, device,
    directory), without opening it; for inputs a library opens itself (Parquet, safetensors)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SpecbatchError(f"file {path}: expected {what}, got no such file") from None
    except OSError as exc:
        raise SpecbatchError(f"file {path}: expected {what}, got an unreadable path "
                             f"({exc.strerror or exc})") from None
    require(stat.S_ISREG(mode), f"file {path}: expected {what} (a regular file), got "
            f"{_file_kind(mode)}")
    return path


def read_regular_file(path: str | os.PathLike, what: str = "a file",
                      max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes``; errors
    read ``file PATH: expected WHAT ...`` (a missing file included)."""
    path = check_regular_file(path, what)
    return _read_bounded(path, max_bytes, f"file {path}: expected", f"{what} (a regular file)")


def _read_bounded(path: Path, max_bytes: int, expected: str, noun: str) -> bytes:
    """Read a file checked to be regular before opening and again on the open descriptor
    (opened non-blocking, so a path swapped for a FIFO in between cannot block either);
    errors read ``{expected} {noun}, got ...``."""
    try:
        mode = os.stat(path).st_mode
        require(stat.S_ISREG(mode), f"{expected} {noun}, got {_file_kind(mode)}")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise SpecbatchError(f"{expected} {noun}, got an unreadable file "
                             f"({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        require(stat.S_ISREG(info.st_mode), f"{expected} {noun}, got {_file_kind(info.st_mode)}")
        require(info.st_size <= max_bytes, f"{expected} {noun} of at most {max_bytes:,} bytes, "
                f"got {info.st_size:,}")
        try:
            return fh.read(max_bytes + 1)[: max_bytes]
        except OSError as exc:
            raise SpecbatchError(f"{expected} {noun}, got an unreadable file "
                                 f"({exc.strerror or exc})") from None


def read_regular_text(path: str | os.PathLike, what: str = "a text file",
                      max_bytes: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_regular_file` decoded as UTF-8; binary content is a one-line error."""
    return _utf8(read_regular_file(path, what, max_bytes),
                 f"file {path}: expected {what} in UTF-8 text")


def load_json_file(path: str | os.PathLike, what: str = "a JSON file",
                   max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """The parsed JSON value of ``path`` (any type: callers check the shape they expect).

    Malformed JSON, binary data and nesting too deep for the parser are one-line errors.
    """
    text = read_regular_text(path, what, max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecbatchError(f"file {path}: expected {what}, got invalid JSON ({exc.msg}, line "
                             f"{exc.lineno})") from None
    except ValueError as exc:  # e.g. an integer beyond the interpreter's digit limit
        raise SpecbatchError(f"file {path}: expected {what}, got invalid JSON "
                             f"({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise SpecbatchError(f"file {path}: expected {what}, got JSON nested too deeply to "
                             "parse") from None
