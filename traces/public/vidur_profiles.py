"""Public per-operation GPU timings in Vidur's profile layout, read into one compact table.

Vidur (microsoft/vidur, MIT) profiles every non-attention operation of one decoder layer on a
GPU (``vidur/profiling/mlp``) and NCCL collectives (``vidur/profiling/collectives``) and writes

- ``compute/<gpu>/<org>/<model>/mlp.csv``: one row per (``num_tokens``,
  ``num_tensor_parallel_workers``) with ``time_stats.<op>.{min,max,mean,median,std}`` in ms
  for the ops :data:`OPS` (embedding, the two norms, QKV projection, rotary, output
  projection, MLP up (gate+up when ``use_gated_mlp``), activation, down, residual add) and the
  shape columns :data:`SHAPE_COLUMNS`; the GEMMs are the per-GPU shards of a tp-way
  Megatron split.
- ``network/<cluster>/{all_reduce,send_recv}.csv``: ``time_stats.<collective>.*`` in ms per
  (``num_workers``, ``devices_per_node``, ``size`` in bytes).

:func:`import_vidur` walks such a folder (Vidur's own ``data/profiling`` or a user's profiler
output in the same layout) and keeps, per (gpu, model, tp, num_tokens, op), the median and
the std only, on the token grid :func:`keep_tokens` (all counts up to 128, then coarser: the
rows left out are the out-of-sample check of interpolation in benchmarks/cost_vs_public.py);
repeated (num_tokens, tp) rows are merged by the median of their medians. Collectives keep
Vidur's own selection (``devices_per_node == num_workers``, one node). A bad file gets one
line naming the file, the column (or row) and what was expected.

:func:`write_public_profiles` writes ``compute.parquet``, ``network.parquet`` and
``PROVENANCE.json`` (repository, commit, licence, every source file with its SHA-256 and row
count) atomically into a result folder; :func:`load_public_profiles` reads them back (the
bundled copy: ``traces/data/profiles/vidur``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.array_cache import cached_arrays, content_digest
from specbatch.errors import SpecbatchError, require

if TYPE_CHECKING:  # read where a profile is read, not at import
    import pandas as pd

#: Vidur's per-layer operations (mlp.csv ``time_stats.<op>``), in execution order.
OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
       "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
#: Ops a model may lack (phi-2's parallel block has one norm): 0 ms when the columns are absent.
OPTIONAL_OPS = ("post_attention_layernorm",)
#: The shape columns every mlp.csv row carries (one layer's per-model dimensions).
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")
COLLECTIVES = ("all_reduce", "send_recv")
BUNDLED = Path(__file__).resolve().parents[1] / "data" / "profiles" / "vidur"
RESULT_KIND = "specbatch-public-profiles"
#: Vidur's public profiles: github.com/microsoft/vidur at this commit (MIT licence).
VIDUR_SOURCE = {"repository": "https://github.com/microsoft/vidur",
                "commit": "7d47513363ec447a741ac5e47241580b47724fbf", "licence": "MIT",
                "copyright": "Copyright (c) Microsoft Corporation"}


@dataclass(frozen=True)
class PublicProfiles:
    """The imported table: ``compute`` [rows: gpu, model, tp, num_tokens, shape columns,
    gated, <op>_ms, <op>_std_ms] and ``network`` [rows: cluster, collective, world,
    size_bytes, median_ms, std_ms]; ``provenance`` as written to PROVENANCE.json."""

    compute: pd.DataFrame
    network: pd.DataFrame
    provenance: dict


def keep_tokens(n: np.ndarray) -> np.ndarray:
    """Mask of the token counts kept: every count <= 128, multiples of 32 to 512, of 64 to
    1024, of 256 to 4096, of 4096 beyond (Vidur measures 1, 2, 4, 8, then every 8 or 32)."""
    n = np.asarray(n)
    return ((n <= 128) | ((n <= 512) & (n % 32 == 0)) | ((n <= 1024) & (n % 64 == 0))
            | ((n <= 4096) & (n % 256 == 0)) | (n % 4096 == 0))


def read_csv(path: Path) -> pd.DataFrame:
    """One CSV, or a one-line error naming it."""
    import pandas as pd

    try:
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise SpecbatchError(f"{path}: cannot read as CSV ({str(exc).splitlines()[0]})") from None


def numeric(frame: pd.DataFrame, path: Path, column: str, positive: bool = False) -> np.ndarray:
    """``frame[column]`` as float64, or a one-line error naming the file, column and row."""
    import pandas as pd

    require(column in frame.columns,
            f"{path}: column {column!r} missing; expected Vidur's layout "
            f"(time_stats.<op>.median/std, {', '.join(SHAPE_COLUMNS)}, num_tokens, ...)")
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | ((values <= 0) if positive else (values < 0))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SpecbatchError(f"{path}: column {column!r} row {row + 2}: expected a finite "
                             f"{'positive' if positive else 'non-negative'} number, got "
                             f"{frame[column].iloc[row]!r}")
    return values


def read_vidur_compute(path: Path, gpu: str, model: str) -> pd.DataFrame:
    """One mlp.csv as rows (gpu, model, tp, num_tokens, shape, gated, <op>_ms, <op>_std_ms)
    on the :func:`keep_tokens` grid, repeated cells merged by the median."""
    import pandas as pd

    raw = read_csv(path)
    require(len(raw) > 0, f"{path}: no rows; expected Vidur's mlp.csv")
    out = {"num_tokens": numeric(raw, path, "num_tokens", positive=True),
           "tp": numeric(raw, path, "num_tensor_parallel_workers", positive=True)}
    for col in SHAPE_COLUMNS:
        out[col] = numeric(raw, path, col, positive=True)
    for key in ("num_tokens", "tp", *SHAPE_COLUMNS):
        require(np.all(out[key] == np.round(out[key])),
                f"{path}: column {key!r}: expected integers")
    require("use_gated_mlp" in raw.columns, f"{path}: column 'use_gated_mlp' missing; "
            "expected Vidur's layout (True/False)")
    gated = raw["use_gated_mlp"].astype(str).str.lower()
    require(bool(gated.isin(("true", "false")).all()),
            f"{path}: column 'use_gated_mlp': expected True or False")
    out["gated"] = (gated == "true").to_numpy()
    for op in OPS:
        if op in OPTIONAL_OPS and f"time_stats.{op}.median" not in raw.columns:
            out[f"{op}_ms"] = out[f"{op}_std_ms"] = np.zeros(len(raw))  # the model has none
            continue
        out[f"{op}_ms"] = numeric(raw, path, f"time_stats.{op}.median", positive=True)
        out[f"{op}_std_ms"] = numeric(raw, path, f"time_stats.{op}.std")
    frame = pd.DataFrame(out)
    keys = ["tp", "num_tokens"]
    shape_cols = [*SHAPE_COLUMNS, "gated"]
    require(len(frame[shape_cols].drop_duplicates()) == 1,
            f"{path}: columns {', '.join(shape_cols)}: expected one model shape per file")
    frame = frame[keep_tokens(frame["num_tokens"].to_numpy())]
    frame = frame.groupby(keys, as_index=False).median()
    frame.insert(0, "model", model)
    frame.insert(0, "gpu", gpu)
    for col in ("tp", "num_tokens", *SHAPE_COLUMNS):
        frame[col] = frame[col].astype(np.int64)
    frame["gated"] = frame["gated"].astype(bool)
    return frame


def read_vidur_network(path: Path, cluster: str) -> pd.DataFrame:
    """One all_reduce.csv / send_recv.csv as rows (cluster, collective, world, size_bytes,
    median_ms, std_ms), single-node rows only (``devices_per_node == num_workers``)."""
    import pandas as pd

    raw = read_csv(path)
    require(len(raw) > 0, f"{path}: no rows; expected Vidur's collective profile")
    require("collective" in raw.columns, f"{path}: column 'collective' missing; expected "
            f"one of {', '.join(COLLECTIVES)}")
    names = raw["collective"].astype(str).unique()
    require(len(names) == 1 and names[0] in COLLECTIVES,
            f"{path}: column 'collective': expected one of {', '.join(COLLECTIVES)}, got "
            f"{', '.join(map(str, names))}")
    name = names[0]
    world = numeric(raw, path, "num_workers", positive=True)
    per_node = numeric(raw, path, "devices_per_node", positive=True)
    frame = pd.DataFrame({
        "world": world, "size_bytes": numeric(raw, path, "size", positive=True),
        "median_ms": numeric(raw, path, f"time_stats.{name}.median", positive=True),
        "std_ms": numeric(raw, path, f"time_stats.{name}.std"),
    })
    frame = frame[(per_node == world) | (name == "send_recv")]
    frame = frame.groupby(["world", "size_bytes"], as_index=False).median()
    frame.insert(0, "collective", name)
    frame.insert(0, "cluster", cluster)
    frame["world"] = frame["world"].astype(np.int64)
    frame["size_bytes"] = frame["size_bytes"].astype(np.int64)
    return frame


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def import_vidur(root: str | Path, source: dict | None = None) -> PublicProfiles:
    """Read every ``compute/<gpu>/<org>/<model>/mlp.csv`` and ``network/<cluster>/*.csv``
    under ``root`` (module docstring); ``source``: repository/commit/licence fields recorded
    in the provenance (None: a user's own profiles, recorded as such)."""
    import pandas as pd

    root = Path(root)
    require(root.is_dir(), f"import-vidur {root}: expected a folder holding Vidur's "
            "compute/<gpu>/<org>/<model>/mlp.csv (and network/<cluster>/all_reduce.csv)")
    compute_files = sorted(root.glob("compute/*/*/*/mlp.csv"))
    network_files = sorted(p for name in COLLECTIVES for p in root.glob(f"network/*/{name}.csv"))
    require(bool(compute_files), f"import-vidur {root}: no compute/<gpu>/<org>/<model>/mlp.csv "
            "found; expected Vidur's data/profiling layout")
    files, compute, network = [], [], []
    for path in compute_files:
        gpu, org, name = path.parts[-4:-1]
        frame = read_vidur_compute(path, gpu.lower(), f"{org}/{name}")
        compute.append(frame)
        files.append({"path": path.relative_to(root).as_posix(), "sha256": sha256(path),
                      "rows_kept": len(frame)})
    for path in network_files:
        frame = read_vidur_network(path, path.parent.name.lower())
        network.append(frame)
        files.append({"path": path.relative_to(root).as_posix(), "sha256": sha256(path),
                      "rows_kept": len(frame)})
    provenance = {
        "format": RESULT_KIND, "version": 1,
        "source": dict(source) if source else {"repository": "user profile (Vidur layout)"},
        "layout": "Vidur data/profiling: compute/<gpu>/<org>/<model>/mlp.csv, "
                  "network/<cluster>/{all_reduce,send_recv}.csv; times in ms",
        "kept": "per (gpu, model, tp, num_tokens, op): median and std of Vidur's repeats; "
                "num_tokens on traces.public.vidur_profiles.keep_tokens; collectives with "
                "devices_per_node == num_workers",
        "files": files,
    }
    net = (pd.concat(network, ignore_index=True) if network else
           pd.DataFrame(columns=["cluster", "collective", "world", "size_bytes", "median_ms",
                                 "std_ms"]))
    return PublicProfiles(pd.concat(compute, ignore_index=True), net, provenance)


def identity(profiles: PublicProfiles) -> str:
    """The result folder's identity: a hash of the source files' contents."""
    digest = hashlib.sha256()
    for f in profiles.provenance["files"]:
        digest.update(f["sha256"].encode())
    return digest.hexdigest()[:16]


def write_public_profiles(profiles: PublicProfiles, out: str | Path, force: bool = False) -> Path:
    """Write ``compute.parquet``, ``network.parquet`` and ``PROVENANCE.json`` into ``out`` as
    one atomic result folder (specbatch.io.result_dir: refuses a folder holding anything else)."""
    from specbatch.io import dumps, result_dir

    with result_dir(out, RESULT_KIND, identity(profiles), force=force) as tmp:
        compact(profiles.compute).to_parquet(tmp / "compute.parquet", index=False,
                                             compression="zstd")
        compact(profiles.network).to_parquet(tmp / "network.parquet", index=False,
                                             compression="zstd")
        (tmp / "PROVENANCE.json").write_text(dumps(profiles.provenance, indent=2) + "\n")
    return Path(out)


def compact(frame: pd.DataFrame) -> pd.DataFrame:
    """Float columns as float32 (Vidur prints ms to 3 decimals: float32 loses nothing)."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == np.float64:
            out[col] = out[col].astype(np.float32)
    return out


#: The columns each table of a result folder must hold.
REQUIRED = {"compute.parquet": (*(f"{op}_ms" for op in OPS), "gpu", "model", "tp", "num_tokens",
                                *SHAPE_COLUMNS, "gated"),
            "network.parquet": ("cluster", "collective", "world", "size_bytes", "median_ms")}


def result_paths(folder: Path) -> dict[str, Path]:
    """The three files of a result folder, checked present and stamped with our format."""
    paths = {name: folder / name for name in (*REQUIRED, "PROVENANCE.json")}
    for path in paths.values():
        require(path.is_file(), f"{path}: missing; expected a folder written by "
                "`specbatch cost import-vidur`")
    return paths


def check_result(paths: dict[str, Path], provenance: object,
                 columns: dict[str, list[str]]) -> None:
    """A one-line error when the provenance is not ours or a table lacks a column."""
    require(isinstance(provenance, dict) and provenance.get("format") == RESULT_KIND,
            f"{paths['PROVENANCE.json']}: expected format {RESULT_KIND!r}")
    for name, required in REQUIRED.items():
        for col in required:
            require(col in columns[name], f"{paths[name]}: column {col!r} missing")


def load_public_profiles(folder: str | Path = BUNDLED) -> PublicProfiles:
    """Read a folder written by :func:`write_public_profiles` (default: the bundled Vidur
    table); a missing or foreign file is a one-line error naming it."""
    import pandas as pd

    folder = Path(folder)
    paths = result_paths(folder)
    try:
        provenance = json.loads(paths["PROVENANCE.json"].read_text())
        compute = pd.read_parquet(paths["compute.parquet"])
        network = pd.read_parquet(paths["network.parquet"])
    except (OSError, ValueError) as exc:
        raise SpecbatchError(f"{folder}: cannot read the public profiles ({exc})") from None
    check_result(paths, provenance, {"compute.parquet": list(compute.columns),
                                     "network.parquet": list(network.columns)})
    return PublicProfiles(compute, network, provenance)


def load_profile_columns(folder: str | Path = BUNDLED) -> dict[str, dict[str, np.ndarray]]:
    """:func:`load_public_profiles` as plain columns, read without pandas (the cost
    resolver's path: a simulate run prices from one cell of these tables and should not pay
    pandas' import): table name (``compute`` / ``network``) -> column -> values [rows], equal
    to the DataFrame's ``to_numpy()`` of each column (strings as object arrays). Read by
    pyarrow from the files' bytes once, then kept in the cache folder by those bytes' digests
    (specbatch.array_cache), so the next process needs no pyarrow either."""
    folder = Path(folder)
    paths = result_paths(folder)
    try:
        data = {name: path.read_bytes() for name, path in paths.items()}
    except OSError as exc:
        raise SpecbatchError(f"{folder}: cannot read the public profiles ({exc})") from None
    kept = cached_arrays("profiles", tuple(content_digest(b) for b in data.values()),
                         (Path(__file__),), lambda: flat_columns(paths, data))
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, values in kept.items():
        table, col = key.split(":", 1)
        out.setdefault(table, {})[col] = (values.astype(object) if values.dtype.kind == "U"
                                          else values)
    return out


def flat_columns(paths: dict[str, Path], data: dict[str, bytes]) -> dict[str, np.ndarray]:
    """The two tables of a result folder's bytes, checked (:func:`check_result`), as
    ``<table>:<column>`` -> values [rows], text as fixed-width strings (storable without
    pickle)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        provenance = json.loads(data["PROVENANCE.json"])
    except ValueError as exc:
        raise SpecbatchError(f"{paths['PROVENANCE.json']}: cannot read as JSON ({exc})") from None
    tables = {}
    for name in REQUIRED:
        try:
            with pq.ParquetFile(io.BytesIO(data[name])) as file:
                tables[name] = file.read()
        except (pa.ArrowException, OSError) as exc:
            raise SpecbatchError(f"{paths[name]}: expected a Parquet file, got an unreadable "
                                 f"one ({str(exc).splitlines()[0] if str(exc) else exc!r})"
                                 ) from None
    check_result(paths, provenance, {name: t.column_names for name, t in tables.items()})
    out = {}
    for name, table in tables.items():
        for col in table.column_names:
            values = column_values(table.column(col))
            out[f"{name.removesuffix('.parquet')}:{col}"] = (
                values.astype(str) if values.dtype == object else values)
    return out


def column_values(column) -> np.ndarray:
    """One Arrow column without nulls as numpy: numbers as their dtype (a copy of the data
    buffer), booleans and strings from Python values; pyarrow's own ``to_numpy`` goes
    through its pandas layer."""
    import pyarrow as pa

    from specbatch.traces.format.parquet_columns import numbers

    arr = column.combine_chunks()
    if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        return numbers(arr).copy()
    return np.array(arr.to_pylist(), dtype=bool if pa.types.is_boolean(arr.type) else object)
