"""Where a sweep's runs are computed: in-process, a local process pool, or Dask distributed.

Executors: in-process (``workers=1``), a local process pool (``workers=N``), or Dask
distributed (``scheduler=ADDRESS`` or ``"local"`` for a LocalCluster). Runs are computed where
the executor puts them, results are written by the calling process, so remote Dask workers
need the trace files but no shared output directory.

A runner (:data:`Runner`) maps one resolved config to its summary; the default one,
:func:`simulate_point`, runs the simulator, loading each trace once per process.

Local pool workers die with the process that started them (:func:`die_with_parent`), so a
kill -9 of a sweep leaves no worker behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specbatch.errors import SpecbatchError

if TYPE_CHECKING:
    import pandas as pd

    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.traces.format.trace import Trace

#: A runner maps one resolved config (a plain dict of SimConfig fields) to its summary dict,
#: or to ``(summary, requests_dataframe_or_None)``. It must be picklable (module level).
Runner = Callable[[dict], Any]

_TRACE_CACHE: dict[tuple, Trace] = {}


def _cached_trace(config: SimConfig) -> Trace:
    """Load a run's trace once per process (runs of one sweep share it).

    A named trace is the same for every run; ``"synth"`` depends on the seed and
    ``synth_alpha`` (simulator.run.load_trace), so those are part of the key.
    """
    from specbatch.simulator.run import load_trace

    key = (
        (config.trace, config.seed, config.synth_alpha)
        if config.trace == "synth"
        else (config.trace,)
    )
    if key not in _TRACE_CACHE:
        if len(_TRACE_CACHE) >= 8:
            _TRACE_CACHE.pop(next(iter(_TRACE_CACHE)))
        _TRACE_CACHE[key] = load_trace(config)
    return _TRACE_CACHE[key]

def simulate_point(config: dict) -> tuple[dict, pd.DataFrame]:
    """Run one simulation: the default sweep runner (summary, per-request table)."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import simulate

    cfg = make_config(config)
    result = simulate(cfg, trace=_cached_trace(cfg))
    summary = {k: v for k, v in result.summary.items() if k not in ("policy", "verify")}
    return summary, result.requests

def _call(runner: Runner, config: dict) -> tuple[dict, pd.DataFrame | None, float]:
    start = time.perf_counter()
    out = runner(config)
    summary, requests = out if isinstance(out, tuple) else (out, None)
    return dict(summary), requests, time.perf_counter() - start

def _init_worker(parent: int) -> None:
    """Pool initializer: Ctrl-C is handled by the parent only; die with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)

_PR_SET_PDEATHSIG = 1  # linux/prctl.h

def die_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """End this process (SIGKILL or ``os._exit``) as soon as process ``parent`` is gone.

    Linux: the kernel sends SIGKILL when the parent dies (``prctl(PR_SET_PDEATHSIG)``).
    Elsewhere, or when ``parent`` is not this process's parent: a daemon thread checks every
    ``poll_s`` seconds.
    """
    if os.getppid() == parent and _kill_on_parent_death():
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        return
    threading.Thread(target=_watch_parent, args=(parent, poll_s), daemon=True,
                     name="specbatch-watch-parent").start()

def _kill_on_parent_death() -> bool:
    """Ask Linux for SIGKILL when the parent dies; False where prctl is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False

def _watch_parent(parent: int, poll_s: float) -> None:
    direct = os.getppid() == parent
    while True:
        time.sleep(poll_s)
        if (os.getppid() != parent) if direct else not _alive(parent):
            os._exit(1)

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True

def progress_bar(total: int, enabled: bool, desc: str):
    """A tqdm bar on stderr counting finished runs (hidden when disabled or nothing to run)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled or total == 0, file=sys.stderr, desc=desc,
                unit="run", dynamic_ncols=True, leave=False)


def execute(runner: Runner, todo: list[tuple[str, dict]], done: Callable, *, workers: int = 1,
            scheduler: str | None = None, client: Any = None) -> None:
    """Compute every (key, config) of ``todo`` with ``runner`` and hand each result to
    ``done(key, config, summary, requests, elapsed_s)`` in the calling process: on ``client``
    (a ``distributed.Client``), else on a Dask ``scheduler`` (an address or "local"), else in
    process (``workers=1`` or one run) or on a local pool of ``workers`` processes."""
    if client is not None:
        _run_dask(runner, todo, done, client)
    elif scheduler is not None:
        client, cluster = _dask_client(scheduler, workers)
        try:
            _run_dask(runner, todo, done, client)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    elif workers == 1 or len(todo) <= 1:
        _run_serial(runner, todo, done)
    else:
        _run_pool(runner, todo, done, min(workers, len(todo)))


def _run_serial(runner: Runner, todo: list[tuple[str, dict]], done: Callable) -> None:
    for key, config in todo:
        done(key, config, *_call(runner, config))

def _run_pool(runner: Runner, todo: list[tuple[str, dict]], done: Callable, workers: int) -> None:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                               initargs=(os.getpid(),))
    try:
        futures = {pool.submit(_call, runner, config): (key, config) for key, config in todo}
        for fut in as_completed(futures):
            done(*futures[fut], *fut.result())
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)

#: Seconds a Dask scheduler has to accept a connection and send its handshake, and the
#: ``distributed.comm.timeouts.connect`` of the client that follows.
DASK_CONNECT_TIMEOUT_S = 5.0
#: A scheduler's handshake is a small msgpack dict; a larger first frame is not Dask.
MAX_HANDSHAKE_BYTES = 1 << 20
_ADDRESS_FORMS = "'local', tcp://HOST:PORT or HOST:PORT"


def parse_scheduler_address(scheduler: str) -> tuple[str, int]:
    """``(host, port)`` of a ``tcp://HOST:PORT`` or ``HOST:PORT`` address ("[::1]:8786" for
    IPv6); anything else is a one-line error naming the accepted forms."""
    where = f"--scheduler {scheduler!r}"
    rest = scheduler[len("tcp://"):] if scheduler.startswith("tcp://") else scheduler
    if "://" in rest:
        raise SpecbatchError(f"{where}: expected {_ADDRESS_FORMS} (other schemes are not "
                             "supported)")
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or any(c.isspace() or c in "/@?#" for c in host) \
            or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise SpecbatchError(f"{where}: expected {_ADDRESS_FORMS}")
    return host, int(port)


def _recv_exactly(sock, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 65536))
        if not chunk:
            raise ConnectionError("connection closed before the Dask handshake")
        data += chunk
    return bytes(data)


def check_dask_scheduler(host: str, port: int, timeout: float = DASK_CONNECT_TIMEOUT_S) -> None:
    """Connect to ``host:port`` and read the handshake a Dask scheduler sends first, within
    ``timeout`` seconds per step, refusing a silent peer or a first frame that is too large
    or not a Dask message (Dask's own client would wait on the handshake without a timeout
    and allocate whatever size a frame header announces)."""
    import socket
    import struct

    where = f"--scheduler {host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            (size,) = struct.unpack("<Q", _recv_exactly(sock, 8))
            if not 16 <= size <= MAX_HANDSHAKE_BYTES:
                raise SpecbatchError(f"{where}: not a Dask scheduler (its first frame announces "
                                     f"{size} bytes, a handshake is at most "
                                     f"{MAX_HANDSHAKE_BYTES})")
            payload = _recv_exactly(sock, size)
    except TimeoutError:
        raise SpecbatchError(f"{where}: no Dask handshake within {timeout:g} s (is it a Dask "
                             "scheduler?)") from None
    except OSError as exc:
        raise SpecbatchError(f"{where}: cannot connect: {exc.strerror or exc}") from None
    if not _is_handshake(payload):
        raise SpecbatchError(f"{where}: not a Dask scheduler (its first message is not a Dask "
                             "handshake)")


def _is_handshake(payload: bytes) -> bool:
    """True when ``payload`` is Dask's framed msgpack dict (frame count, lengths, frames)."""
    import struct

    from distributed.protocol import loads

    (count,) = struct.unpack_from("<Q", payload)
    if not 1 <= count <= 16 or len(payload) < 8 * (1 + count):
        return False
    lengths = struct.unpack_from(f"<{count}Q", payload, 8)
    if 8 * (1 + count) + sum(lengths) != len(payload):
        return False
    frames, start = [], 8 * (1 + count)
    for length in lengths:
        frames.append(payload[start:start + length])
        start += length
    try:
        return isinstance(loads(frames, deserialize=False), dict)
    except Exception:  # any decoding failure means the peer is not a Dask scheduler
        return False


def check_scheduler(address: str) -> tuple[str, int] | None:
    """Check a ``--scheduler`` before any work starts: ``None`` for "local", else the
    ``(host, port)`` of a reachable Dask scheduler (one-line error otherwise, within seconds)."""
    if address == "local":
        return None
    host, port = parse_scheduler_address(address)
    check_dask_scheduler(host, port)
    return host, port


def _dask_client(address: str, workers: int):
    try:
        import logging

        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise SpecbatchError(
            "--scheduler needs Dask distributed: pip install 'specbatch[dist]'"
        ) from None
    if address == "local":
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        return Client(cluster), cluster
    host, port = check_scheduler(address)
    timeout = f"{DASK_CONNECT_TIMEOUT_S:g}s"
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": timeout}):
            return Client(f"tcp://{host}:{port}", timeout=timeout), None
    except (OSError, TimeoutError) as exc:
        raise SpecbatchError(f"--scheduler {address}: cannot connect: {exc}") from None

def _run_dask(runner: Runner, todo: list[tuple[str, dict]], done: Callable, client) -> None:
    from distributed import as_completed

    futures = {}
    for key, config in todo:
        fut = client.submit(_call, runner, config, pure=False, key=f"specbatch-run-{key}")
        futures[fut.key] = (fut, key, config)
    try:
        for fut in as_completed([f for f, _, _ in futures.values()]):
            _, key, config = futures[fut.key]
            done(key, config, *fut.result())
    except BaseException:
        client.cancel([f for f, _, _ in futures.values()])
        raise
