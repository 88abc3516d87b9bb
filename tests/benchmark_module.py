"""Benchmark scripts under benchmarks/ are not a package: tests load one as a module by path."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(relative: str) -> ModuleType:
    """The script ``benchmarks/<relative>`` (e.g. ``"scale_bench.py"``, ``"gpu/smollm2.py"``)
    imported as a module named after its file."""
    path = ROOT / "benchmarks" / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
