"""What the engines' parser twins share: their one-line error and reading a config given as a
JSON object or its text (vllm, trtllm, sglang)."""

from __future__ import annotations

import json
from typing import Any

from specbatch.errors import SpecbatchError


def twin_fail(where: str, field: str, expected: str, got: Any) -> None:
    """Raise the one-line error ``WHERE: field F: expected E, got G`` of a twin."""
    raise SpecbatchError(f"{where}: field {field}: expected {expected}, got {got!r}")


def json_object(config: dict | str, where: str) -> dict:
    """``config`` as a dict: a dict itself, or JSON text of one; else the one-line error."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            twin_fail(where, "(json)", "a JSON object", config)
    if not isinstance(config, dict):
        twin_fail(where, "(json)", "a JSON object", config)
    return config
