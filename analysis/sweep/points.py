"""Sweep storage: run keys, one stored result per run, and the manifest.

Every run (point x seed) is a fully resolved :class:`simulator.config.sim_config.SimConfig`; its
result is stored as ``OUT/points/<key>.json`` (plus ``<key>.requests.parquet``) where ``key`` hashes
the resolved config, the code's identity (specbatch.code_identity: the package version and
the contents of its code and bundled data) and the trace's identity (:func:`trace_fingerprint`),
written atomically. A rerun after a crash or Ctrl-C therefore computes only the missing runs; a
point file that is unreadable or not a record of its run is recomputed. ``OUT/sweep.json`` (the
manifest) records the spec, its identity (:func:`spec_identity`) and the ordered run keys; a sweep
directory belongs to that one spec (:func:`claim_sweep_dir`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch import __version__
from specbatch.code_identity import code_identity
from specbatch.errors import SpecbatchError, require
from specbatch.io import atomic_write, dumps, jsonable
from specbatch.traces.models.weights import sha256_file

if TYPE_CHECKING:
    import pandas as pd

    from specbatch.analysis.sweep.spec import SweepSpec

#: Per-request columns kept for latency CDFs and the planner's per-replica concurrency and
#: preemptions (analysis.plan.slo); others are dropped to keep points small.
#: ``e2e`` = finish − arrival and ``ttft`` = first_token − arrival are derived when absent.
REQUEST_COLUMNS = ("uid", "request_id", "arrival", "first_token", "finish", "e2e", "ttft",
                   "tokens", "output_len", "prompt_len", "category", "replica", "preemptions")


def plain(value: Any) -> Any:
    """JSON-friendly form of a config value (tuples -> lists, paths -> str)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)

def code_version() -> str:
    """``<package version>+<code identity>`` (specbatch.code_identity): what a stored run
    records and is keyed by."""
    return f"{__version__}+{code_identity()}"

def run_key(config: Mapping, version: str | None = None, trace_id: str | None = None) -> str:
    """Hash of a resolved config and the code that runs it (the run's file name): ``version``
    defaults to :func:`code_version` (the package version and the contents of its code
    and bundled data), so a run stored by other code is never read back.

    ``trace_id`` (see :func:`trace_fingerprint`) makes a recaptured trace of the same name
    invalidate the stored runs that used the old one.
    """
    payload = {"config": plain(dict(config)), "version": version or code_version()}
    if trace_id is not None:
        payload["trace_id"] = trace_id
    blob = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]

def setting_key(config: Mapping) -> str:
    """Hash of a config without its seed: runs of one setting differ only in the seed."""
    rest = {k: v for k, v in config.items() if k != "seed"}
    return hashlib.sha256(json.dumps(plain(rest), sort_keys=True).encode()).hexdigest()[:12]

def trace_fingerprint(name: str) -> tuple[str, int]:
    """(identity, draft depth K) of a trace named in a config, without loading its rows.

    Identity: a hash of every file's name and bytes (:func:`file_digest`, cached by size and
    modification time), so a recaptured or edited trace under the same name gets new run
    keys. ``"synth"`` is generated from the config itself (its identity is the config).
    """
    if name == "synth":
        from specbatch.traces.synth import SynthConfig

        return "synth", SynthConfig().depth
    from specbatch.traces.format.files import read_meta, resolve_trace

    path = Path(resolve_trace(name))
    meta = read_meta(path)  # validated: a damaged meta.json is a one-line error
    digest = hashlib.sha256()
    for item in sorted(path.rglob("*")):
        relative = item.relative_to(path).as_posix()
        if item.is_file() and not any(part.startswith(".") for part in relative.split("/")):
            digest.update(f"{relative}:{file_digest(item)}\n".encode())
    return digest.hexdigest()[:16], int(meta["depth"])

def tree_nodes(name: str) -> int:
    """Non-root nodes per position of a tree trace named in a config (0 for a chain trace),
    from its meta.json."""
    if name == "synth":
        return 0
    from specbatch.traces.format.files import read_meta, resolve_trace

    tree = read_meta(Path(resolve_trace(name))).get("tree")
    return int(tree["nodes_per_position"]) - 1 if isinstance(tree, dict) else 0


#: sha256 of files already hashed in this process, by (path, size, mtime_ns, inode).
_DIGESTS: dict[tuple, str] = {}

def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, computed once per (path, size, mtime, inode) in a process."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _DIGESTS:
        _DIGESTS[key] = sha256_file(path)
    return _DIGESTS[key]

def point_path(out: str | os.PathLike, key: str) -> Path:
    return Path(out) / "points" / f"{key}.json"

def requests_path(out: str | os.PathLike, key: str) -> Path:
    return Path(out) / "points" / f"{key}.requests.parquet"

def store_point(out: str | os.PathLike, config: dict, summary: dict, requests: pd.DataFrame | None,
                elapsed_s: float, key: str | None = None) -> str:
    """Write one run's result atomically (requests table first, the JSON marks completion)."""
    key = key or run_key(config)
    points = Path(out) / "points"
    points.mkdir(parents=True, exist_ok=True)
    if requests is not None:
        atomic_write(requests_path(out, key), request_writer(requests))
    record = {"key": key, "version": code_version(), "config": config,
              "summary": plain(summary), "elapsed_s": round(elapsed_s, 6)}
    atomic_write(point_path(out, key), json.dumps(record, indent=1, allow_nan=True).encode())
    return key

def request_writer(requests: pd.DataFrame | Mapping[str, np.ndarray]):
    """A function writing a run's kept per-request columns (:data:`REQUEST_COLUMNS`, ``e2e``
    and ``ttft`` derived when absent) as Parquet to a path; ``requests`` is a DataFrame or
    its columns (simulator.metrics.Columns, as analysis.plan's runs hand them over).
    All-numeric columns (the simulator's tables) are handed to pyarrow as arrays, skipping
    pandas' conversion (~1.5 ms a run; read back as the same frame: numeric columns, a default
    index; :func:`arrow_column`: the same file bytes as ``pa.table(columns)``, without
    pyarrow's conversion importing pandas); any other column goes through
    ``DataFrame.to_parquet``."""
    have = set(requests)  # a DataFrame's column names, or the keys of its columns
    extra = {}
    if "e2e" not in have and {"finish", "arrival"} <= have:
        extra["e2e"] = np.asarray(requests["finish"]) - np.asarray(requests["arrival"])
    if "ttft" not in have and {"first_token", "arrival"} <= have:
        extra["ttft"] = np.asarray(requests["first_token"]) - np.asarray(requests["arrival"])
    columns = {c: extra[c] if c in extra else np.asarray(requests[c])
               for c in REQUEST_COLUMNS if c in have or c in extra}  # [N] each
    if all(isinstance(v, np.ndarray) and v.dtype.kind in "biuf" for v in columns.values()):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = (pa.Table.from_arrays([arrow_column(v) for v in columns.values()],
                                      names=list(columns)) if columns else pa.table({}))
        return lambda tmp: pq.write_table(table, tmp)
    import pandas as pd

    frame = pd.DataFrame({c: requests[c] if c not in extra else extra[c]
                          for c in columns}).reset_index(drop=True)
    return lambda tmp: frame.to_parquet(tmp, index=False)


def arrow_column(values: np.ndarray):
    """``pa.array(values)`` of a numeric array # [N] (int, uint, float: its buffer wrapped, no
    nulls, NaN kept as NaN, as ``pa.array`` keeps it), without the conversion that imports
    pandas (~0.3 CPU-s of a plan that needs nothing else of it); bools through ``pa.array``
    (bit-packed in Arrow)."""
    import pyarrow as pa

    if values.dtype.kind not in "iuf" or values.ndim != 1:
        return pa.array(values)
    values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("="))
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.shape[0],
                                 [None, pa.py_buffer(values)])


def request_columns(out: str | os.PathLike, key: str) -> dict[str, np.ndarray] | None:
    """A run's stored per-request table as its columns # [N] each (analysis.sweep.runner.
    read_requests' DataFrame's arrays, read without pandas: a file of numeric columns without
    nulls, as :func:`request_writer` writes a simulator's table), or None when the run kept
    none or the file is anything else (read it with read_requests)."""
    path = requests_path(out, key)
    if not path.is_file():
        return None
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path).read()
    except Exception:  # noqa: BLE001 - unreadable: read_requests names the file
        return None
    columns = {}
    for name in table.column_names:
        if name.startswith("__index_level_"):  # a stored pandas index: pandas reads it as one
            return None
        values = numeric_values(table.column(name))
        if values is None:
            return None
        columns[name] = values
    return columns


def numeric_values(column) -> np.ndarray | None:
    """A pyarrow ChunkedArray of ints or floats without nulls as a numpy array # [N] (its
    buffers copied; pyarrow's own ``to_numpy`` imports pandas), else None."""
    import pyarrow as pa

    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)) or column.null_count:
        return None
    dtype = np.dtype(kind.to_pandas_dtype())
    parts = [np.frombuffer(chunk.buffers()[1], dtype=dtype)[chunk.offset:chunk.offset + len(chunk)]
             for chunk in column.chunks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def load_point(out: str | os.PathLike, key: str) -> dict | None:
    """A stored run's record, or None when it is missing, unreadable (truncated, binary) or
    not the record of run ``key`` (then it is rerun and rewritten)."""
    path = point_path(out, key)
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):  # missing, a folder, not UTF-8, not JSON
        return None
    if not (isinstance(record, dict) and record.get("key") == key
            and isinstance(record.get("config"), dict)
            and isinstance(record.get("summary"), dict)):
        return None
    return record

#: The manifest fields that define a spec's runs (its identity; report options are not).
IDENTITY_FIELDS = ("name", "base", "grids", "seeds", "store_requests")

def spec_fields(spec: SweepSpec) -> dict:
    """The manifest's description of ``spec`` (JSON values)."""
    return {"name": spec.name, "base": plain(spec.base), "grids": [plain(g) for g in spec.grids],
            "axes": spec.axes, "seeds": list(spec.seeds), "report": spec.report,
            "store_requests": spec.store_requests}

def spec_identity(fields: Mapping) -> str:
    """Hash of what a spec runs (:data:`IDENTITY_FIELDS` of :func:`spec_fields` or of a
    manifest): its name, base config, grids, seeds and whether per-request tables are kept."""
    blob = json.dumps(jsonable({name: fields.get(name) for name in IDENTITY_FIELDS}),
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

def write_manifest(out: str | os.PathLike, spec: SweepSpec, keys: list[str]) -> None:
    """OUT/sweep.json: the spec (axes, seeds, report options), its identity and the ordered
    run keys."""
    fields = spec_fields(spec)
    manifest = {"name": spec.name, "spec": spec.path, "spec_id": spec_identity(fields),
                "version": code_version(), **fields, "runs": keys}
    atomic_write(Path(out) / "sweep.json", dumps(manifest, indent=1))

#: Names a sweep directory may hold before its manifest exists (a run killed that early).
_PRE_MANIFEST = (".specbatch.lock",)

def claim_sweep_dir(out: str | os.PathLike, spec: SweepSpec) -> None:
    """Refuse ``out`` for ``spec`` unless it is empty or the directory of this same spec
    (one line naming both specs, or what the directory holds instead)."""
    out = Path(out)
    if not out.is_dir():
        return
    if not (out / "sweep.json").exists():
        names = sorted(p.name for p in out.iterdir() if p.name not in _PRE_MANIFEST)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        require(not names, f"--out {out}: holds files that are not a sweep ({shown}); choose "
                "an empty or new directory")
        return
    manifest = read_manifest(out)
    held, wanted = spec_identity(manifest), spec_identity(spec_fields(spec))
    require(held == wanted, f"--out {out}: belongs to sweep {manifest.get('name')!r} (spec "
            f"{manifest.get('spec')}, id {held}), not to sweep {spec.name!r} (spec {spec.path}, "
            f"id {wanted}); choose another directory")

def read_manifest(out: str | os.PathLike) -> dict:
    """OUT/sweep.json, checked to be a sweep manifest (one-line errors)."""
    path = Path(out) / "sweep.json"
    if not path.exists():
        raise SpecbatchError(f"directory {out}: no sweep.json (not a sweep output directory)")
    try:
        manifest = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise SpecbatchError(f"file {path}: expected a sweep manifest (JSON), got "
                             f"{first_line(exc)}") from None
    require(isinstance(manifest, dict), f"file {path}: expected a sweep manifest (a JSON "
            f"object), got {type(manifest).__name__}")
    runs = manifest.get("runs")
    require(isinstance(runs, list) and all(isinstance(k, str) for k in runs),
            f"file {path}: field 'runs': expected a list of run keys")
    require(isinstance(manifest.get("report", {}), dict),
            f"file {path}: field 'report': expected a table of report options")
    return manifest

def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__
