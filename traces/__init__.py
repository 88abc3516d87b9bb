"""specbatch traces package: the trace format (``traces/FORMAT.md``), synthetic traces,
capture from live models, latency profiles, model shapes.

The names below are loaded on first use, so importing one light submodule (the model
shapes, for a ``--help``) does not import the trace reader, numpy and pyarrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbatch.lazy import lazy_attributes

if TYPE_CHECKING:
    from specbatch.traces.format import read_trace, resolve_trace, validate_trace, write_trace
    from specbatch.traces.synth import SynthConfig, synth_trace
    from specbatch.traces.trace import (
        FORMAT_NAME,
        FORMAT_VERSION,
        Trace,
        default_meta,
        make_trace,
    )

#: Exported name -> the submodule that defines it.
_EXPORTS = {"FORMAT_NAME": "trace", "FORMAT_VERSION": "trace", "Trace": "trace",
            "default_meta": "trace", "make_trace": "trace", "read_trace": "format",
            "resolve_trace": "format", "validate_trace": "format", "write_trace": "format",
            "SynthConfig": "synth", "synth_trace": "synth"}

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "SynthConfig", "Trace", "default_meta", "make_trace",
           "read_trace", "resolve_trace", "synth_trace", "validate_trace", "write_trace"]


__getattr__ = lazy_attributes(
    __name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()}, globals())
