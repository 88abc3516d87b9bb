"""The one error type for user mistakes (bad file, bad field, bad value).

It sits at the bottom of the dependency graph (``cli -> analysis -> {live, simulator} -> traces ->
theory -> errors``) because every package may raise it. The CLI root prints it as a single line
``specbatch: error: <message>`` and exits with code 2; it never shows a traceback.
"""

from __future__ import annotations


class SpecbatchError(Exception):
    """A user error: the message says what was wrong, where, and what was expected."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`SpecbatchError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise SpecbatchError(message)
