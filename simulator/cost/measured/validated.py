"""The validated errors of the cost models (benchmarks/cost_vs_public.py writes them): what
``simulate --json``'s ``cost_source`` reports for a roofline or calibrated run. A module of
its own, so that reading one JSON file does not import the fitting stack of
:mod:`simulator.cost.measured.sources` (pandas and the public profiles: ~0.3 s of a small
run's start-up)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

#: The validated errors (MAPE, mean signed error, rows, the check) per cost model and cell.
VALIDATION = Path(__file__).parent / "data" / "calibrated_validation.json"


@functools.lru_cache(maxsize=8)
def read_errors(path: Path) -> dict:
    """The validated errors a benchmark wrote to ``path`` ({} when absent or unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def validation() -> dict:
    """The validated errors benchmarks/cost_vs_public.py wrote ({} when absent)."""
    return read_errors(VALIDATION)
