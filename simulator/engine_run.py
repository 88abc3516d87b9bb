"""One prepared run on the engine ``config.engine`` picks (simulator.engine.v1.compiled.
choose_engine: the compiled vllm-v1 loop or the numpy engine): the request and step tables as
columns (:func:`run_engine_columns`) or DataFrames (:func:`run_engine`), the step table streamed
to a writer when asked (simulator.step_stream), a progress bar for large runs.

Apart from the run (simulator.run, which prepares the trace, workload, cost model, policy and
KV capacity, then calls this) because it is the engine's side of a run, which tests and the
speedup's AR arm call on inputs prepared already.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from specbatch.simulator.config.sim_config import SimConfig
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.v1.compiled import choose_engine
from specbatch.simulator.engine.v1.driver import CompiledEngine
from specbatch.simulator.metrics import (
    Columns,
    StepTotals,
    frame,
    request_columns,
    step_columns,
)
from specbatch.simulator.policies.registry import Policy
from specbatch.simulator.step_stream import DropSteps, StepWriter
from specbatch.simulator.workload.arrivals import Workload

if TYPE_CHECKING:
    import pandas as pd

    from specbatch.simulator.cost.interface import CostModel
    from specbatch.traces.format.trace import Trace


#: Simulations of at least this many requests show a progress bar when asked to (a run
#: takes ~0.1 ms per request, so smaller ones finish in seconds).
PROGRESS_MIN_REQUESTS = 100_000


def run_engine(config: SimConfig, trace: Trace, workload: Workload, cost: CostModel,
               policy: Policy, capacity: int | None, reference: bool = False,
               progress: str | None = None, stop=None,
               steps_to: StepWriter | DropSteps | None = None,
               engines_ran: list | None = None
               ) -> tuple[pd.DataFrame, pd.DataFrame | StepTotals | None]:
    """Run ``policy`` (built from ``config``) on a prepared workload with ``capacity`` KV
    tokens per replica; returns the request and step tables (DataFrames; the arguments are
    :func:`run_engine_columns`')."""
    requests, steps = run_engine_columns(config, trace, workload, cost, policy, capacity,
                                         reference, progress, stop, steps_to, engines_ran)
    return frame(requests), (frame(steps) if isinstance(steps, dict) else steps)


def run_engine_columns(config: SimConfig, trace: Trace, workload: Workload, cost: CostModel,
                       policy: Policy, capacity: int | None, reference: bool = False,
                       progress: str | None = None, stop=None,
                       steps_to: StepWriter | DropSteps | None = None,
                       engines_ran: list | None = None
                       ) -> tuple[Columns, Columns | StepTotals | None]:
    """:func:`run_engine` with the tables as their columns (simulator.metrics.Columns: no
    pandas).

    progress: a label to show a bar of finished requests on stderr under (large runs only:
    :data:`PROGRESS_MIN_REQUESTS`), or None. stop: the engine's early stop (simulator.engine.core).
    steps_to: stream the step table to this writer as the run goes (simulator.step_stream);
    the second result is then the table's :class:`~simulator.metrics.StepTotals` (None for
    a :class:`~simulator.step_stream.DropSteps`, which keeps no step).
    engines_ran: when a list, the engine that ran ("compiled" or "numpy",
    simulator.engine.v1.compiled.choose_engine under ``config.engine``) is appended.
    """
    with finished_bar(progress if workload.n >= PROGRESS_MIN_REQUESTS else None,
                      workload.n) as bar:
        progress_to = bar.update if bar is not None else None
        ran = choose_engine(config, policy, cost, reference=reference, stop=stop,
                            workload=workload)
        if ran == "compiled":
            engine = CompiledEngine(config, trace, workload, cost, policy, capacity=capacity,
                                    progress=progress_to, stop=stop)
        else:
            engine = Engine(config, trace, workload, cost, policy, capacity=capacity,
                            reference=reference, progress=progress_to, stop=stop)
        if engines_ran is not None:
            engines_ran.append(ran)
        if steps_to is not None:
            engine.rec.step_rows.stream_to(steps_to)
        rec = engine.run()
        del engine  # its per-request state: the tables below need only the records
    if steps_to is None:
        return request_columns(rec, workload, config.client_ttft_s), step_columns(rec)
    rec.step_rows.pack()  # the last rows to the writer
    return request_columns(rec, workload, config.client_ttft_s), steps_to.close()


@contextlib.contextmanager
def finished_bar(label: str | None, total: int) -> Iterator:
    """A tqdm bar on stderr counting finished requests, or None when ``label`` is None."""
    if label is None:
        yield None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=label, unit="req", file=sys.stderr, dynamic_ncols=True,
              leave=False) as bar:
        yield bar
