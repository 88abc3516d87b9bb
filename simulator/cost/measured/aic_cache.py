"""The built AIConfigurator model kept in the cache folder, so the next process reads it back.

Building ``cost = "aic"`` for one deployment reads the GPU's bundled curves (pandas and
pyarrow), groups every GEMM shape's measured points, moves curves to untimed shapes (the
transfer) and fits the attention law (scipy's ``least_squares``): ~1.5 CPU s, against ~0.3 s
for the whole of a 10-request ``specbatch simulate`` under the roofline. What the build
produces is a few numbers per op, so :func:`entry` keeps each built piece as one small JSON
file under ``<cache>/aic/<system>/`` (``$SPECBATCH_CACHE`` or ``~/.cache/specbatch``, as the
traces and the compiled kernels are), read back with neither pandas nor scipy:

- ``coverage``: which dtypes, head widths and all-reduce sizes the system's curves hold
  (``auto``'s check, simulator.cost.measured.aic_cost.aic_covers);
- ``curve``: one op's :class:`~simulator.cost.measured.aic_curve.Curve` (its grid, seconds,
  source line and the law it grows by beyond the grid);
- ``attention``: one role's attention law, stored as the builder's dataclass (its class and
  fields), whatever fields the fit produces.

An entry is found by its *key*, the SHA-256 of

- :data:`CACHE_VERSION`, the kind and the builder's arguments;
- the contents of the system's curve files and of ``laws.json`` (:func:`data_digest`): an
  entry is found by what the data hold, never by stamps;
- the contents of the code that builds it (:func:`code_digest`: every ``aic_*.py`` module of
  this package and simulator/cost/tabulated.py), and the versions of numpy, scipy, pandas and
  pyarrow: a changed fit (say aic_attention.py's law) builds afresh.

JSON keeps a float64 exactly (its shortest repr), so a model read back prices every op
bit for bit as the freshly built one (tests/simulator/cost/measured/test_aic_cache.py). An
entry that cannot be read or decoded (corrupt, truncated, another version's) is rebuilt
silently; one that cannot be written (a read-only cache) is skipped. Entries are written
atomically (specbatch.io.atomic_write), so processes sharing the folder never read half a
file. Stale entries (another code or data digest) are never read; they are a few KB each,
and removing ``<cache>/aic`` clears them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specbatch.io import atomic_write, cache_dir
from specbatch.simulator.cost.measured.aic_curves import BUNDLED, curve_files

#: Bumped when what an entry holds changes meaning.
CACHE_VERSION = 1
#: The folder of the modules that build what an entry holds (every ``aic_*.py``).
CODE_DIR = Path(__file__).resolve().parent
#: The tabulated form the attention entry is a dataclass of.
TABULATED = CODE_DIR.parent / "tabulated.py"
#: The libraries whose numerics a build depends on (versions in the key).
LIBRARIES = ("scipy", "pandas", "pyarrow")


def folder() -> Path:
    """Where entries live: ``<cache>/aic``."""
    return cache_dir() / "aic"


def library_version(name: str) -> str:
    """``name``'s installed distribution (its ``*.dist-info`` folder's name) without
    importing it or importlib.metadata (~30 ms); its package path where none is found."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return f"{name}: absent"
    where = Path(next(iter(spec.submodule_search_locations)))
    try:
        infos = sorted(n for n in os.listdir(where.parent)
                       if n.startswith(f"{name}-") and n.endswith(".dist-info"))
    except OSError:
        infos = []
    return infos[-1] if infos else str(where)


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of the building code's contents and the libraries' versions."""
    digest = hashlib.sha256(f"v{CACHE_VERSION} numpy {np.__version__}".encode())
    for lib in LIBRARIES:
        digest.update(library_version(lib).encode())
    for path in [*sorted(CODE_DIR.glob("aic_*.py")), TABULATED]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=16)
def data_digest(system: str, data: str = str(BUNDLED)) -> str:
    """SHA-256 of ``system``'s curve files and of ``laws.json`` under ``data`` (contents)."""
    digest = hashlib.sha256(system.encode())
    for path in [*curve_files(system, data), Path(data) / "laws.json"]:
        try:
            body = path.read_bytes()
        except OSError:
            body = b"<absent>"
        digest.update(path.name.encode() + b"\0" + body + b"\0")
    return digest.hexdigest()


def entry_key(kind: str, system: str, args: tuple) -> str:
    """The SHA-256 naming one entry (module docstring)."""
    text = json.dumps([CACHE_VERSION, kind, system, list(args), code_digest(),
                       data_digest(system)])
    return hashlib.sha256(text.encode()).hexdigest()


def entry(kind: str, system: str, args: tuple, build: Callable[[], object],
          encode: Callable[[object], object], decode: Callable[[object], object]):
    """``build()``'s value for (``kind``, ``system``, ``args``), read back from the cache
    folder when stored (``decode`` of the stored JSON), else built and stored (``encode``
    gives its JSON form). Nothing is printed either way."""
    key = entry_key(kind, system, args)
    path = folder() / system / f"{kind}-{key[:32]}.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(stored, dict) and stored.get("key") == key:
            return decode(stored["value"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError):
        pass  # absent, corrupt or another layout's: rebuilt below
    value = build()
    try:
        text = json.dumps({"key": key, "kind": kind, "args": list(args),
                           "value": encode(value)}, allow_nan=True)
        atomic_write(path, text)
    except (OSError, TypeError, ValueError):
        pass  # a read-only cache, or a value JSON does not hold: built each time
    return value


def dataclass_fields(obj) -> dict:
    """A flat dataclass as {"class": "module:Name", "fields": {...}} (scalar fields and tuples
    of floats, as {"floats": [...]}; a TypeError for anything else, so :func:`entry` stores
    nothing rather than a lossy copy)."""
    fields = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, tuple) and all(isinstance(v, float) for v in value):
            value = {"floats": list(value)}  # a packed array (AttentionLaw.grid)
        elif not (value is None or isinstance(value, (bool, int, float, str))):
            raise TypeError(f"{type(obj).__name__}.{f.name}: {type(value).__name__} not stored")
        fields[f.name] = value
    cls = type(obj)
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}


def from_fields(stored: dict):
    """The dataclass :func:`dataclass_fields` stored (a TypeError if its fields changed)."""
    module, name = stored["class"].split(":")
    if not module.startswith("specbatch."):
        raise TypeError(f"{stored['class']}: not one of this package's classes")
    cls = getattr(importlib.import_module(module), name)
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{stored['class']}: not a dataclass")
    fields = {k: tuple(float(x) for x in v["floats"]) if isinstance(v, dict) else v
              for k, v in stored["fields"].items()}
    return cls(**fields)
