"""The end of a streamed ``simulate --out`` run of N requests, without the hour of engine:
peak RSS of what the run does after its last step, on arrays of the engine's sizes.

A run of 10^7 requests takes ~1 h of CPU (benchmarks/scale_bench.py ``--huge``); its memory
is flat while the engine runs (the per-request arrays, one step row group at a time) and
peaks at the end. This script holds the arrays the engine holds at that point, every page
written (workload: trace_index, arrival, prompt_len, output_len, row_base, wrap; engine:
footprint, keys, arrival order; records: 5 count rows, replica, first_token, finish,
preemptions, recomputed: ~152 B a request), then does what the run does after its last step,
with the run's own code: ~2.56 step rows a request (the measured rate) through
:class:`~simulator.step_stream.StepWriter` (the row groups written during the run, the last
one and the summed columns read back at close), the request table, the summary, and
requests.parquet. Values are random (the sizes, not the numbers, set the memory; random
floats compress worse than real ones, so the files are larger than a run's).

Usage: .venv/bin/python benchmarks/scale_end_phase.py [--requests 10000000] [--work DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from specbatch.simulator.engine.steplog import CHUNK
from specbatch.simulator.metrics import request_table, summarize
from specbatch.simulator.step_stream import StepWriter

#: Engine steps per request at outputs 8-256, Poisson 10 req/s (scale_bench's workload).
STEPS_PER_REQUEST = 2.56


def memory() -> str:
    """This process's RSS and peak RSS now."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            fields[line.split(":")[0]] = int(line.split()[1]) / 1024
    return f"RSS {fields['VmRSS']:7.0f} MiB, peak {fields['VmHWM']:7.0f} MiB"


def held_arrays(n: int, rng: np.random.Generator) -> tuple[SimpleNamespace, SimpleNamespace, list]:
    """The workload, the records and the engine's other per-request arrays # [N]."""
    arrival = np.cumsum(rng.exponential(0.1, n))
    w = SimpleNamespace(n=n, trace_index=rng.integers(0, 256, n), arrival=arrival,
                        prompt_len=rng.integers(8, 2048, n), output_len=rng.integers(8, 257, n),
                        row_base=rng.integers(0, 10**5, n), wrap=rng.integers(1, 500, n))
    counts = rng.integers(0, 300, (5, n))  # [5, N] tokens, steps, drafted, verified, accepted
    rec = SimpleNamespace(replica=np.zeros(n, dtype=np.int64), first_token=arrival + 0.5,
                          finish=arrival + 9.0, tokens=counts[0], steps=counts[1],
                          drafted=counts[2], verified=counts[3], accepted=counts[4],
                          preemptions=np.ones(n, dtype=np.int64),
                          recomputed=np.ones(n, dtype=np.int64))
    engine = [w.prompt_len + w.output_len + 4, rng.integers(0, 2**63, n),
              np.argsort(arrival, kind="stable")]  # footprint, keys, arrival order
    return w, rec, engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, default=None, help="folder for the two files")
    args = parser.parse_args(argv)
    n = args.requests
    work = args.work or Path(tempfile.mkdtemp(prefix="scale_end_"))
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    print(f"imports: {memory()}", flush=True)
    w, rec, _engine = held_arrays(n, rng)
    print(f"the run's arrays, {n:,} requests: {memory()}", flush=True)
    writer = StepWriter(work / "steps.parquet")
    steps = int(STEPS_PER_REQUEST * n)
    for start in range(0, steps, CHUNK):
        block = rng.random((14, min(CHUNK, steps - start)))  # [len(STEP_COLUMNS), rows]
        block[0] = 0.0
        block[3:10] = np.floor(block[3:10] * 64)  # counts
        writer.add(block)
    print(f"{steps:,} steps streamed: {memory()}", flush=True)
    totals = writer.close()
    print(f"last row group + summed columns read back: {memory()}", flush=True)
    requests = request_table(rec, w)
    summarize(requests, totals)
    print(f"request table + summary: {memory()}", flush=True)
    requests.to_parquet(work / "requests.parquet", index=False)
    print(f"requests.parquet: {memory()}; {time.process_time():.1f} CPU s; files in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
