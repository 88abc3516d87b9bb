"""Workload: which trace requests are simulated, and when they arrive.

N simulated requests (index ``uid`` 0..N-1) each replay one trace request. Selection
(``config.sampling``): "auto" takes the first N trace requests in order when N ≤ R and draws
N with replacement (seeded) when N > R; "in_order" cycles through the trace; "resample"
always draws with replacement. Arrivals (``config.arrival``): "burst" all at t = 0 (the
TETRIS paper's offline setting); "poisson" exponential gaps at ``rate`` req/s; "gamma" Gamma
gaps with mean 1/rate and coefficient of variation ``cv`` (shape 1/cv², cv = 1 is Poisson);
"trace" the recorded offsets of the selected requests (a request replayed twice keeps its
offset). Arrival times are non-decreasing in uid except for "trace", which the engine sorts
(stable, ties by uid). Selection and arrivals use independent streams of ``seed``.

Imported workloads (``config.workload``: a file path, or "example" for the bundled one) decouple
request lengths and arrival times from the acceptance trace. The file is CSV (``.csv``), Parquet
(``.parquet``/``.pq``) or JSON Lines (``.jsonl``/``.ndjson``), one row per request, in arrival
order; or a ``.json`` a user already has: a ShareGPT conversation list or a vLLM ``bench serve``
result file, read into the same columns by :mod:`simulator.workload.imports` (lengths by the
target's local tokenizer or a stated characters-per-token estimate; the bench file's arrivals as
vLLM drew them). Columns (header names match case-insensitively; the aliases in
:data:`COLUMN_ALIASES` cover the Azure LLM inference and BurstGPT exports):

  prompt_len   int >= 1, prompt tokens                                   (required)
  output_len   int >= 1, output tokens to generate                       (required)
  arrival      float seconds >= 0, non-decreasing                        (optional)
  timestamp    used when ``arrival`` is absent: seconds (numbers) or date-times (strings,
               parsed by pandas), non-decreasing; converted to seconds after the first
  category     string, prompt category matched against the trace's       (optional)
  prefix_group requests sharing a prompt prefix (any label; empty = none) (optional)
  prefix_len   int >= 0, tokens of that shared prefix (with prefix_group; vllm-v1 prefix
               caching finds its full blocks cached, simulator.engine.prefix)
  priority     int, vLLM's request priority, smaller first (read under
               ``scheduling_policy = "priority"``; simulator.engine.admission)     (optional)

Other columns are ignored. The simulated requests are the file's first ``requests`` rows
(all of them when the file is shorter; ``sampling`` does not apply). Mapping rule: request i
replays the position-indexed acceptance rows of one trace request, drawn uniformly (seeded by
``seed``, its own stream) among the trace requests of the same category when the file has a
``category`` column and the trace holds that category, else among all trace requests. Prompt
and output lengths come from the file. Output positions t beyond the drawn trace request's
recorded output length L are *wrapped*: position t replays row t mod L. Wrapping keeps every
step a real recorded draft/target pair from the same text (its difficulty profile) instead
of repeating one row (clamping) or changing the file's output length (truncation). The engine
computes the row ``base + t mod L`` of each step from :attr:`Workload.wrap` (L per request), so
no row is copied: memory grows with the request table, not with the positions it replays.
``arrival = "trace"`` uses the file's arrival times (``arrival`` as given, ``timestamp``
relative to the first row; an error when the file has neither); the other arrival kinds draw
as above. :func:`example_workload` generates the
bundled example (``data/workload_example.csv``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.array_cache import content_digest
from specbatch.errors import SpecbatchError, require
from specbatch.limits import MAX_CONTEXT_TOKENS
from specbatch.simulator.workload.plain_csv import kept_lengths_table, lengths_table

if TYPE_CHECKING:  # pandas loads with a workload file's reader, not for a trace's requests
    import pandas as pd

    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.traces.format.trace import Trace

#: The bundled synthetic example (``config.workload = "example"``).
EXAMPLE_WORKLOAD = Path(__file__).resolve().parent / "data" / "workload_example.csv"
#: Accepted header spellings (lower case) of each column, first match wins.
COLUMN_ALIASES = {
    "prompt_len": ("prompt_len", "input_len", "prompt_tokens", "contexttokens", "request tokens"),
    "output_len": ("output_len", "generated_len", "output_tokens", "generatedtokens",
                   "response tokens"),
    "arrival": ("arrival",),
    "timestamp": ("timestamp",),
    "category": ("category",),
    "prefix_group": ("prefix_group",),
    "prefix_len": ("prefix_len",),
    "priority": ("priority",),
}
#: File extensions read by :func:`read_workload_file`.
WORKLOAD_FORMATS = (".csv", ".parquet", ".pq", ".jsonl", ".ndjson", ".json")


@dataclass(frozen=True)
class Workload:
    """The simulated requests. Every array is # [N]."""

    trace_index: np.ndarray  # int64 trace request index replayed by uid
    arrival: np.ndarray  # float64 seconds
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    row_base: np.ndarray  # int64 trace row of output position 0 (trace.offsets[trace_index])
    #: int64 rows L of the replayed trace request: position t reads row row_base + t mod L;
    #: None when every output fits its trace request (position t reads row_base + t)
    wrap: np.ndarray | None = None
    notes: tuple[str, ...] = ()  # how an imported workload was mapped onto the trace
    # int64 shared-prefix group (−1 none; simulator.engine.prefix)
    prefix_group: np.ndarray | None = None
    prefix_len: np.ndarray | None = None  # int64 tokens of that shared prefix
    priority: np.ndarray | None = None  # int64 vLLM's request priority, smaller first (None: 0)

    @property
    def n(self) -> int:
        return int(self.trace_index.shape[0])


def resamples(n: int, n_trace: int, sampling: str) -> bool:
    """Whether N simulated requests are drawn with replacement (else cycled in order)."""
    return sampling == "resample" or (sampling == "auto" and n > n_trace)


def select_requests(n: int, n_trace: int, sampling: str, rng: np.random.Generator) -> np.ndarray:
    """Trace request indices for N simulated requests.  returns # [N] int64"""
    if resamples(n, n_trace, sampling):
        return rng.integers(0, n_trace, size=n).astype(np.int64)
    return (np.arange(n, dtype=np.int64) % n_trace).astype(np.int64)


def sampling_notes(n: int, n_trace: int, sampling: str) -> tuple[str, ...]:
    """One line when the workload departs from the trace's own requests, else none."""
    if resamples(n, n_trace, sampling):
        return (f"the trace has {n_trace} requests; the workload draws {n} of them with "
                f"replacement (sampling = {sampling})",)
    if n > n_trace:
        return (f"the trace has {n_trace} requests; the workload cycles through them to make "
                f"{n} (sampling = {sampling})",)
    return ()


def arrival_times(n: int, kind: str, rate: float, cv: float, rng: np.random.Generator,
                  offsets: np.ndarray | None = None) -> np.ndarray:
    """Arrival time of each simulated request (seconds, first gap counted from 0).

    offsets: # [N] recorded offsets (kind "trace" only)
    returns  # [N] float64
    """
    if kind == "burst":
        return np.zeros(n)
    if kind == "poisson":
        return np.cumsum(rng.exponential(1.0 / rate, size=n))
    if kind == "gamma":
        shape = 1.0 / (cv * cv)
        return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))
    if kind == "trace":
        require(offsets is not None and bool(np.all(np.isfinite(offsets))),
                "config: field arrival: expected a trace with recorded arrival offsets for "
                "arrival = 'trace', got NaN offsets")
        return np.asarray(offsets, dtype=np.float64) - float(np.min(offsets, initial=0.0))
    raise ValueError(f"arrival: unknown kind {kind!r}")


def build_workload(config: SimConfig, trace: Trace) -> Workload:
    """The workload of ``config`` on ``trace`` (deterministic in ``config.seed``)."""
    if config.workload is not None:
        return imported_workload(config, trace)
    select_seq, arrival_seq = np.random.SeedSequence([int(config.seed), 0x5EED]).spawn(2)
    idx = select_requests(int(config.requests), trace.n_requests, config.sampling,
                          np.random.default_rng(select_seq))
    offsets = (
        np.asarray(trace.arrival, dtype=np.float64)[idx] if config.arrival == "trace" else None
    )
    arrival = arrival_times(idx.shape[0], config.arrival, float(config.rate), float(config.cv),
                            np.random.default_rng(arrival_seq), offsets)
    return Workload(
        trace_index=idx,
        arrival=arrival.astype(np.float64),
        prompt_len=np.asarray(trace.prompt_len, dtype=np.int64)[idx],
        output_len=np.asarray(trace.output_len, dtype=np.int64)[idx],
        row_base=np.asarray(trace.offsets, dtype=np.int64)[idx],
        notes=sampling_notes(int(config.requests), int(trace.n_requests), config.sampling),
    )


def resolve_workload(name: str) -> Path:
    """The file ``name`` denotes ("example" is the bundled one)."""
    return EXAMPLE_WORKLOAD if name == "example" else Path(name)


#: Checked workload files kept in this process: (path, suffix, blake2b of the bytes) -> the
#: columns. Keyed on the contents, so an edited file is read again; a ``.json`` file is not
#: kept (its token counts depend on a tokenizer's files besides its own bytes).
_READ: dict[tuple, dict[str, np.ndarray]] = {}
_READ_MAX = 8


def read_workload_file(path: str | Path, tokenizer: str | None = None,
                       seed: int = 0) -> dict[str, np.ndarray]:
    """:func:`read_workload_file_uncached`, once per file contents in a process (the planner
    maps the same file onto every run; a test pins the parity). Returns fresh copies."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in WORKLOAD_FORMATS or suffix == ".json" or not path.is_file():
        return read_workload_file_uncached(path, tokenizer, seed)
    data = path.read_bytes()
    key = (str(path), suffix, content_digest(data))
    got = _READ.get(key)
    if got is None and suffix == ".csv":
        got = kept_lengths_table(data, key[2], COLUMN_ALIASES, MAX_CONTEXT_TOKENS)
    if got is None:
        got = read_workload_file_uncached(path, tokenizer, seed)
        if len(_READ) >= _READ_MAX:
            _READ.pop(next(iter(_READ)))
        _READ[key] = got
    return {name: arr.copy() for name, arr in got.items()}


def read_workload_file_uncached(path: str | Path, tokenizer: str | None = None,
                                seed: int = 0) -> dict[str, np.ndarray]:
    """Read and check a workload file (format: module docstring; a ``.json`` file is a
    ShareGPT list or a vLLM bench serve result, simulator.workload.imports, whose token counts
    use ``tokenizer``'s local tokenizer when it has one and whose arrivals use ``seed``).

    returns prompt_len, output_len # [N] int64; arrival # [N] float64 seconds from the first
    request (NaN when the file has no arrival/timestamp); category # [N] object (None when
    the file has no category column). Raises a one-line :class:`SpecbatchError` naming the
    file and field. A plain CSV of the two length columns (the planner's) is read without
    pandas (:func:`plain_lengths`), the same arrays.
    """
    path = Path(path)
    where = f"workload {path}"
    suffix = path.suffix.lower()
    require(suffix in WORKLOAD_FORMATS, f"{where}: expected a file ending in "
            f"{', '.join(WORKLOAD_FORMATS)}, got {suffix or 'no extension'!r}")
    require(path.is_file(), f"{where}: expected an existing file, got no such file")
    plain = plain_lengths(path) if suffix == ".csv" else None
    if plain is not None:
        return plain
    return read_with_pandas(path, tokenizer, seed)


def plain_lengths(path: Path) -> dict[str, np.ndarray] | None:
    """:func:`read_with_pandas`'s arrays of a plain lengths-and-arrivals CSV read without
    pandas (simulator.workload.plain_csv.lengths_table), or None for any other file."""
    return lengths_table(path.read_bytes(), COLUMN_ALIASES, MAX_CONTEXT_TOKENS)


def read_with_pandas(path: Path, tokenizer: str | None, seed: int) -> dict[str, np.ndarray]:
    """:func:`read_workload_file_uncached` with pandas' readers (any format and layout)."""
    import pandas as pd

    where = f"workload {path}"
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            frame = pd.read_csv(path, encoding="utf-8-sig")  # a byte-order mark is allowed
        elif suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        elif suffix == ".json":
            from specbatch.simulator.workload.imports import read_json_workload

            frame, _ = read_json_workload(path, tokenizer=tokenizer, seed=seed)
        else:
            frame = pd.read_json(path, lines=True)
    except SpecbatchError:
        raise
    except pd.errors.EmptyDataError:
        raise SpecbatchError(
            f"{where}: expected a header and at least one request, got an empty file"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any reader failure is bad input
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecbatchError(
            f"{where}: expected a readable {suffix[1:]} file, got {text}"
        ) from None
    require(len(frame) > 0, f"{where}: expected at least one request row, got none")
    lower = {str(c).strip().lower(): c for c in frame.columns}
    found = {name: next((lower[a] for a in aliases if a in lower), None)
             for name, aliases in COLUMN_ALIASES.items()}
    out: dict[str, np.ndarray] = {}
    for name in ("prompt_len", "output_len"):
        require(found[name] is not None, f"{where}: field {name}: expected a column "
                f"(one of {', '.join(COLUMN_ALIASES[name])}), got none")
        out[name] = _lengths(frame[found[name]], where, name)
    n = len(frame)
    out["arrival"] = np.full(n, np.nan)
    if found["arrival"] is not None:
        out["arrival"] = _times(frame[found["arrival"]], where, "arrival", datetimes=False)
    elif found["timestamp"] is not None:
        out["arrival"] = _times(frame[found["timestamp"]], where, "timestamp", datetimes=True)
    out["category"] = np.full(n, None, dtype=object)
    if found["category"] is not None:
        cat = frame[found["category"]]
        require(not bool(cat.isna().any()), f"{where}: field category: expected a string on "
                f"every row, got a missing value in row {int(np.argmax(cat.isna().to_numpy()))}")
        out["category"] = cat.astype(str).to_numpy(dtype=object)
    if found["prefix_group"] is not None:
        require(found["prefix_len"] is not None, f"{where}: field prefix_len: expected a "
                "column next to prefix_group (the shared prefix's tokens), got none")
        groups = frame[found["prefix_group"]]
        known = groups.notna().to_numpy()
        codes = pd.factorize(groups.astype(str).where(groups.notna()))[0]
        out["prefix_group"] = np.where(known, codes, -1).astype(np.int64)
        out["prefix_len"] = _prefix_lengths(frame[found["prefix_len"]], known, where)
    if found["priority"] is not None:
        out["priority"] = _priorities(frame[found["priority"]], where)
    return out


def _priorities(col: pd.Series, where: str) -> np.ndarray:
    """vLLM's request priorities: an integer in [-2^53, 2^53] on every row (integral floats
    accepted; text, NaN and fractions refused naming the row).  returns # [N] int64"""
    import pandas as pd

    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (np.abs(values) > 2.0**53)
    bad |= np.isfinite(values) & (values != np.floor(values))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = col.iloc[row]
        value = value.item() if hasattr(value, "item") else value  # 0.5, not np.float64(0.5)
        raise SpecbatchError(f"{where}: field priority: expected an integer (smaller is "
                             f"served first), got {value!r} in row {row}")
    return values.astype(np.int64)


def _lengths(col: pd.Series, where: str, name: str) -> np.ndarray:
    """Integer lengths in [1, MAX_CONTEXT_TOKENS] (integral floats accepted): longer than any
    model's window, a 10^12-token output would simulate for days.  returns # [N] int64"""
    import pandas as pd

    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values < 1) | (values != np.floor(values))
    bad |= values > MAX_CONTEXT_TOKENS
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = col.iloc[row]
        value = value.item() if hasattr(value, "item") else value  # 5, not np.int64(5)
        raise SpecbatchError(f"{where}: field {name}: expected integers in [1, 2^24] (tokens; "
                             f"beyond any model's context window), got {value!r} in row {row}")
    return values.astype(np.int64)


def _prefix_lengths(col: pd.Series, grouped: np.ndarray, where: str) -> np.ndarray:
    """Shared-prefix tokens: an integer in [0, 2^53] on every row of a prefix group (a row
    outside every group may leave it empty: 0). Text, NaN, infinities and 1e30 are refused
    naming the row, never read as 0 or INT64_MIN.  returns # [N] int64"""
    import pandas as pd

    numeric = pd.to_numeric(col, errors="coerce")
    values = numeric.to_numpy(dtype=np.float64)
    empty = col.isna().to_numpy()
    bad = (~np.isfinite(values) & ~(empty & ~grouped)) | (values < 0) | (values > 2.0**53)
    bad |= np.isfinite(values) & (values != np.floor(values))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SpecbatchError(f"{where}: field prefix_len: expected an integer in [0, 2^53] (the "
                             f"shared prefix's tokens), got {col.iloc[row]!r} in row {row}")
    return np.where(np.isfinite(values), values, 0).astype(np.int64)


def _times(col: pd.Series, where: str, name: str, datetimes: bool) -> np.ndarray:
    """Seconds, finite, >= 0 (``arrival``), non-decreasing; relative to the first for
    ``timestamp``.  returns # [N] float64"""
    import pandas as pd

    numeric = pd.to_numeric(col, errors="coerce")
    if datetimes and numeric.isna().all() and not col.isna().any():
        try:
            stamps = pd.to_datetime(col)
        except (ValueError, TypeError):
            raise SpecbatchError(f"{where}: field {name}: expected seconds or date-times, got "
                                 f"{col.iloc[0]!r}") from None
        numeric = (stamps - stamps.iloc[0]).dt.total_seconds()
    values = numeric.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if name == "arrival":
        bad |= values < 0
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SpecbatchError(f"{where}: field {name}: expected finite seconds"
                             f"{' >= 0' if name == 'arrival' else ''}, got {col.iloc[row]!r} "
                             f"in row {row}")
    down = np.flatnonzero(np.diff(values) < 0)
    if down.size:
        row = int(down[0]) + 1
        raise SpecbatchError(f"{where}: field {name}: expected non-decreasing times (rows in "
                             f"arrival order), got {col.iloc[row]!r} after {col.iloc[row - 1]!r} "
                             f"in row {row}")
    return values - values[0] if name == "timestamp" else values


def map_to_trace(category: np.ndarray, trace_category: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """The trace request each imported request replays (mapping rule: module docstring).

    category:       # [N] object, None entries = no category
    trace_category: # [R] object
    returns (# [N] int64 trace request indices, number of requests matched by category)
    """
    n, r = category.shape[0], trace_category.shape[0]
    idx = np.empty(n, dtype=np.int64)
    has = np.fromiter((c is not None for c in category), dtype=bool, count=n)
    labels = np.where(has, category, "").astype(str)
    trace_labels = trace_category.astype(str)
    matched = 0
    pool_all = np.ones(n, dtype=bool)
    for label in sorted(set(labels[has].tolist())):
        members = np.flatnonzero(trace_labels == label)
        if members.size == 0:
            continue
        rows = np.flatnonzero(has & (labels == label))
        idx[rows] = members[rng.integers(0, members.size, size=rows.size)]
        pool_all[rows] = False
        matched += rows.size
    rest = np.flatnonzero(pool_all)
    idx[rest] = rng.integers(0, r, size=rest.size)
    return idx, matched


def wrap_lengths(trace: Trace, idx: np.ndarray, output_len: np.ndarray) -> np.ndarray | None:
    """Rows L of each replayed trace request when some output is longer than its L (position
    t then reads row ``offsets[idx] + t mod L``), else None (every position reads
    ``offsets[idx] + t``).

    idx, output_len: # [N] int;  returns # [N] int64 or None
    """
    lens = np.asarray(trace.output_len, dtype=np.int64)[idx]
    return lens if bool(np.any(output_len > lens)) else None


def imported_workload(config: SimConfig, trace: Trace) -> Workload:
    """The workload of ``config.workload`` (a file) mapped onto ``trace`` (module docstring)."""
    path = resolve_workload(config.workload)
    data = read_workload_file(path, tokenizer=str(config.target), seed=int(config.seed))
    total = data["prompt_len"].shape[0]
    n = min(int(config.requests), total)
    data = {name: arr[:n] for name, arr in data.items()}
    select_seq, arrival_seq = np.random.SeedSequence([int(config.seed), 0x5EED, 1]).spawn(2)
    idx, matched = map_to_trace(data["category"], np.asarray(trace.category, dtype=object),
                                np.random.default_rng(select_seq))
    if config.arrival == "trace":
        require(bool(np.all(np.isfinite(data["arrival"]))),
                f"config: field arrival: expected a workload file with an arrival or timestamp "
                f"column for arrival = 'trace', got none in {path}")
    offsets = data["arrival"] if config.arrival == "trace" else None
    arrival = arrival_times(n, config.arrival, float(config.rate), float(config.cv),
                            np.random.default_rng(arrival_seq), offsets)
    output_len = data["output_len"]
    wrapped = int(np.sum(output_len > np.asarray(trace.output_len)[idx]))
    notes = [f"workload {path}: {n} of its {total} requests mapped onto the trace's "
             f"{int(trace.n_requests)} ({matched} by category); {wrapped} outputs longer than "
             "their trace request's replay wrapped rows (position t uses row t mod L)"]
    if int(config.requests) > total:
        notes.append(f"requests = {int(config.requests)} exceeds the workload file's {total} "
                     f"requests; simulating {total}")
    return Workload(
        trace_index=idx, arrival=arrival.astype(np.float64), prompt_len=data["prompt_len"],
        output_len=output_len, row_base=np.asarray(trace.offsets, dtype=np.int64)[idx],
        wrap=wrap_lengths(trace, idx, output_len), notes=tuple(notes),
        prefix_group=data.get("prefix_group"), prefix_len=data.get("prefix_len"),
        priority=data.get("priority"))


def example_workload(n: int = 200, seed: int = 0, rate: float = 2.0) -> pd.DataFrame:
    """The bundled example's table: synthetic, not third-party data.

    Lognormal prompt lengths (median 200, σ 0.8, clipped to [8, 2048]) and output lengths
    (median 120, σ 0.7, clipped to [4, 1024]), Poisson arrivals at ``rate`` req/s (rounded to
    microseconds), categories "prose" (60%), "code" (30%), "math" (10%; no bundled trace
    has it, so those requests fall back to drawing over all trace requests)..
    Regenerate: ``python -c "from specbatch.simulator.workload.arrivals import write_example;
    write_example()"``.
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    prompt = np.clip(np.rint(rng.lognormal(np.log(200), 0.8, n)), 8, 2048).astype(np.int64)
    output = np.clip(np.rint(rng.lognormal(np.log(120), 0.7, n)), 4, 1024).astype(np.int64)
    arrival = np.round(np.cumsum(rng.exponential(1.0 / rate, n)), 6)
    category = rng.choice(np.array(["prose", "code", "math"]), size=n, p=[0.6, 0.3, 0.1])
    return pd.DataFrame({"prompt_len": prompt, "output_len": output, "arrival": arrival,
                         "category": category})


def write_example(path: str | Path = EXAMPLE_WORKLOAD) -> Path:
    """Write :func:`example_workload` as CSV to ``path`` (default: the bundled file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    example_workload().to_csv(path, index=False, float_format="%.6f")
    return path
