"""specbatch traces package: the trace format (``traces/FORMAT.md``), synthetic traces,
capture from live models, latency profiles, model shapes.

The names below are loaded on first use, so importing one light submodule (the model
shapes, for a ``--help``) does not import the trace reader, numpy and pyarrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbatch.lazy import lazy_attributes

if TYPE_CHECKING:
    from specbatch.traces.format.files import read_trace, resolve_trace, validate_trace, write_trace
    from specbatch.traces.format.trace import (
        FORMAT_NAME,
        FORMAT_VERSION,
        Trace,
        default_meta,
        make_trace,
    )
    from specbatch.traces.synth import SynthConfig, synth_trace

#: Exported name -> the submodule that defines it.
_EXPORTS = {"FORMAT_NAME": "format.trace", "FORMAT_VERSION": "format.trace",
            "Trace": "format.trace", "default_meta": "format.trace", "make_trace": "format.trace",
            "read_trace": "format.files", "resolve_trace": "format.files",
            "validate_trace": "format.files", "write_trace": "format.files",
            "SynthConfig": "synth", "synth_trace": "synth"}

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "SynthConfig", "Trace", "default_meta", "make_trace",
           "read_trace", "resolve_trace", "synth_trace", "validate_trace", "write_trace"]


__getattr__ = lazy_attributes(
    __name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()}, globals())
