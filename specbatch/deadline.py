"""A time limit on each call into user code: a policy's hooks (``simulate``), a sampler under
test (``conform``).

A user's ``decide`` or ``sample`` that never returns would otherwise hang the command with
no word. :func:`call_limited` runs one call under a watchdog: a ``SIGALRM`` one-shot timer
(``setitimer(ITIMER_REAL)``) armed for the call in the main thread, whose handler raises
:class:`UserCallTimeout` inside the user's frame. The exception unwinds the call like any
other, so the process state (the engine, open files, the result folder's temporary copy)
stays intact and the command ends with its usual one-line error and exit code 2; no thread
is left running and no process is killed.

What it cannot stop: a call blocked inside C code that does not return to the interpreter
(a long BLAS call, a C extension spinning) is stopped only when it returns. It works only in
the main thread of a platform with ``SIGALRM`` (Linux, macOS); elsewhere (a sweep's worker
threads, Windows) calls run without a limit. An outer ``SIGALRM`` timer (pytest-timeout, a
caller's own alarm) keeps its deadline: the watchdog arms for whichever comes first, hands
an outer Python handler its signal, and re-arms what remains of the outer timer after the
call (an outer timer with the default action fires when the call ends).

The limit is :data:`DEFAULT_SECONDS` unless :func:`set_limit` changed it (the CLI's
``--user-timeout``; 0 turns it off).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

#: Seconds one call into user code may take by default. A policy's ``decide`` runs once per
#: engine step and a sampler once per batch of samples: both take milliseconds, so a call
#: past a minute is stuck, not slow.
DEFAULT_SECONDS = 60.0

_limit: list[float | None] = [DEFAULT_SECONDS]


class UserCallTimeout(BaseException):
    """Raised inside a user's call that ran past its limit. A :class:`BaseException`, so a
    user's ``except Exception`` around its own sleep does not swallow it."""

    def __init__(self, seconds: float):
        super().__init__(f"did not return within {seconds:g} s")
        self.seconds = seconds


def set_limit(seconds: float | None) -> None:
    """Set the limit of every later call (None or 0: no limit)."""
    _limit[0] = float(seconds) if seconds else None


def limit() -> float | None:
    """The limit in force, in seconds (None: none)."""
    return _limit[0]


def can_limit() -> bool:
    """Whether this thread can arm the watchdog (the main thread, with SIGALRM)."""
    return (hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread())


def call_limited(fn: Callable[..., Any], *args: Any, seconds: float | None = None) -> Any:
    """``fn(*args)``, raising :class:`UserCallTimeout` if it runs past ``seconds`` (default:
    :func:`limit`) where :func:`can_limit`; anything ``fn`` raises passes through."""
    seconds = limit() if seconds is None else seconds
    if not seconds or not can_limit():
        return fn(*args)
    start = time.monotonic()
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_first = bool(outer_left) and outer_left < seconds and callable(outer_handler)
    fired = [False]  # the outer timer's deadline has been handed on

    def expire(signum, frame):
        elapsed = time.monotonic() - start
        if not outer_first or fired[0] or elapsed >= seconds * (1 - 1e-6):
            raise UserCallTimeout(seconds)
        fired[0] = True  # the outer deadline came first: its handler, then ours re-armed
        signal.setitimer(signal.ITIMER_REAL, max(seconds - elapsed, 1e-6))
        outer_handler(signum, frame)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, outer_left if outer_first else seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_left and not fired[0]:  # what remains of the outer timer (at least 1 µs)
            left = outer_left - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), outer_interval)
        elif fired[0] and outer_interval:  # a repeating outer timer goes on repeating
            signal.setitimer(signal.ITIMER_REAL, outer_interval, outer_interval)
