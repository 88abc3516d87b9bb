"""A loaded trace kept in the cache folder, so the next process reads it back in milliseconds.

Reading the default trace (eight Parquet files, 31,821 rows of K = 8) and running every check
of :func:`specbatch.traces.format.files.validate_trace` costs ~0.15 CPU s plus pyarrow's
import (~0.06 s): more than half of a 10-request ``specbatch simulate``. :func:`load` and
:func:`store` keep the checked :class:`~specbatch.traces.format.trace.Trace` as one pickle
under ``<cache>/traces/`` (``$SPECBATCH_CACHE`` or ``~/.cache/specbatch``, as the compiled
kernels are): the same arrays, bit for bit, and the same meta.json.

An entry is found by its *key*, the SHA-256 of

- the trace folder's path as spelled and resolved (the trace records its path) and, for each
  of its files, the name and a BLAKE2b digest of its contents (~12 ms for the default
  trace's 8 MB: an entry is found by what the files hold, never by their stamps);
- the same of this package's modules (the reader and its checks: a changed check re-reads);
- the Python and numpy versions (the pickle's readers).

A folder with a file changed in the last :data:`SETTLE_S` seconds (by its ctime) is never
stored: a file rewritten while it was read could otherwise leave a mixed state under the digest
taken before; it is read from its files each time until it settles. An entry that cannot be read
is ignored and the folder read from its files; one that cannot be written (a read-only cache) is
skipped. Storing an entry removes the older entries of the same folder. The pickle is trusted as
the cache folder's other files are (numba's kernels): the folder is the user's own.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import time
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.io import atomic_write, cache_dir

if TYPE_CHECKING:
    from specbatch.traces.format.trace import Trace

#: Bumped when what an entry holds changes meaning.
CACHE_VERSION = 1
#: A folder whose files all changed at least this long ago may be stored (module docstring).
SETTLE_S = 2.0
#: The reader's own modules: this package's folder.
READER_DIR = Path(__file__).resolve().parent


def folder() -> Path:
    """Where entries live: ``<cache>/traces``."""
    return cache_dir() / "traces"


def _stats(directory: Path) -> list[tuple]:
    """(name, size, contents digest, ctime_ns) of each file of ``directory``, by name."""
    out = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_file():
            st = entry.stat()
            h = hashlib.blake2b()
            with open(entry.path, "rb") as fh:
                for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(chunk)
            out.append((entry.name, st.st_size, h.hexdigest(), st.st_ctime_ns))
    return out


@dataclass(frozen=True)
class Entry:
    """Where the trace of one folder, as its files are now, is kept (module docstring)."""

    prefix: str  # the folder's entries: <prefix>-*.pickle
    path: Path  # this state's entry
    newest: float  # the newest ctime of the folder's files, seconds since the epoch


def entry(directory: Path) -> Entry:
    """The :class:`Entry` of ``directory`` (as spelled: the trace's ``path`` is the spelling)
    as its files are now; taken before the files are read, so a file changed while it is
    read leaves the entry to a state no later lookup has."""
    resolved = directory.resolve()
    files = _stats(resolved)
    reader = [s for s in _stats(READER_DIR) if s[0].endswith(".py")]
    where = repr((str(directory), str(resolved)))
    contents = [s[:3] for s in files + reader]  # names, sizes, digests: not the stamps
    state = repr((CACHE_VERSION, where, contents, sys.version, np.__version__))
    prefix = hashlib.sha256(where.encode()).hexdigest()[:16]
    digest = hashlib.sha256(state.encode()).hexdigest()[:32]
    newest = max((s[3] for s in files), default=0) / 1e9
    return Entry(prefix, folder() / f"{prefix}-{digest}.pickle", newest)


def load(at: Entry) -> Trace | None:
    """The trace kept at ``at``, its arrays read-only as :func:`make_trace` leaves them, or
    None (no entry, or one that cannot be read)."""
    try:
        with open(at.path, "rb") as fh:
            trace = pickle.load(fh)
    except Exception:  # noqa: BLE001 - a missing or damaged entry: read the files instead
        return None
    _freeze(trace)
    return trace


def store(at: Entry, trace: Trace) -> None:
    """Keep ``trace`` (read and checked from the folder in the state ``at`` names) unless the
    folder changed in the last :data:`SETTLE_S` seconds; drop the folder's older entries.
    Never raises for the cache folder's sake."""
    if time.time() - at.newest < SETTLE_S:
        return
    try:
        atomic_write(at.path, pickle.dumps(trace, protocol=pickle.HIGHEST_PROTOCOL))
        for old in at.path.parent.glob(f"{at.prefix}-*.pickle"):
            if old != at.path:
                old.unlink(missing_ok=True)
    except OSError:  # a read-only or full cache folder: the next run reads the files again
        return


def _freeze(obj: object) -> None:
    """Every array of ``obj`` and of the dataclasses it holds (a tree trace's nodes) made
    read-only."""
    for value in vars(obj).values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        elif is_dataclass(value):
            _freeze(value)
