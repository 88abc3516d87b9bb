"""Arrays computed from input files, kept in the cache folder and found by what the files hold.

A lean ``specbatch simulate`` run spends more CPU parsing some of its inputs than simulating:
Vidur's 19,200-request workload CSV takes ~0.15 CPU s to parse and check in Python, the one
Vidur profile cell the calibrated cost prices from needs pyarrow (~0.1 s to import) to be
read. :func:`cached_arrays` keeps such a result, a few named numeric arrays, as one ``.npz``
file under ``<cache>/<kind>/`` (``$SPECBATCH_CACHE`` or ``~/.cache/specbatch``, as the traces,
the aic model and the compiled kernels are), read back by ``numpy.load`` without pickle.

An entry is found by its *key*, the SHA-256 of :data:`CACHE_VERSION`, the kind, the caller's
parts (digests of the input files' contents, taken from the very bytes the result is built
from, plus whatever else the result depends on), the contents of the code that builds it and
numpy's version: never by paths or stamps, so an edited input or a changed parser builds
afresh. ``.npz`` keeps every float64 and int64 exactly, so a result read back equals the
built one bit for bit. An entry that cannot be read (missing, damaged, another layout) is
built again; one that cannot be written (a read-only or full folder) is skipped. Entries are
written atomically (specbatch.io.atomic_write): processes sharing the folder never read half
a file. Stale entries are never read; removing ``<cache>/<kind>`` clears them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from specbatch.io import atomic_write, cache_dir

#: Bumped when what an entry holds changes meaning.
CACHE_VERSION = 1


def content_digest(data: bytes) -> str:
    """A BLAKE2b digest of ``data`` (an input's bytes), for a key's parts."""
    return hashlib.blake2b(data, digest_size=20).hexdigest()


def entry_path(kind: str, parts: tuple, code: Iterable[Path]) -> Path:
    """Where the result of ``kind`` built from ``parts`` by the modules ``code`` is kept."""
    sources = [(Path(p).name, content_digest(Path(p).read_bytes())) for p in code]
    state = repr((CACHE_VERSION, kind, parts, sources, np.__version__))
    return cache_dir() / kind / f"{hashlib.sha256(state.encode()).hexdigest()[:32]}.npz"


def cached_arrays(kind: str, parts: tuple, code: Iterable[Path],
                  build: Callable[[], dict[str, np.ndarray] | None]
                  ) -> dict[str, np.ndarray] | None:
    """``build()`` (name -> numeric or fixed-width text array, or None), kept under ``kind``
    by its key (module docstring) and read back from there by the next process. ``parts``:
    digests of the inputs' contents and anything else the result depends on; ``code``: the
    modules whose contents decide what ``build`` computes. None from ``build``, or a result
    holding an object array, is returned and not kept."""
    path = entry_path(kind, parts, code)
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {name: stored[name] for name in stored.files}
    except Exception:  # noqa: BLE001 - no entry, or one that cannot be read: build it
        pass
    value = build()
    if value is None or any(np.asarray(a).dtype.hasobject for a in value.values()):
        return value  # (an object array would need pickle to be read back)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **value)

    try:
        atomic_write(path, write)
    except OSError:  # a read-only or full folder: the next process builds it again
        pass
    return value
