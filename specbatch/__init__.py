"""specbatch: batch speculative decoding, captured, simulated, optimised and proved.

The public Python API (docs/api.md), importable from ``specbatch`` itself:

- one simulation: :class:`SimConfig` (every knob), :func:`load_config` (a TOML file and/or
  keyword fields, checked), :func:`simulate` -> :class:`SimResult` (``.requests`` and
  ``.steps`` DataFrames, ``.summary`` dict, ``.write(dir)``);
- traces: :func:`read_trace` (a bundled name such as ``"tiny"`` or a directory) ->
  :class:`Trace`;
- sweeps: :func:`load_spec` (a TOML file) or :func:`parse_spec` (a dict) ->
  :func:`run_sweep` (its ``.table`` is one row per run) and :func:`read_results`;
- :class:`SpecbatchError`, the one error type for bad input.

The names load on first use (module ``__getattr__``), so ``import specbatch`` and
``specbatch --help`` import neither pandas nor torch.

Packages, in dependency order (each imports only those to its right):
``cli -> analysis -> {live, simulator} -> traces -> theory -> errors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbatch.lazy import lazy_attributes

#: Public name -> the module that defines it (loaded on first attribute access).
_EXPORTS = {
    "SimConfig": "specbatch.simulator.config.sim_config",
    "load_config": "specbatch.simulator.config.sim_config",
    "SimResult": "specbatch.simulator.sim_result",
    "simulate": "specbatch.simulator.run",
    "Trace": "specbatch.traces.format.trace",
    "read_trace": "specbatch.traces.format.files",
    "SweepSpec": "specbatch.analysis.sweep.spec",
    "load_spec": "specbatch.analysis.sweep.spec",
    "parse_spec": "specbatch.analysis.sweep.spec",
    "SweepOutcome": "specbatch.analysis.sweep.runner",
    "run_sweep": "specbatch.analysis.sweep.runner",
    "read_results": "specbatch.analysis.sweep.runner",
    "SpecbatchError": "specbatch.errors",
}

__all__ = [
    "SimConfig", "SimResult", "SpecbatchError", "SweepOutcome", "SweepSpec", "Trace",
    "__version__", "load_config", "load_spec", "parse_spec", "read_results", "read_trace",
    "run_sweep", "simulate",
]

if TYPE_CHECKING:  # static analysers and IDEs see the real objects
    from specbatch.analysis.sweep.runner import SweepOutcome, read_results, run_sweep
    from specbatch.analysis.sweep.spec import SweepSpec, load_spec, parse_spec
    from specbatch.errors import SpecbatchError
    from specbatch.simulator.config.sim_config import SimConfig, load_config
    from specbatch.simulator.run import simulate
    from specbatch.simulator.sim_result import SimResult
    from specbatch.traces.format.files import read_trace
    from specbatch.traces.format.trace import Trace


_lazy_getattr = lazy_attributes(__name__, _EXPORTS, globals())


def __getattr__(name: str) -> object:
    """``__version__``, read from the installed metadata on first use (importlib.metadata
    costs ~40 ms of every command's start-up), else the lazy exports."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("specbatch")
        except PackageNotFoundError:  # running from a source tree without install
            value = "0.0.0+unknown"
        globals()["__version__"] = value
        return value
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | {"__version__"})
