"""vLLM's data-parallel ranks of a mixture-of-experts model in lockstep (``data_parallel_size``
> 1 with ``enable_expert_parallel``; simulator.cost.features.expert_parallel prices one rank's
pass).

vLLM runs each DP rank of an MoE model as a ``DPEngineCoreProc`` (vllm/v1/engine/core.py).
Its ``run_busy_loop`` takes one engine step per iteration; a rank whose scheduler has nothing
to run while the wave is still running elsewhere (``engines_running``) calls
``execute_dummy_batch`` (vllm/v1/worker/gpu_worker.py: ``_dummy_run(1, uniform_decode=True)``,
a 1-token pass), because every forward pass of the MoE layers is a collective over the DP
group (all-gather / reduce-scatter of the routed tokens): no rank's pass ends before the
slowest rank reaches each layer. The wave ends when no rank has unfinished requests
(``_has_global_unfinished_reqs``, checked every 32 steps; here at once).

Modelled as one step of the whole group, :meth:`Lockstep.start`: at time T every rank composes
its step with its own scheduler (the composer prices its target pass as if the other ranks
carried the same Q, the symmetric price); a rank with nothing to run takes the dummy pass
(n = 1, Σq = 1, no cache). Once all ranks have composed, their token counts Q_r are known:
with CUDA graphs and every Q_r within the captured sizes, vLLM pads every rank's pass (the
dummy's too) to P = max_r padded(Q_r) (vllm/v1/worker/dp_utils.py
``coordinate_batch_across_dp``), so T_tok = N · P; otherwise (a rank runs eager, or no
graphs) nobody is padded and T_tok = Σ_r Q_r. Each rank's target pass is repriced at T_tok
and its padding (:func:`simulator.cost.features.expert_parallel.rank_pass_seconds`); every rank's
step then ends at::

    T + max_r (d_r − t_sym,r + t_r(T_tok))       (d_r: the rank's composed step seconds)

Times the composer stamped in the step (first tokens, finishes, the step row's end: all
after T, every earlier stamp at most T) are moved to that common end; the step row's target
time takes the wait. The dummy pass is not a step row (no request runs in it). Not modelled:
the 32-step lag of the wave's end and the CPU
all-reduce that agrees on each step's token counts. Requests reach the ranks by the
configured ``router`` (``vllm_dp_lb``: vLLM's DP load balancer, simulator.engine.core).
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.cost.features.expert_parallel import (
    largest_graph,
    padded_tokens,
    rank_pass_seconds,
)
from specbatch.simulator.engine.request_state import Row
from specbatch.simulator.engine.steplog import CHUNK

_UID = int(Row.UID)
STEP_END, SCHEDULE = 1, 2  # simulator.engine.core's event kinds (a test pins them)
#: The dummy batch's batch sums (n, Σq, Σc, Σq·c, Σq²): one request, one token, no cache.
DUMMY_SUMS = (1, 1.0, 0.0, 0.0, 1.0)


class PassRecorder:
    """The engine's cost model, recording the batch sums and seconds of every target pass
    priced (the composers' calls) so the group step can reprice them."""

    def __init__(self, cost) -> None:
        self.cost = cost
        self.overhead = cost.overhead
        self.passes: list[tuple[tuple, float]] = []
        self.sums_fast = getattr(cost, "time_from_sums", None)

    def __getattr__(self, name: str):
        if name in ("cost", "__setstate__") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.cost, name)

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray) -> float:
        from specbatch.simulator.cost.interface import batch_sums

        t = float(self.cost.step_time(role, query, kv))
        if role == "target":
            self.passes.append((batch_sums(query, kv), t))
        return t

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float) -> float:
        t = float(self.sums_fast(role, n, sq, skv, sqkv, sqq))
        if role == "target":
            self.passes.append(((n, sq, skv, sqkv, sqq), t))
        return t


class Lockstep:
    """The DP group's step (module docstring) for an :class:`~simulator.engine.core.Engine`."""

    def __init__(self, engine, cost) -> None:
        self.engine = engine
        self.cost = cost  # the model the recorder wraps (repricing goes through it)
        self.recorder = PassRecorder(cost)
        self.scheduled = False

    def busy(self) -> bool:
        return any(rep.busy for rep in self.engine.replicas)

    def wake(self, time: float) -> None:
        """Schedule the group's next step when no rank runs and some rank has work."""
        e = self.engine
        if self.scheduled or self.busy():
            return
        if any(rep.waiting or rep.n_running for rep in e.replicas):
            self.scheduled = True
            e.push(time, SCHEDULE, 0)  # payload unused: the group starts

    def start(self, time: float) -> None:
        """Compose every rank's step at ``time``, reprice the target passes at the step's
        tokens and end every rank together (module docstring)."""
        e = self.engine
        self.scheduled = False
        if self.busy() or not any(rep.waiting or rep.n_running for rep in e.replicas):
            return
        log = e.rec.step_rows
        if len(log.pending) + len(e.replicas) >= CHUNK:  # keep this step's rows unpacked
            log.pack()
        ranks = []
        for rep in e.replicas:
            self.recorder.passes = []
            rows0 = len(log)
            seen = np.concatenate([rep.state[_UID], np.fromiter(rep.waiting, np.int64)])
            duration = e.composer.step(rep, time)
            passes = self.recorder.passes if duration is not None else [(DUMMY_SUMS, None)]
            ranks.append((rep, duration, passes, seen, len(log) - rows0))
        if all(duration is None for _, duration, _, _, _ in ranks):
            return  # nobody can run: no wave (the next arrival or step end wakes the group)
        pad_to, tokens = self.dp_padding([passes for _, _, passes, _, _ in ranks])
        step = max(self.rank_seconds(duration, passes, tokens, pad_to)
                   for _, duration, passes, _, _ in ranks)
        row = len(log) - sum(r[4] for r in ranks)
        for rep, duration, _, seen, rows in ranks:
            if duration is not None:
                self.restamp(seen, time, time + step)
                for j in range(row, row + rows):
                    self.amend(log, j, time + step, step - duration)
                row += rows
            rep.busy = True
            e.push(time + step, STEP_END, rep.index)  # every rank's end, the dummy's too

    def dp_padding(self, by_rank: list) -> tuple[float | None, float]:
        """(pad_to, T_tok) of the step (vllm/v1/worker/dp_utils.py
        ``coordinate_batch_across_dp``: the ranks agree on the CUDA-graph mode, the lowest
        across ranks, and with graphs pad every rank to the largest padded token count).
        Every rank's pass within the captured sizes: all padded to P = max_r padded(Q_r),
        T_tok = N · P; some rank above them (eager): none padded, T_tok = Σ_r Q_r; no graphs
        configured: (None, Σ_r Q_r). One target pass per rank step is assumed (vllm-v1)."""
        qs = [sum(sums[1] for sums, _ in passes) for passes in by_rank]  # [N] tokens
        largest = largest_graph(self.cost)
        if largest is None:
            return None, float(sum(qs))
        if max(qs) > largest:
            return -1.0, float(sum(qs))  # pad_to below every Σq: nobody is padded
        pad = max(padded_tokens(self.cost, q) for q in qs)
        return float(pad), float(pad * len(qs))

    def rank_seconds(self, duration, passes, tokens: float, pad_to: float | None) -> float:
        """A rank's step seconds with its target passes repriced at the step's tokens (and
        the DP padding): a dummy rank's 1-token pass plus the per-step overhead."""
        if duration is None:
            return (rank_pass_seconds(self.cost, DUMMY_SUMS, tokens, pad_to)
                    + self.engine.overhead)
        return duration + sum(rank_pass_seconds(self.cost, sums, tokens, pad_to) - t
                              for sums, t in passes)

    def restamp(self, uids: np.ndarray, start: float, new: float) -> None:
        """Move the first tokens and finishes of ``uids`` the composer stamped in the step
        begun at ``start`` to ``new``: every stamp of an earlier step is at most ``start``
        (the group's steps never overlap), every stamp of this one after it."""
        rec = self.engine.rec
        for arr in (rec.first_token, rec.finish):
            vals = arr[uids]
            hit = vals > start
            if hit.any():
                arr[uids[hit]] = new

    @staticmethod
    def amend(log, j: int, end: float, wait: float) -> None:
        """Row ``j`` of the step log (still pending) ends at ``end``; its target time grows by
        ``wait`` (the repricing and the wait for the slowest rank)."""
        k = j - log.packed
        r = log.pending[k]
        log.pending[k] = r._replace(end=end, target_time=r.target_time + wait)
