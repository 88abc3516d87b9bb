"""Sweep storage: run keys, one stored result per run, and the manifest.

Every run (point x seed) is a fully resolved :class:`simulator.config.SimConfig`; its result
is stored as ``OUT/points/<key>.json`` (plus ``<key>.requests.parquet``) where ``key`` hashes
the resolved config, the package version and the trace's identity (:func:`trace_fingerprint`),
written atomically. A rerun after a crash or Ctrl-C therefore computes only the missing runs.
``OUT/sweep.json`` (the manifest) records the spec and the ordered run keys.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from specbatch import __version__
from specbatch.errors import SpecbatchError
from specbatch.io import atomic_write, dumps

if TYPE_CHECKING:
    from specbatch.analysis.spec import SweepSpec

#: Per-request columns kept for latency CDFs (others are dropped to keep points small).
#: ``e2e`` = finish − arrival and ``ttft`` = first_token − arrival are derived when absent.
REQUEST_COLUMNS = ("uid", "request_id", "arrival", "first_token", "finish", "e2e", "ttft",
                   "tokens", "output_len", "prompt_len", "category")


def plain(value: Any) -> Any:
    """JSON-friendly form of a config value (tuples -> lists, paths -> str)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)

def run_key(config: Mapping, version: str = __version__, trace_id: str | None = None) -> str:
    """Hash of a resolved config and the package version (the run's file name).

    ``trace_id`` (see :func:`trace_fingerprint`) makes a recaptured trace of the same name
    invalidate the stored runs that used the old one.
    """
    payload = {"config": plain(dict(config)), "version": version}
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

    Identity: a hash of ``meta.json`` and the names and sizes of the trace's files, so a
    recaptured trace under the same name gets new run keys. ``"synth"`` is generated from
    the config itself (its identity is the config).
    """
    if name == "synth":
        from specbatch.traces.synth import SynthConfig

        return "synth", SynthConfig().depth
    from specbatch.traces.format import resolve_trace

    path = Path(resolve_trace(name))
    digest = hashlib.sha256()
    meta = (path / "meta.json").read_bytes()
    digest.update(meta)
    for item in sorted(path.iterdir()):
        if item.is_file() and item.name != "meta.json":
            digest.update(f"{item.name}:{item.stat().st_size}".encode())
    return digest.hexdigest()[:16], int(json.loads(meta)["depth"])

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
        requests = requests.copy()
        if "e2e" not in requests and {"finish", "arrival"} <= set(requests.columns):
            requests["e2e"] = requests["finish"] - requests["arrival"]
        if "ttft" not in requests and {"first_token", "arrival"} <= set(requests.columns):
            requests["ttft"] = requests["first_token"] - requests["arrival"]
        cols = [c for c in REQUEST_COLUMNS if c in requests.columns]
        frame = requests[cols].reset_index(drop=True)
        atomic_write(requests_path(out, key), lambda tmp: frame.to_parquet(tmp, index=False))
    record = {"key": key, "version": __version__, "config": config,
              "summary": plain(summary), "elapsed_s": round(elapsed_s, 6)}
    atomic_write(point_path(out, key), json.dumps(record, indent=1, allow_nan=True).encode())
    return key

def load_point(out: str | os.PathLike, key: str) -> dict | None:
    """A stored run's record, or None when it is missing or unreadable (then it is rerun)."""
    path = point_path(out, key)
    try:
        record = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if record.get("key") == key else None

def write_manifest(out: str | os.PathLike, spec: SweepSpec, keys: list[str]) -> None:
    """OUT/sweep.json: the spec (axes, seeds, report options) and the ordered run keys."""
    manifest = {
        "name": spec.name, "spec": spec.path, "version": __version__,
        "base": plain(spec.base), "grids": [plain(g) for g in spec.grids],
        "axes": spec.axes, "seeds": list(spec.seeds), "report": spec.report,
        "store_requests": spec.store_requests, "runs": keys,
    }
    atomic_write(Path(out) / "sweep.json", dumps(manifest, indent=1))

def read_manifest(out: str | os.PathLike) -> dict:
    path = Path(out) / "sweep.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecbatchError(f"directory {out}: no sweep.json (not a sweep output directory)") from None
    except json.JSONDecodeError as exc:
        raise SpecbatchError(f"file {path}: not valid JSON: {exc}") from None
