"""The one error type for user mistakes (bad file, bad field, bad value).

It lives in ``theory`` because every package may raise it and the dependency direction
is ``analysis -> simulator -> traces -> theory``. The CLI root prints it as a single line
``specbatch: error: <message>`` and exits with code 2; it never shows a traceback.
"""

from __future__ import annotations


class SpecbatchError(Exception):
    """A user error: the message says what was wrong, where, and what was expected."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`SpecbatchError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise SpecbatchError(message)
