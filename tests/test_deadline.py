"""specbatch/deadline.py: the per-call limit on user code, a SIGALRM watchdog in the main
thread that unwinds the call with UserCallTimeout and leaves any outer alarm its deadline."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from specbatch.deadline import (
    DEFAULT_SECONDS,
    UserCallTimeout,
    call_limited,
    limit,
    set_limit,
)


def sleep_forever(swallow: bool = False):
    while True:
        try:
            time.sleep(1000)
        except Exception:  # noqa: BLE001 - a user's broad except must not swallow the limit
            if not swallow:
                raise


def test_a_call_that_returns_in_time_gives_its_value_and_leaves_no_timer():
    assert call_limited(lambda a, b: a + b, 2, 3, seconds=5) == 5
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_call_past_its_limit_is_unwound_even_through_a_broad_except():
    start = time.monotonic()
    with pytest.raises(UserCallTimeout, match=r"did not return within 0.2 s"):
        call_limited(sleep_forever, True, seconds=0.2)
    assert 0.15 < time.monotonic() - start < 2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_its_own_exceptions_pass_through():
    def boom():
        raise ValueError("mine")

    with pytest.raises(ValueError, match="mine"):
        call_limited(boom, seconds=5)


def test_the_default_limit_is_stated_and_adjustable():
    assert limit() == DEFAULT_SECONDS == 60.0
    try:
        set_limit(0.1)
        with pytest.raises(UserCallTimeout, match="0.1 s"):
            call_limited(sleep_forever)
        set_limit(0)  # no limit: the call runs as it is
        assert limit() is None and call_limited(lambda: 7) == 7
    finally:
        set_limit(DEFAULT_SECONDS)


def test_an_outer_alarm_that_comes_first_still_fires_and_the_limit_holds_after():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda s, f: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        start = time.monotonic()
        with pytest.raises(UserCallTimeout):
            call_limited(sleep_forever, seconds=0.4)
        assert len(fired) == 1 and fired[0] - start < 0.35  # the outer deadline, on time
        assert time.monotonic() - start >= 0.35  # then the call's own limit
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_outer_alarm_that_comes_later_is_rearmed_with_what_remains():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda s, f: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        call_limited(time.sleep, 0.1, seconds=1.0)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 4.0 < left < 4.95 and not fired
        assert signal.getsignal(signal.SIGALRM) is not None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_outside_the_main_thread_calls_run_without_a_limit():
    results = []
    worker = threading.Thread(target=lambda: results.append(
        call_limited(lambda: (time.sleep(0.3), "done")[1], seconds=0.1)))
    worker.start()
    worker.join()
    assert results == ["done"]
