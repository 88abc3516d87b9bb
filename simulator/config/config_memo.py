"""make_config's memo: the configs a plan builds hundreds of times (~1 ms each: coercion, two
field checks, validate_config), kept by their input values while :func:`remembered_configs`
is on. Only configs that passed are kept; ``where`` only words errors; SimConfig is frozen,
so callers may share one."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from specbatch.simulator.config import checks

#: Configs by :func:`key_of` their input values (None: not remembering).
_MADE: dict[tuple, Any] | None = None
_MADE_MAX = 4096


@contextlib.contextmanager
def remembered_configs():
    """Memoise simulator.config.sim_config.make_config and checks.validate_config inside the
    block (a plan: what validation looks up, the hardware, models, policies and scheduler rows,
    does not change while it runs; outside, a test may change them). Nested blocks share the
    outer memo."""
    global _MADE
    if _MADE is not None:
        yield
        return
    _MADE = {}
    checks.remember_valid(True)
    try:
        yield
    finally:
        _MADE = None
        checks.remember_valid(False)


def key_of(values: Mapping[str, Any]) -> tuple | None:
    """``values`` as a memo key (each value with its type, a float by its repr: ``True``,
    ``1`` and ``1.0``, or ``0.0`` and ``-0.0``, are different inputs); None when not
    remembering or unhashable."""
    if _MADE is None:
        return None
    try:
        key = tuple((k, type(v), repr(v) if isinstance(v, float) else v)
                    for k, v in values.items())
        hash(key)
    except TypeError:
        return None
    return key


def recall(key: tuple | None):
    """The config kept under ``key``, else None."""
    return None if key is None or _MADE is None else _MADE.get(key)


def keep(key: tuple | None, config):
    """``config``, kept under ``key`` while remembering (the oldest dropped past
    :data:`_MADE_MAX`)."""
    if key is not None and _MADE is not None:
        if len(_MADE) >= _MADE_MAX:
            _MADE.pop(next(iter(_MADE)))
        _MADE[key] = config
    return config
