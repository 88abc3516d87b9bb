"""specbatch traces package: the trace format (``traces/FORMAT.md``), synthetic traces,
capture from live models, latency profiles, model shapes."""

from specbatch.traces.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Trace,
    default_meta,
    make_trace,
    read_trace,
    resolve_trace,
    validate_trace,
    write_trace,
)
from specbatch.traces.synth import SynthConfig, synth_trace

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SynthConfig",
    "Trace",
    "default_meta",
    "make_trace",
    "read_trace",
    "resolve_trace",
    "synth_trace",
    "validate_trace",
    "write_trace",
]
