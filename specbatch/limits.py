"""How big a job or an input may be before it is refused: estimates first, one-line refusals.

Every command that could be asked for more work or memory than a workstation has (a grid of
10^9 runs, a billion prompts, an LP over a huge array) estimates the size before starting and
calls :func:`check_size`; past the limit it raises a one-line
:class:`~specbatch.errors.SpecbatchError` that names the limit and how to lift it: set the
environment variable ``SPECBATCH_ALLOW_LARGE=1`` to run it anyway (a long job then shows its
progress bar as usual).

Memory limits are a fraction of this machine's physical memory (not of what is free at the
moment, so the same command is refused or accepted the same way on every run). The numbers
are deliberately round: they bound what finishes in hours, not what is fast.

This module sits beside :mod:`specbatch.errors` at the bottom of the dependency graph, so any
layer may use it.
"""

from __future__ import annotations

import os
import re

from specbatch.errors import SpecbatchError

#: The largest signed 64-bit integer: seeds, counts and lengths beyond it are refused.
INT64_MAX = 2**63 - 1

#: Environment variable that lifts every limit of this module when set to 1.
ALLOW_ENV = "SPECBATCH_ALLOW_LARGE"

#: Share of physical memory one command may plan to use.
MEMORY_FRACTION = 0.75

#: Runs in one sweep (points x seeds); a run takes ~0.1-10 s, so 10^5 runs is hours to days.
MAX_SWEEP_RUNS = 100_000

#: Prompts a capture reads from ``default:N`` (each is one reference generation).
MAX_PROMPTS = 100_000

#: Random instances per theorem of ``prove`` (~0.1 s each for the whole catalogue).
MAX_PROVE_INSTANCES = 100_000

#: Binary variables of the ``optimum allocate --milp`` twin (N x K), a cvxpy/HiGHS MILP.
MAX_MILP_VARIABLES = 200_000

#: Variables of one exact-optimum LP (``optimum verify --max-variables``, ``optimum multidraft``'s
#: transport LP): HiGHS solves 2^16 in ~15 s and 3^10 (59,049) in ~45 s on a shared 2-core
#: machine; the time grows faster than the size, so past this it is hours, not minutes.
MAX_LP_VARIABLES = 200_000

#: Constraint coefficients of ``optimum tree``'s LP (its build walks each one in Python, and
#: HiGHS's time follows): 2.7e5 took ~3 s, 2.4e6 ~55 s and 5.6e6 ~105 s on float pairs on a
#: shared 2-core machine (exact pairs build slower); V = 6 at depth 6 would be ~1.3e10.
MAX_TREE_LP_NONZEROS = 1_000_000

#: Elementary steps of the exact allocation DP (N x min(C, N K) x K), ~1 ns each vectorised.
MAX_DP_OPERATIONS = 10**11

#: Simulated requests in one run (~0.1-0.2 ms of CPU and ~1 KB each: 10^7 is ~30 minutes and
#: ~10 GB).
MAX_SIMULATED_REQUESTS = 10_000_000

#: Drafted tokens per position (K) of a capture or live run: real drafters use a handful.
MAX_DEPTH = 256

#: Requests (or positions) in one forward pass, and generated tokens per request.
MAX_BATCH = 65_536
MAX_NEW_TOKENS = 1_000_000

#: Tokens in one request's context (KV cache, prompt): beyond any model's window.
MAX_CONTEXT_TOKENS = 2**24

#: Tokens (batch x (kv + query)) of the largest ``profile`` cell without --max-cell-tokens.
MAX_PROFILE_CELL_TOKENS = 16 * 2**20

#: Data-parallel replicas of one simulated deployment (each holds its own engine state).
MAX_REPLICAS = 4096

#: Bytes read from one user-supplied text input (config, spec, pair, values, prompts).
MAX_INPUT_BYTES = 256 * 2**20

#: Nesting depth of a TOML/JSON user input (real files nest a few levels).
MAX_INPUT_DEPTH = 64


def allowed() -> bool:
    """True when ``SPECBATCH_ALLOW_LARGE=1`` lifts the limits."""
    return os.environ.get(ALLOW_ENV, "").strip() == "1"


def physical_memory() -> int:
    """Bytes of physical memory of this machine (0 when the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def memory_limit() -> int:
    """Bytes one command may plan to use: :data:`MEMORY_FRACTION` of physical memory."""
    total = physical_memory()
    return int(MEMORY_FRACTION * total) if total else 2**62


def _human(n: float) -> str:
    if n >= 1e6:
        return f"{n:.3g}".replace("e+0", "e").replace("e+", "e")
    return f"{int(n)}" if float(n).is_integer() else f"{n:g}"


def check_size(what: str, amount: float, limit: float, unit: str, hint: str = "") -> None:
    """Refuse ``amount`` of ``unit`` when it exceeds ``limit`` (unless :func:`allowed`).

    ``what`` names the input (``"--instances"``, ``"spec runs.toml"``); ``hint`` says how to make
    the job smaller. The message names the limit and the environment variable that lifts it.
    """
    if amount <= limit or allowed():
        return
    advice = f"{hint}, or set" if hint else "set"
    raise SpecbatchError(f"{what}: {_human(amount)} {unit} exceeds the limit of {_human(limit)}; "
                         f"{advice} {ALLOW_ENV}=1 to run it anyway")


def check_memory(what: str, nbytes: float, hint: str = "") -> None:
    """Refuse a job whose estimated memory ``nbytes`` exceeds :func:`memory_limit`."""
    limit = memory_limit()
    if nbytes <= limit or allowed():
        return
    gib = 2**30
    advice = f"{hint}, or set" if hint else "set"
    raise SpecbatchError(f"{what}: needs about {nbytes / gib:.3g} GiB of memory, more than the "
                         f"{limit / gib:.3g} GiB limit ({MEMORY_FRACTION:.0%} of this machine's "
                         f"{physical_memory() / gib:.3g} GiB); {advice} {ALLOW_ENV}=1 to run it "
                         "anyway")


def grid_runs(grids: list[dict] | tuple, seeds: int) -> int:
    """Runs of a sweep: Σ over grids of Π axis lengths, times the seeds (no expansion)."""
    total = 0
    for grid in grids:
        points = 1
        for values in grid.values():
            points *= len(values) if isinstance(values, (list, tuple)) else 1
        total += points
    return total * seeds


def check_sweep(what: str, grids: list[dict] | tuple, seeds: int) -> int:
    """Refuse a sweep of more than :data:`MAX_SWEEP_RUNS` runs; return its run count."""
    runs = grid_runs(grids, seeds)
    check_size(what, runs, MAX_SWEEP_RUNS, "runs (points x seeds)",
               "split the grid into several specs")
    return runs


def check_allocation(what: str, n: int, k: int, budget: int, milp: bool) -> None:
    """Refuse an exact allocation (DP over N x min(C, NK) x K; MILP over N x K binaries) that
    cannot finish: the DP table's memory and operations, the MILP's variables."""
    cap = min(budget, n * k)
    check_memory(what, 8.0 * (n + 1) * (cap + k + 1) * 2, "use fewer rows or a smaller budget")
    check_size(what, float(n) * cap * k, MAX_DP_OPERATIONS, "DP operations (N x min(C, NK) x K)",
               "use fewer rows or a smaller budget")
    if milp:
        check_size(f"{what}: --milp", n * k, MAX_MILP_VARIABLES, "binary variables (N x K)",
                   "drop --milp (the DP gives the same optimum)")


def trace_bytes(requests: int, positions_per_request: float, depth: int) -> float:
    """Rough memory of a trace held in numpy: per position row ~6 [K] float64 columns and a
    few scalars, twice over (the arrays and the Parquet/pandas copy being written)."""
    return 2.0 * requests * max(1.0, positions_per_request) * (6 * depth + 4) * 8


def simulation_bytes(requests: int, output_len: float, batch: int, replicas: int = 1) -> float:
    """Rough peak memory of one simulation: per request ~1 KiB (its state and record columns,
    its row of the request table and the table's Parquet copy) plus its share of the step
    rows, at most one step per output token over a batch of ``batch`` requests (the packed
    step log, the step table and its Parquet copy: ~320 B a step).

    Measured: 10^6 requests of an imported workload with outputs of 8-256 tokens at batch 64
    peaked at 1.16 GB (~1 KB per request over a ~200 MB process); simulated positions are
    never materialised (simulator.workload.arrivals), so the trace's size does not scale with it."""
    steps_per_request = max(1.0, output_len) / max(1, batch)
    return requests * (1024.0 + 320.0 * steps_per_request) + 64.0 * replicas


def check_simulation(what: str, requests: int, output_len: float, batch: int,
                     replicas: int = 1) -> None:
    """Refuse a simulation of more than :data:`MAX_SIMULATED_REQUESTS` requests or
    :data:`MAX_REPLICAS` replicas, or whose :func:`simulation_bytes` exceed the memory limit."""
    check_size(f"{what}: field requests", requests, MAX_SIMULATED_REQUESTS,
               "simulated requests", "simulate fewer requests")
    check_size(f"{what}: field replicas", replicas, MAX_REPLICAS, "replicas",
               "simulate fewer replicas")
    check_memory(what, simulation_bytes(requests, output_len, batch, replicas),
                 "simulate fewer requests")


#: The torch devices this project runs on (TPU/XLA and other backends are not supported).
DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?|mps")


def is_supported_device(text: str) -> bool:
    """``text`` names a device this project runs on: cpu, cuda, cuda:N or mps."""
    return isinstance(text, str) and DEVICE_PATTERN.fullmatch(text) is not None
