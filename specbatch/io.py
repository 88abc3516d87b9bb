"""Writing results safely: one atomic writer and one JSON encoder for every package.

``atomic_write`` writes to a temporary file in the destination's folder and renames it onto
the destination, so a crash or Ctrl-C leaves either the old file or the new one, never half
a file (resumable capture and sweeps rely on this). ``jsonable`` turns numpy scalars and
arrays, paths and non-finite floats into strict JSON values (NaN and infinities become
``null``), so every ``--json`` output and every JSON file parses anywhere.

``prepare_output_dir`` and ``prepare_output_file`` check an output path given on the command
line before any long work starts, so a typo costs a one-line error instead of a traceback
after minutes of measuring or training.

``result_dir`` does for a whole result folder what ``atomic_write`` does for one file: the
command writes into a hidden temporary sibling, which replaces the destination in one step
(``renameat2(RENAME_EXCHANGE)`` on Linux), so a kill -9 at any moment leaves the old
complete result or the new complete one. It replaces only an empty folder or a result of the
same kind and configuration (a marker file records both; ``force`` replaces any result of
the kind) and refuses anything else, naming what is there. ``dir_lock`` gives one process at
a time a folder (an ``fcntl`` lock), refusing a second one in one line.

Reading input files is :mod:`specbatch.inputs`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import fnmatch
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specbatch.errors import SpecbatchError, require


def _read_umask() -> int:
    """The process umask, read once: reading it means setting it, which would race with
    other threads creating files if done per write."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()
_FILE_MODE = 0o666 & ~_UMASK

#: The environment variable naming specbatch's cache folder (weights, kernels, traces).
CACHE_ENV = "SPECBATCH_CACHE"


def cache_dir(cache: str | os.PathLike | None = None) -> Path:
    """``cache``, else ``$SPECBATCH_CACHE``, else ``~/.cache/specbatch``."""
    if cache is None:
        cache = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "specbatch"
    return Path(cache)


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[str], None]) -> Path:
    """Write ``data`` to ``path`` atomically and return the path.

    ``data`` is the file's bytes, its text (UTF-8), or a function that writes the file given
    a temporary path (e.g. ``frame.to_parquet``). Parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp makes 0600; give the file the usual mode
        if isinstance(data, (bytes, str)):  # through mkstemp's descriptor: one open, not two
            with os.fdopen(fd, "wb") as f:
                fd = -1
                f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
        else:
            os.close(fd)
            fd = -1
            data(tmp)
        os.replace(tmp, path)
    except BaseException:
        if fd != -1:
            os.close(fd)
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


#: The file inside every result folder that says what wrote it: ``{"kind", "identity"}``.
RESULT_MARKER = ".specbatch-result.json"
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def check_result_dir(path: str | os.PathLike, kind: str, identity: str, flag: str = "--out", *,
                     force: bool = False, legacy: tuple[str, ...] = ()) -> Path:
    """Refuse, in one line naming what is there, an output folder :func:`result_dir` may not
    replace; return the folder's absolute path (a symbolic link's target).

    Replaceable: nothing at ``path``, an empty folder, a folder whose marker says it is a
    ``kind`` result with this ``identity`` (a rerun of the same configuration), or with any
    identity when ``force``; with ``force`` also a folder whose names all match a ``legacy``
    glob pattern (a ``kind`` result written before results carried a marker). Never the
    current folder or one above it (it would be moved away under the shell). Creates nothing
    but finishes an interrupted earlier write first (:func:`recover_result_dir`).
    """
    target = _target(path, flag)
    try:
        recover_result_dir(target)
        _check_holder(target, path, kind, identity, flag, force, legacy)
    except OSError as exc:
        raise SpecbatchError(f"{flag} {path}: cannot use the directory "
                             f"({exc.strerror or exc})") from None
    base = _existing_ancestor(target.parent)
    require(base.is_dir(), f"{flag} {path}: cannot create the directory ({base} is not a "
            "directory)")
    try:  # try it: access() says yes to root on a read-only file system or in /proc
        os.rmdir(tempfile.mkdtemp(prefix=".specbatch-probe-", dir=base))
    except OSError as exc:
        raise SpecbatchError(f"{flag} {path}: cannot create the directory "
                             f"({exc.strerror or exc})") from None
    return target


def _target(path: str | os.PathLike, flag: str) -> Path:
    """The absolute folder a result at ``path`` goes to: a symbolic link's target (the link
    stays); refused: a name too long for its temporary sibling, the current folder or one
    above it."""
    require(len(os.fsencode(Path(path).name)) <= 240,
            f"{flag} {path}: the directory name is too long (at most 240 bytes)")
    target = Path(os.path.abspath(path))
    if os.path.islink(target):
        target = Path(os.path.realpath(target))
    here = Path(os.path.realpath(os.getcwd()))
    require(Path(os.path.realpath(target)) not in (here, *here.parents),
            f"{flag} {path}: is the current directory or above it; name a directory below it")
    return target


def _check_holder(target: Path, path: str | os.PathLike, kind: str, identity: str, flag: str,
                  force: bool, legacy: tuple[str, ...]) -> None:
    """Refuse ``target`` (spelled ``path`` by the user) unless ``result_dir`` may replace it."""
    if not os.path.lexists(target):
        return
    require(target.is_dir(), f"{flag} {path}: exists and is not a directory")
    names = sorted(item.name for item in target.iterdir())
    if not names:
        return
    marker = _read_marker(target)
    if marker is not None:
        held = marker.get("kind")
        require(held == kind, f"{flag} {path}: holds a specbatch {held} result, not a {kind} "
                "result (choose another directory)")
        require(force or marker.get("identity") == identity,
                f"{flag} {path}: holds a {kind} result of another configuration (pass --force "
                "to replace it, or choose another directory)")
        return
    if legacy and all(any(fnmatch.fnmatchcase(n, pattern) for pattern in legacy) for n in names):
        require(force, f"{flag} {path}: holds a {kind} result that records no configuration "
                "(written by an older specbatch; pass --force to replace it)")
        return
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise SpecbatchError(f"{flag} {path}: holds files that are not a {kind} result ({shown}); "
                         "choose an empty or new directory")


def _read_marker(path: Path) -> dict | None:
    try:
        marker = json.loads((path / RESULT_MARKER).read_bytes())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


@contextlib.contextmanager
def result_dir(path: str | os.PathLike, kind: str, identity: str, flag: str = "--out", *,
               force: bool = False, legacy: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; when the block ends without an
    exception it gets the marker and replaces ``path`` in one step (module docstring), else
    it is deleted and ``path`` is untouched. The checks of :func:`check_result_dir` run on
    entry and again, under a lock on the parent folder, just before the swap.
    """
    target = check_result_dir(path, kind, identity, flag, force=force, legacy=legacy)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    except OSError as exc:
        raise SpecbatchError(f"{flag} {path}: cannot create the directory "
                             f"({exc.strerror or exc})") from None
    busy = os.open(tmp, os.O_RDONLY)
    fcntl.flock(busy, fcntl.LOCK_EX)  # tells recover_result_dir that this writer is alive
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700; give the usual mode
        yield tmp
        try:
            write_json(tmp / RESULT_MARKER, {"kind": kind, "identity": identity})
            with _locked(target.parent):
                _check_holder(target, path, kind, identity, flag, force, legacy)
                _swap_in(tmp, target)
        except OSError as exc:
            raise SpecbatchError(f"{flag} {path}: cannot put the result in place "
                                 f"({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(busy)


def _swap_in(tmp: Path, path: Path) -> None:
    """Put ``tmp`` at ``path``; the old ``path`` (if any) ends up deleted."""
    if not os.path.lexists(path):
        os.rename(tmp, path)
    elif _exchange(tmp, path):  # one atomic step: tmp now holds the old result
        shutil.rmtree(tmp, ignore_errors=True)  # what stays is deleted by the next recovery
    else:  # two renames; recover_result_dir restores the old one if killed in between
        old = tmp.with_name(tmp.name.replace(".tmp-", ".old-", 1))
        os.rename(path, old)
        try:
            os.rename(tmp, path)
        except OSError:
            os.rename(old, path)
            raise
        shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def recover_result_dir(path: str | os.PathLike) -> None:
    """Finish what a killed :func:`result_dir` left next to ``path``: restore the old result
    if it was moved away and never replaced, delete temporary folders whose writer is gone
    (a live writer holds a lock on its folder)."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return
    prefixes = (f".{path.name}.tmp-", f".{path.name}.old-")
    with _locked(parent):
        stale = sorted(item for item in parent.iterdir() if item.name.startswith(prefixes))
        for item in stale:
            if not item.is_dir() or item.is_symlink() or not _unlocked(item):
                continue
            if item.name.startswith(prefixes[1]) and not os.path.lexists(path):
                os.rename(item, path)
            else:
                shutil.rmtree(item, ignore_errors=True)


def _unlocked(folder: Path) -> bool:
    """Whether no process holds the lock of ``folder`` (its writer is gone)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``folder`` itself (short critical sections only)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def dir_lock(folder: str | os.PathLike, flag: str = "--out", what: str = "specbatch",
             name: str = ".specbatch.lock") -> Iterator[None]:
    """Hold ``folder``'s lock file (created) for the block; refuse in one line when another
    process holds it (``what`` names the kind of run, e.g. "sweep"). The lock dies with its
    process, so a killed run never leaves the folder locked; the process must not open and
    close the lock file elsewhere meanwhile (that would drop a POSIX lock)."""
    folder = Path(folder)
    try:
        fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, _FILE_MODE)
    except OSError as exc:
        raise SpecbatchError(f"{flag} {folder}: cannot lock the directory "
                             f"({exc.strerror or exc})") from None
    try:
        try:  # a POSIX record lock: owned by this process alone, not by forked pool workers
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise SpecbatchError(f"{flag} {folder}: cannot lock the directory "
                                     f"({exc.strerror or exc})") from None
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
            holder = f" (pid {pid})" if pid.isdigit() else ""
            raise SpecbatchError(f"{flag} {folder}: another {what}{holder} is running on it; "
                                 "wait for it to finish or choose another directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
