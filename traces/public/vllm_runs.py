"""Measured vLLM serving runs: the importer of a run folder and the bundled suite.

A run folder holds what LLMServingSim's ``bench`` recorder writes for one real vLLM server
run (``bench/core/recorder.py`` of casys-kaist/LLMServingSim):

``requests.jsonl`` (or ``requests.jsonl.gz``)
    one JSON object per request: ``input_toks``, ``output_toks`` (integers >= 1),
    ``arrival_time`` (wall-clock epoch seconds), ``queued_ts``, ``scheduled_ts``,
    ``first_token_ts``, ``last_token_ts`` (vLLM's ``RequestStateStats``: the engine core's
    monotonic clock, seconds).
``meta.json``
    the run: ``model``, ``vllm_version``, ``engine_kwargs`` (the settings passed to the
    engine), and in newer runs ``kv_cache`` (what vLLM allocated: ``num_gpu_blocks``,
    ``block_size``, ...), ``hardware`` (``device_name``, ...) and ``resolved_config`` (vLLM's
    whole resolved ``VllmConfig``).
``timeseries.csv``
    the stat logger's ticks: ``t`` (s), ``prompt_throughput``, ``gen_throughput`` (tok/s),
    ``running``, ``waiting`` (requests), ``kv_cache_pct``.
``config.json`` (optional)
    the served model's Hugging Face config.

Clocks: ``arrival_time`` is epoch time while the lifecycle stamps are monotonic, so (as the
recorder's own validator does) a request's arrival is its ``queued_ts`` and every time in
:class:`VllmRun` is seconds after the first request's ``queued_ts``. Requests are sorted by
arrival (stable: a data-parallel run's file is not quite in order). Checked, each a one-line
error naming the file, line and field: ``0 <= queued <= scheduled <= first_token <=
last_token``; token counts from 1 to MAX_TOKENS; each request once (its ``request_id``); every
stamp inside the run (its recorded length, :func:`max_span`); a positive span. meta.json's
``schema_version`` must be the one this reader knows (1) or absent.

Bundled runs live in ``traces/data/vllm_runs/<name>/`` with ``PROVENANCE.json`` (repository,
commit, source path and git blob of every file, licence); see docs/fidelity.md.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require

if TYPE_CHECKING:  # read where a run is read, not at import (the cost resolver imports this)
    import pandas as pd

#: Where the bundled runs live.
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "data" / "vllm_runs"
#: Integer fields of a request line, and its timestamp fields (seconds).
INT_FIELDS = ("input_toks", "output_toks")
TIME_FIELDS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
#: Columns timeseries.csv must have.
TIMESERIES_COLUMNS = ("t", "running", "waiting")
#: Most tokens one request line may give (no model's context comes near; a larger count is a
#: damaged file, not a request).
MAX_TOKENS = 2**31 - 1
#: The meta.json schema this reader knows (the recorder's ``schema_version``).
SCHEMA_VERSION = 1
#: Slack on the run's recorded length when checking its stamps: max(SPAN_SLACK_S, SPAN_SLACK x
#: length) (wall-clock start/finish against the engine's monotonic stamps; the bundled runs'
#: requests span 92.6-99.7 % of it).
SPAN_SLACK_S = 10.0
SPAN_SLACK = 0.1


@dataclass(frozen=True)
class VllmRun:
    """One measured run. ``requests`` columns (one row per request, by arrival): prompt_len,
    output_len, arrival, scheduled, first_token, finish (seconds after the first arrival), line
    (its line in requests.jsonl)."""

    name: str
    path: Path
    requests: pd.DataFrame
    meta: dict
    timeseries: pd.DataFrame  # t, running, waiting (+ the other columns the file has)
    model_config: Path | None  # the folder's config.json, if any
    gpu: str | None = None  # hardware preset named by PROVENANCE.json (bundled runs)
    kind: str | None = None  # "dense" or "moe" (bundled runs)
    anchor: dict | None = None  # the anchor simulator's published summary (metric -> row)

    @property
    def requests_file(self) -> Path:
        """The folder's requests.jsonl, or requests.jsonl.gz when only that exists."""
        return requests_file(self.path)


def _where(path: Path, line: int | None = None) -> str:
    return f"vLLM run file {path}" + (f" line {line}" if line is not None else "")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _request_lines(path: Path) -> list[str]:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                return fh.read().splitlines()
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SpecbatchError(f"{_where(path)}: expected an existing file, got no such file") \
            from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise SpecbatchError(f"{_where(path)}: expected readable UTF-8 JSON lines, got "
                             f"{str(exc).splitlines()[0]}") from None


def _request_row(text: str, path: Path, line: int) -> tuple:
    """(input_toks, output_toks, queued, scheduled, first, last) of one line: integers in
    1..MAX_TOKENS, stamps finite and >= 0 (a monotonic clock's seconds) in lifecycle order."""
    where = _where(path, line)
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SpecbatchError(f"{where}: expected a JSON object, got {str(exc).splitlines()[0]}") \
            from None
    require(isinstance(obj, dict), f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in INT_FIELDS:
        v = obj.get(key)
        require(_number(v) and v == int(v) and 1 <= v <= MAX_TOKENS,
                f"{where}: field {key}: expected an integer from 1 to {MAX_TOKENS}, got {v!r}")
    for key in TIME_FIELDS:
        v = obj.get(key)
        require(_number(v) and v >= 0, f"{where}: field {key}: expected seconds of the "
                f"engine's monotonic clock (a finite number >= 0), got {v!r}")
    stamps = [float(obj[k]) for k in TIME_FIELDS]
    for before, key, value in zip(stamps, TIME_FIELDS[1:], stamps[1:]):
        require(before <= value, f"{where}: field {key}: expected queued_ts <= scheduled_ts <= "
                f"first_token_ts <= last_token_ts, got {value!r} after {before!r}")
    q, s, f, e = stamps
    return int(obj["input_toks"]), int(obj["output_toks"]), q, s, f, e, obj.get("request_id")


def _check_duplicates(rows: list[tuple], texts: list[str], lines: list[int], path: Path) -> None:
    """A request recorded twice (the same request_id, or the same line) is refused: it would
    count twice in every metric."""
    seen: dict = {}
    for row, text, line in zip(rows, texts, lines):
        key = ("id", row[-1]) if row[-1] is not None else ("line", text.strip())
        if key in seen:
            what = (f"field request_id: expected each request once, got {row[-1]!r} again"
                    if key[0] == "id" else "expected each request once, got the same line again")
            raise SpecbatchError(f"{_where(path, line)}: {what} (first on line {seen[key]})")
        seen[key] = line


def _check_span(arr: np.ndarray, lines: list[int], path: Path, max_span: float | None) -> None:
    """Stamps within one run: every stamp within ``max_span`` seconds of the median queue time
    and of each other (a run that lasted ``max_span`` cannot hold a request outside it), and
    the run spanning a positive time (else every rate is 0 / 0)."""
    # arr: [N, 4] queued, scheduled, first, last
    if max_span is not None:
        centre = float(np.median(arr[:, 0]))
        far = np.abs(arr - centre)  # [N, 4]
        row, col = np.unravel_index(int(np.argmax(far)), far.shape)
        if far[row, col] > max_span:
            raise SpecbatchError(
                f"{_where(path, lines[row])}: field {TIME_FIELDS[col]}: expected a stamp within "
                f"the run ({max_span:.0f} s around the median queued_ts {centre:.3f}), got "
                f"{float(arr[row, col])!r}")
        span = float(arr[:, 3].max() - arr[:, 0].min())
        if span > max_span:
            last, first = int(np.argmax(arr[:, 3])), int(np.argmin(arr[:, 0]))
            row, field = ((last, "last_token_ts") if arr[last, 3] - centre >= centre - arr[first, 0]
                          else (first, "queued_ts"))
            raise SpecbatchError(
                f"{_where(path, lines[row])}: field {field}: expected the requests to span at "
                f"most the run's {max_span:.0f} s, got {span:.3f} s")
    require(bool(arr[:, 3].max() > arr[:, 0].min()),
            f"{_where(path)}: field last_token_ts: expected the run to span a positive time "
            f"(the last last_token_ts after the first queued_ts), got every stamp at "
            f"{float(arr[0, 0])!r}")


def read_requests(path: str | Path, max_span: float | None = None) -> pd.DataFrame:
    """The request table of ``requests.jsonl[.gz]`` (module docstring), times relative to the
    first ``queued_ts``, with each request's ``line`` in the file; a damaged line, a request
    recorded twice or (given the run's length ``max_span`` in seconds) a stamp outside the run
    is a one-line error naming the file, line and field."""
    import pandas as pd

    path = Path(path)
    numbered = [(i + 1, text) for i, text in enumerate(_request_lines(path)) if text.strip()]
    rows = [_request_row(text, path, line) for line, text in numbered]
    require(bool(rows), f"{_where(path)}: expected at least one request line, got none")
    lines = [line for line, _ in numbered]
    _check_duplicates(rows, [text for _, text in numbered], lines, path)
    arr = np.array([r[2:6] for r in rows], dtype=np.float64)  # [N, 4] q, s, f, e
    _check_span(arr, lines, path, max_span)
    t0 = arr[:, 0].min()
    order = np.argsort(arr[:, 0], kind="stable")  # a data-parallel run logs out of order
    return pd.DataFrame({
        "prompt_len": np.array([r[0] for r in rows], dtype=np.int64),
        "output_len": np.array([r[1] for r in rows], dtype=np.int64),
        "arrival": arr[:, 0] - t0, "scheduled": arr[:, 1] - t0,
        "first_token": arr[:, 2] - t0, "finish": arr[:, 3] - t0,
        "line": np.array(lines, dtype=np.int64),
    }).iloc[order].reset_index(drop=True)


def read_meta(path: str | Path) -> dict:
    """``meta.json``: a JSON object with an ``engine_kwargs`` object (one-line errors)."""
    path = Path(path)
    where = _where(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecbatchError(f"{where}: expected an existing file, got no such file") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SpecbatchError(f"{where}: expected a JSON object, got "
                             f"{str(exc).splitlines()[0]}") from None
    require(isinstance(data, dict), f"{where}: expected a JSON object, got "
            f"{type(data).__name__}")
    require(isinstance(data.get("engine_kwargs"), dict),
            f"{where}: field engine_kwargs: expected an object of engine settings, got "
            f"{data.get('engine_kwargs')!r}")
    for key in ("kv_cache", "hardware", "resolved_config"):
        v = data.get(key)
        require(v is None or isinstance(v, dict),
                f"{where}: field {key}: expected an object, got {type(v).__name__}")
    version = data.get("schema_version")
    require(version is None or (type(version) is int and version == SCHEMA_VERSION),
            f"{where}: field schema_version: expected {SCHEMA_VERSION} (the recorder's schema "
            f"this reader knows) or none, got {version!r}")
    run_seconds(data, where)  # started_at / finished_at, when recorded, are checked here
    return data


def run_seconds(meta: dict, where: str = "meta.json") -> float | None:
    """The run's wall-clock length, ``finished_at − started_at`` (ISO 8601 times), or None when
    either is not recorded; a time that does not parse or runs backwards is a one-line error."""
    import datetime

    stamps = []
    for key in ("started_at", "finished_at"):
        v = meta.get(key)
        if v is None:
            return None
        try:
            stamp = datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00"))
        except ValueError:
            raise SpecbatchError(f"{where}: field {key}: expected an ISO 8601 time, got "
                                 f"{v!r}") from None
        stamps.append(stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.timezone.utc))
    seconds = (stamps[1] - stamps[0]).total_seconds()
    require(seconds >= 0, f"{where}: field finished_at: expected a time after started_at "
            f"{meta['started_at']!r}, got {meta['finished_at']!r}")
    return seconds


def read_timeseries(path: str | Path) -> pd.DataFrame:
    """``timeseries.csv``: columns t, running, waiting (numbers >= 0), t increasing."""
    import pandas as pd

    path = Path(path)
    where = _where(path)
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise SpecbatchError(f"{where}: expected an existing file, got no such file") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise SpecbatchError(f"{where}: expected a CSV table, got {str(exc).splitlines()[0]}") \
            from None
    require(len(df) > 0, f"{where}: expected at least one tick row, got only the header")
    for col in TIMESERIES_COLUMNS:
        require(col in df.columns, f"{where}: column {col}: expected it, got columns "
                f"{', '.join(map(str, df.columns))}")
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values < 0)
        require(not bad.any(), f"{where}: column {col}: expected numbers >= 0, got "
                f"{df[col].iloc[int(np.argmax(bad))]!r} in row {int(np.argmax(bad)) + 1}")
        df[col] = values
    require(bool((np.diff(df["t"].to_numpy()) > 0).all()),
            f"{where}: column t: expected increasing tick times")
    return df


#: Summary rows of the anchor's summary.txt: "TTFT Mean   7097.2   6815.7   -4.0%".
_SUMMARY_ROW = re.compile(r"^(TTFT|TPOT|Latency) (Mean|Median|P90|P95|P99)\s+"
                          r"([-\d.]+)\s+([-\d.]+)\s+([-+\d.]+)%\s*$")


def read_anchor_summary(path: str | Path) -> dict:
    """The anchor simulator's published table (``validation/summary.txt``) as
    ``{"ttft_mean": {"measured": ms, "simulated": ms, "error": fraction}, ...}``."""
    names = {"TTFT": "ttft", "TPOT": "tpot", "Latency": "e2e", "Mean": "mean", "Median": "p50",
             "P90": "p90", "P95": "p95", "P99": "p99"}
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        m = _SUMMARY_ROW.match(line.strip())
        if m:
            key = f"{names[m[1]]}_{names[m[2]]}"
            out[key] = {"measured": float(m[3]), "simulated": float(m[4]),
                        "error": float(m[5]) / 100}
    return out


def _provenance() -> dict:
    return json.loads((BUNDLED_DIR / "PROVENANCE.json").read_text(encoding="utf-8"))


def bundled_runs() -> dict[str, dict]:
    """Name -> PROVENANCE.json record of every bundled run, sorted by name."""
    return dict(sorted(_provenance()["runs"].items()))


def run_path(name_or_dir: str | Path) -> tuple[str, Path, dict | None]:
    """(name, folder, provenance record or None) of a bundled name or a run folder."""
    text = str(name_or_dir)
    runs = bundled_runs()
    if text.lower() in runs:
        return text.lower(), BUNDLED_DIR / text.lower(), runs[text.lower()]
    path = Path(text)
    require(path.is_dir(), f"--vllm {text}: expected a run folder (requests.jsonl, meta.json, "
            f"timeseries.csv) or a bundled run ({', '.join(runs)}), got neither")
    return path.name, path, None


def max_span(meta: dict, timeseries: pd.DataFrame, where: str | Path = "meta.json") -> float:
    """Seconds the requests' stamps may span: the run's recorded length (meta.json's
    started_at / finished_at, else the stat logger's last tick plus one tick), with slack
    (SPAN_SLACK_S, SPAN_SLACK)."""
    seconds = run_seconds(meta, str(where))
    if seconds is None:
        tick = meta.get("tick_seconds")
        tick = float(tick) if _number(tick) and tick > 0 else 1.0
        seconds = float(timeseries["t"].iloc[-1]) + tick
    return seconds + max(SPAN_SLACK_S, SPAN_SLACK * seconds)


def requests_file(path: Path) -> Path:
    """``path``/requests.jsonl, or requests.jsonl.gz when only that exists."""
    req = path / "requests.jsonl"
    if not req.is_file() and (path / "requests.jsonl.gz").is_file():
        req = path / "requests.jsonl.gz"
    return req


def load_run(name_or_dir: str | Path) -> VllmRun:
    """Read a run folder or a bundled run by name (module docstring)."""
    name, path, record = run_path(name_or_dir)
    req = requests_file(path)
    config = path / "config.json"
    anchor = path / "anchor_summary.txt"
    meta = read_meta(path / "meta.json")
    timeseries = read_timeseries(path / "timeseries.csv")
    return VllmRun(
        name=name, path=path, meta=meta, timeseries=timeseries,
        requests=read_requests(req, max_span=max_span(meta, timeseries, path / "meta.json")),
        model_config=config if config.is_file() else None,
        gpu=record["gpu"] if record else None, kind=record["kind"] if record else None,
        anchor=read_anchor_summary(anchor) if anchor.is_file() else None)
