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
arrival (stable: a data-parallel run's file is not quite in order); ``queued <= first_token
<= last_token`` is checked.

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

import numpy as np
import pandas as pd

from specbatch.errors import SpecbatchError, require

#: Where the bundled runs live.
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "data" / "vllm_runs"
#: Integer fields of a request line, and its timestamp fields (seconds).
INT_FIELDS = ("input_toks", "output_toks")
TIME_FIELDS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
#: Columns timeseries.csv must have.
TIMESERIES_COLUMNS = ("t", "running", "waiting")


@dataclass(frozen=True)
class VllmRun:
    """One measured run. ``requests`` columns (one row per request, by arrival): prompt_len,
    output_len, arrival, scheduled, first_token, finish (seconds after the first arrival)."""

    name: str
    path: Path
    requests: pd.DataFrame
    meta: dict
    timeseries: pd.DataFrame  # t, running, waiting (+ the other columns the file has)
    model_config: Path | None  # the folder's config.json, if any
    gpu: str | None = None  # hardware preset named by PROVENANCE.json (bundled runs)
    kind: str | None = None  # "dense" or "moe" (bundled runs)
    anchor: dict | None = None  # the anchor simulator's published summary (metric -> row)


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
    where = _where(path, line)
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SpecbatchError(f"{where}: expected a JSON object, got {str(exc).splitlines()[0]}") \
            from None
    require(isinstance(obj, dict), f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in INT_FIELDS:
        v = obj.get(key)
        require(_number(v) and v == int(v) and v >= 1,
                f"{where}: field {key}: expected an integer >= 1, got {v!r}")
    for key in TIME_FIELDS:
        require(_number(obj.get(key)), f"{where}: field {key}: expected seconds (a finite "
                f"number), got {obj.get(key)!r}")
    q, s, f, e = (float(obj[k]) for k in TIME_FIELDS)
    require(q <= f <= e, f"{where}: field first_token_ts: expected queued_ts <= first_token_ts "
            f"<= last_token_ts, got {q!r}, {f!r}, {e!r}")
    return int(obj["input_toks"]), int(obj["output_toks"]), q, s, f, e


def read_requests(path: str | Path) -> pd.DataFrame:
    """The request table of ``requests.jsonl[.gz]`` (module docstring), times relative to the
    first ``queued_ts``; a damaged line is a one-line error naming the file, line and field."""
    path = Path(path)
    rows = [_request_row(text, path, i + 1) for i, text in enumerate(_request_lines(path))
            if text.strip()]
    require(bool(rows), f"{_where(path)}: expected at least one request line, got none")
    arr = np.array([r[2:] for r in rows], dtype=np.float64)  # [N, 4] q, s, f, e
    t0 = arr[:, 0].min()
    order = np.argsort(arr[:, 0], kind="stable")  # a data-parallel run logs out of order
    return pd.DataFrame({
        "prompt_len": np.array([r[0] for r in rows], dtype=np.int64),
        "output_len": np.array([r[1] for r in rows], dtype=np.int64),
        "arrival": arr[:, 0] - t0, "scheduled": arr[:, 1] - t0,
        "first_token": arr[:, 2] - t0, "finish": arr[:, 3] - t0,
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
    return data


def read_timeseries(path: str | Path) -> pd.DataFrame:
    """``timeseries.csv``: columns t, running, waiting (numbers >= 0), t increasing."""
    path = Path(path)
    where = _where(path)
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise SpecbatchError(f"{where}: expected an existing file, got no such file") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise SpecbatchError(f"{where}: expected a CSV table, got {str(exc).splitlines()[0]}") \
            from None
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


def load_run(name_or_dir: str | Path) -> VllmRun:
    """Read a run folder or a bundled run by name (module docstring)."""
    name, path, record = run_path(name_or_dir)
    req = path / "requests.jsonl"
    if not req.is_file() and (path / "requests.jsonl.gz").is_file():
        req = path / "requests.jsonl.gz"
    config = path / "config.json"
    anchor = path / "anchor_summary.txt"
    return VllmRun(
        name=name, path=path, requests=read_requests(req), meta=read_meta(path / "meta.json"),
        timeseries=read_timeseries(path / "timeseries.csv"),
        model_config=config if config.is_file() else None,
        gpu=record["gpu"] if record else None, kind=record["kind"] if record else None,
        anchor=read_anchor_summary(anchor) if anchor.is_file() else None)
