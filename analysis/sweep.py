"""What-if sweeps: a TOML grid over simulation-config fields, run locally or on Dask.

A sweep spec is a TOML file::

    name = "tetris-vs-fixed"          # optional, default: the file's stem
    seeds = [0, 1, 2]                 # one run per point and seed (common random numbers)
    store_requests = true             # keep each run's per-request table (latency CDFs)

    [base]                            # SimConfig fields shared by every point
    max_num_seqs = 64
    requests = 512

    [axes]                            # field -> list of values; the grid is their product
    policy = ["fixed", "tetris"]
    num_speculative_tokens = [1, 2, 3]

``[[axes]]`` (an array of tables) gives a union of grids instead, for settings where a field
only matters to some policies (``extra`` to tetris, nothing to ``ar``). An optional
``[report]`` table (``replicate = "tetris"`` or ``"block"``, ``title = "..."``) tells the
report which published numbers to print beside ours.

Every run (point x seed) is a fully resolved :class:`simulator.config.SimConfig`; its result
is stored as ``OUT/points/<key>.json`` (plus ``<key>.requests.parquet``) where ``key`` hashes
the resolved config and the package version, written atomically. A rerun after a crash or
Ctrl-C therefore computes only the missing runs. The tidy table ``OUT/results.parquet`` (and
``.csv``) has one row per run: every config field, then every summary metric, in the spec's
expansion order, so it is identical whichever executor produced it.

Executors: in-process (``workers=1``), a local process pool (``workers=N``), or Dask
distributed (``scheduler=ADDRESS`` or ``"local"`` for a LocalCluster). Runs are computed where
the executor puts them, results are written by the calling process, so remote Dask workers
need the trace files but no shared output directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import signal
import sys
import time
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from specbatch import __version__
from specbatch.errors import SpecbatchError
from specbatch.io import atomic_write, dumps

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: A runner maps one resolved config (a plain dict of SimConfig fields) to its summary dict,
#: or to ``(summary, requests_dataframe_or_None)``. It must be picklable (module level).
Runner = Callable[[dict], Any]

SPEC_KEYS = {"name", "seeds", "store_requests", "base", "axes", "report"}
REPORT_KEYS = {"replicate", "title"}
REPLICATIONS = ("tetris", "block")
#: Per-request columns kept for latency CDFs (others are dropped to keep points small).
#: ``e2e`` = finish − arrival and ``ttft`` = first_token − arrival are derived when absent.
REQUEST_COLUMNS = ("uid", "request_id", "arrival", "first_token", "finish", "e2e", "ttft",
                   "tokens", "output_len", "prompt_len", "category")


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, validated sweep spec (see the module docstring for the file format)."""

    path: str
    name: str
    base: dict
    grids: tuple  # tuple of dicts field -> tuple of values (their union is the sweep)
    seeds: tuple
    store_requests: bool = True
    report: dict = field(default_factory=dict)

    @property
    def axes(self) -> list[str]:
        """Fields varied by at least one grid, in first-seen order."""
        seen: dict[str, None] = {}
        for grid in self.grids:
            for name in grid:
                seen.setdefault(name)
        return list(seen)


@dataclass(frozen=True)
class SweepOutcome:
    """What :func:`run_sweep` did: how many runs in all, computed now, and reused."""

    out: str
    total: int
    computed: int
    reused: int
    elapsed_s: float
    table: pd.DataFrame = field(repr=False)


# ---------------------------------------------------------------------------------------
# Config class and field validation
# ---------------------------------------------------------------------------------------


def default_config_class() -> type:
    """The simulator's :class:`SimConfig` (imported lazily: analysis -> simulator)."""
    from specbatch.simulator.config import SimConfig

    return SimConfig


def _type_ok(value: Any, hint: Any) -> bool:
    """Whether a TOML value fits a (simple) type hint; unknown hints accept anything."""
    if hint is Any or hint is None:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (tuple, list) or hint in (tuple, list):
        return isinstance(value, (list, tuple))
    return True


def _describe(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def config_hints(config_cls: type) -> dict[str, Any]:
    """Field name -> type hint of a config dataclass (strings resolved where possible)."""
    names = [f.name for f in dataclasses.fields(config_cls)]
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # unresolvable annotation: validate names only
        hints = {}
    return {name: hints.get(name, Any) for name in names}


def _check_field(spec_path: str, table: str, name: str, value: Any, hints: dict) -> None:
    if name not in hints:
        known = ", ".join(sorted(hints))
        raise SpecbatchError(
            f"spec {spec_path}: [{table}] field '{name}': unknown config field (known: {known})"
        )
    if not _type_ok(value, hints[name]):
        raise SpecbatchError(
            f"spec {spec_path}: [{table}] field '{name}': expected {_describe(hints[name])}, "
            f"got {value!r}"
        )


def parse_spec(data: Mapping, path: str = "<spec>", config_cls: type | None = None) -> SweepSpec:
    """Validate a spec's TOML contents; every mistake is a one-line SpecbatchError."""
    config_cls = config_cls or default_config_class()
    hints = config_hints(config_cls)
    aliases = _aliases(config_cls)
    unknown = sorted(set(data) - SPEC_KEYS)
    if unknown:
        raise SpecbatchError(
            f"spec {path}: field '{unknown[0]}': unknown top-level key "
            f"(expected one of {', '.join(sorted(SPEC_KEYS))})"
        )
    name = data.get("name", Path(path).stem)
    if not isinstance(name, str) or not name:
        raise SpecbatchError(f"spec {path}: field 'name': expected a non-empty string, got {name!r}")
    store = data.get("store_requests", True)
    if not isinstance(store, bool):
        raise SpecbatchError(f"spec {path}: field 'store_requests': expected true/false, got {store!r}")

    base = data.get("base", {})
    if not isinstance(base, Mapping):
        raise SpecbatchError(f"spec {path}: field 'base': expected a table, got {base!r}")
    base = {aliases.get(key, key): value for key, value in base.items()}
    for key, value in base.items():
        _check_field(path, "base", key, value, hints)
    if "seed" in base and "seeds" in data:
        raise SpecbatchError(f"spec {path}: [base] field 'seed': give either base.seed or seeds, not both")

    seeds = data.get("seeds", [base.get("seed", 0)])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise SpecbatchError(f"spec {path}: field 'seeds': expected a non-empty list of integers >= 0, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise SpecbatchError(f"spec {path}: field 'seeds': duplicate seeds in {seeds!r}")

    raw_axes = data.get("axes", {})
    if isinstance(raw_axes, Mapping):
        raw_grids = [raw_axes]
    elif isinstance(raw_axes, list) and raw_axes and all(isinstance(g, Mapping) for g in raw_axes):
        raw_grids = raw_axes
    else:
        raise SpecbatchError(f"spec {path}: field 'axes': expected a table or an array of tables")
    grids = []
    for grid in raw_grids:
        checked = {}
        for key, values in grid.items():
            key = aliases.get(key, key)
            if key == "seed":
                raise SpecbatchError(f"spec {path}: [axes] field 'seed': use the top-level seeds list")
            if not isinstance(values, list):
                raise SpecbatchError(f"spec {path}: [axes] field '{key}': expected a list of values, got {values!r}")
            if not values:
                raise SpecbatchError(f"spec {path}: [axes] field '{key}': empty axis (expected at least one value)")
            for value in values:
                _check_field(path, "axes", key, value, hints)
            checked[key] = tuple(values)
        grids.append(checked)

    report = data.get("report", {})
    if not isinstance(report, Mapping):
        raise SpecbatchError(f"spec {path}: field 'report': expected a table, got {report!r}")
    bad = sorted(set(report) - REPORT_KEYS)
    if bad:
        raise SpecbatchError(f"spec {path}: [report] field '{bad[0]}': unknown (expected replicate, title)")
    if "replicate" in report and report["replicate"] not in REPLICATIONS:
        raise SpecbatchError(
            f"spec {path}: [report] field 'replicate': expected one of {', '.join(REPLICATIONS)}, "
            f"got {report['replicate']!r}"
        )
    return SweepSpec(
        path=str(path), name=name, base=dict(base), grids=tuple(grids), seeds=tuple(seeds),
        store_requests=store, report=dict(report),
    )


def load_spec(path: str | os.PathLike, config_cls: type | None = None,
              overrides: Mapping | None = None) -> SweepSpec:
    """Read and validate a sweep spec TOML file; ``overrides`` see :func:`apply_overrides`."""
    path = str(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise SpecbatchError(f"spec {path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecbatchError(f"spec {path}: not valid TOML: {exc}") from None
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_spec(data, path, config_cls)


def apply_overrides(data: Mapping, overrides: Mapping) -> dict:
    """Set config fields for every run: into ``[base]``, and off every axis that varied them."""
    data = dict(data)
    data["base"] = {**data.get("base", {}), **overrides}
    axes = data.get("axes", {})
    grids = [axes] if isinstance(axes, Mapping) else list(axes) if isinstance(axes, list) else axes
    if isinstance(grids, list):
        grids = [{k: v for k, v in g.items() if k not in overrides} if isinstance(g, Mapping)
                 else g for g in grids]
        data["axes"] = grids[0] if isinstance(axes, Mapping) else grids
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``FIELD=VALUE`` with VALUE read as a TOML value (bare words are strings)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise SpecbatchError(f"--set {text}: expected FIELD=VALUE, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return name, value


# ---------------------------------------------------------------------------------------
# Expansion and keys
# ---------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON-friendly form of a config value (tuples -> lists, paths -> str)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _factory(config_cls: type) -> Callable[[dict, str], Any]:
    """How to build a validated config: the simulator's ``make_config`` for SimConfig
    (coerces ints to floats, checks ranges and names), the class itself otherwise."""
    module = sys.modules.get(config_cls.__module__)
    make = getattr(module, "make_config", None)
    if make is not None and getattr(module, "SimConfig", None) is config_cls:
        return make
    return lambda values, where: config_cls(**values)


def _aliases(config_cls: type) -> dict[str, str]:
    """Alternative field spellings the config module accepts (``k`` for num_speculative_tokens)."""
    return dict(getattr(sys.modules.get(config_cls.__module__), "ALIASES", {}) or {})


def resolve_config(fields: Mapping, config_cls: type, spec_path: str = "<spec>") -> dict:
    """Build the config (running its own validation) and return all its fields as a dict."""
    try:
        config = _factory(config_cls)(dict(fields), f"spec {spec_path}")
    except SpecbatchError as exc:
        message = str(exc)
        if not message.startswith(f"spec {spec_path}"):
            message = f"spec {spec_path}: {message}"
        raise SpecbatchError(message) from None
    except (TypeError, ValueError) as exc:
        raise SpecbatchError(f"spec {spec_path}: invalid config {dict(fields)!r}: {exc}") from None
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}


def expand(spec: SweepSpec, config_cls: type | None = None) -> list[dict]:
    """All runs of the sweep as resolved config dicts, in a deterministic order.

    Order: grids in file order; within a grid the product of the axes (first axis slowest);
    seeds innermost. A run that two grids both produce appears once (first occurrence).
    """
    config_cls = config_cls or default_config_class()
    runs: list[dict] = []
    seen: set[str] = set()
    for grid in spec.grids:
        names = list(grid)
        for values in itertools.product(*(grid[n] for n in names)):
            for seed in spec.seeds:
                fields = {**spec.base, **dict(zip(names, values)), "seed": seed}
                config = resolve_config(fields, config_cls, spec.path)
                key = run_key(config)
                if key not in seen:
                    seen.add(key)
                    runs.append(config)
    return runs


def run_key(config: Mapping, version: str = __version__, trace_id: str | None = None) -> str:
    """Hash of a resolved config and the package version (the run's file name).

    ``trace_id`` (see :func:`trace_fingerprint`) makes a recaptured trace of the same name
    invalidate the stored runs that used the old one.
    """
    payload = {"config": _plain(dict(config)), "version": version}
    if trace_id is not None:
        payload["trace_id"] = trace_id
    blob = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def setting_key(config: Mapping) -> str:
    """Hash of a config without its seed: runs of one setting differ only in the seed."""
    rest = {k: v for k, v in config.items() if k != "seed"}
    return hashlib.sha256(json.dumps(_plain(rest), sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------
# The default runner (one simulation)
# ---------------------------------------------------------------------------------------

_TRACE_CACHE: dict[tuple, Any] = {}


def _cached_trace(config: Any) -> Any:
    """Load a run's trace once per process (runs of one sweep share it).

    A named trace is the same for every run; ``"synth"`` depends on the seed and
    ``synth_alpha`` (simulator.run.load_trace), so those are part of the key.
    """
    from specbatch.simulator.run import load_trace

    key = (config.trace, config.seed, config.synth_alpha) if config.trace == "synth" else (config.trace,)
    if key not in _TRACE_CACHE:
        if len(_TRACE_CACHE) >= 8:
            _TRACE_CACHE.pop(next(iter(_TRACE_CACHE)))
        _TRACE_CACHE[key] = load_trace(config)
    return _TRACE_CACHE[key]


def simulate_point(config: dict) -> tuple[dict, pd.DataFrame]:
    """Run one simulation: the default sweep runner (summary, per-request table)."""
    from specbatch.simulator.config import make_config
    from specbatch.simulator.run import simulate

    cfg = make_config(config)
    result = simulate(cfg, trace=_cached_trace(cfg))
    summary = {k: v for k, v in result.summary.items() if k not in ("policy", "verify")}
    return summary, result.requests


def _call(runner: Runner, config: dict) -> tuple[dict, pd.DataFrame | None, float]:
    start = time.perf_counter()
    out = runner(config)
    summary, requests = out if isinstance(out, tuple) else (out, None)
    return dict(summary), requests, time.perf_counter() - start


def _ignore_sigint() -> None:  # pool initializer: Ctrl-C is handled by the parent only
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ---------------------------------------------------------------------------------------
# Point storage
# ---------------------------------------------------------------------------------------




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
              "summary": _plain(summary), "elapsed_s": round(elapsed_s, 6)}
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


# ---------------------------------------------------------------------------------------
# Executors
# ---------------------------------------------------------------------------------------


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled or total == 0, file=sys.stderr, desc=desc,
                unit="run", dynamic_ncols=True, leave=False)


def _run_serial(runner: Runner, todo: list[tuple[str, dict]], done: Callable) -> None:
    for key, config in todo:
        done(key, config, *_call(runner, config))


def _run_pool(runner: Runner, todo: list[tuple[str, dict]], done: Callable, workers: int) -> None:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint)
    try:
        futures = {pool.submit(_call, runner, config): (key, config) for key, config in todo}
        for fut in as_completed(futures):
            done(*futures[fut], *fut.result())
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _dask_client(scheduler: str, workers: int):
    try:
        import logging

        from distributed import Client, LocalCluster
    except ImportError:
        raise SpecbatchError(
            "--scheduler needs Dask distributed: pip install 'specbatch[dist]'"
        ) from None
    if scheduler == "local":
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        return Client(cluster), cluster
    try:
        return Client(scheduler, timeout="10s"), None
    except (OSError, TimeoutError) as exc:
        raise SpecbatchError(f"--scheduler {scheduler}: cannot connect: {exc}") from None


def _run_dask(runner: Runner, todo: list[tuple[str, dict]], done: Callable, client) -> None:
    from distributed import as_completed

    futures = {}
    for key, config in todo:
        fut = client.submit(_call, runner, config, pure=False, key=f"specbatch-run-{key}")
        futures[fut.key] = (fut, key, config)
    try:
        for fut in as_completed([f for f, _, _ in futures.values()]):
            _, key, config = futures[fut.key]
            done(key, config, *fut.result())
    except BaseException:
        client.cancel([f for f, _, _ in futures.values()])
        raise


# ---------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------


def write_manifest(out: str | os.PathLike, spec: SweepSpec, keys: list[str]) -> None:
    """OUT/sweep.json: the spec (axes, seeds, report options) and the ordered run keys."""
    manifest = {
        "name": spec.name, "spec": spec.path, "version": __version__,
        "base": _plain(spec.base), "grids": [_plain(g) for g in spec.grids],
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


def preflight(spec: SweepSpec, runs: list[dict]) -> dict[str, str]:
    """Check every run against its trace before anything runs; return trace name -> identity.

    Raises a one-line SpecbatchError naming the spec, the run and the field when a policy
    would draft deeper than the trace's K or a trace does not exist.
    """
    from specbatch.simulator.config import SimConfig, policy_depth

    ids: dict[str, str] = {}
    depths: dict[str, int] = {}
    for config in runs:
        name = config["trace"]
        if name not in ids:
            try:
                ids[name], depths[name] = trace_fingerprint(name)
            except SpecbatchError as exc:
                raise SpecbatchError(f"spec {spec.path}: field 'trace': {exc}") from None
            except (OSError, KeyError, ValueError) as exc:
                raise SpecbatchError(f"spec {spec.path}: field 'trace': cannot read trace "
                                     f"{name!r}: {exc}") from None
        need = policy_depth(SimConfig(**config))
        if need > depths[name]:
            raise SpecbatchError(
                f"spec {spec.path}: field 'num_speculative_tokens': expected k + extra <= the "
                f"trace's draft depth K = {depths[name]} (trace {name!r}), got {need} for policy "
                f"{config['policy']} k = {config['num_speculative_tokens']} e = {config['extra']}")
    return ids


def run_sweep(
    spec: SweepSpec,
    out: str | os.PathLike,
    *,
    workers: int = 1,
    scheduler: str | None = None,
    runner: Runner | None = None,
    config_cls: type | None = None,
    progress: bool = True,
    client: Any = None,
) -> SweepOutcome:
    """Run every missing point x seed of ``spec`` into ``out`` and write the tidy table.

    ``runner`` defaults to :func:`simulate_point`; ``client`` (a ``distributed.Client``)
    overrides ``scheduler``. Raises whatever the runner raises (after storing every run that
    finished first), so the next call resumes.
    """
    if workers < 1:
        raise SpecbatchError(f"--workers: expected an integer >= 1, got {workers}")
    runner = runner or simulate_point
    start = time.perf_counter()
    runs = expand(spec, config_cls)
    ids = preflight(spec, runs) if runner is simulate_point else {}
    keys = [run_key(c, trace_id=ids.get(c.get("trace"))) for c in runs]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, spec, keys)
    todo = [(k, c) for k, c in zip(keys, runs) if load_point(out, k) is None]
    keep_requests = spec.store_requests

    bar = _progress(len(todo), progress, spec.name)

    def done(key, config, summary, requests, elapsed):
        store_point(out, config, summary, requests if keep_requests else None, elapsed, key)
        bar.update(1)

    try:
        if client is not None:
            _run_dask(runner, todo, done, client)
        elif scheduler is not None:
            client, cluster = _dask_client(scheduler, workers)
            try:
                _run_dask(runner, todo, done, client)
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()
        elif workers == 1 or len(todo) <= 1:
            _run_serial(runner, todo, done)
        else:
            _run_pool(runner, todo, done, min(workers, len(todo)))
    finally:
        bar.close()
    table = collect_results(out, keys)
    write_results(out, table)
    return SweepOutcome(out=str(out), total=len(runs), computed=len(todo),
                        reused=len(runs) - len(todo), elapsed_s=time.perf_counter() - start,
                        table=table)


def _cell(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def collect_results(out: str | os.PathLike, keys: Iterable[str] | None = None) -> pd.DataFrame:
    """The tidy table: one row per run (config fields, then metrics), in manifest order.

    Summary keys that clash with a config field (``requests``: the number completed) get a
    ``_result`` suffix. Extra columns: ``run`` (the run key) and ``setting`` (the key without
    the seed, to pair seeds across settings).
    """
    keys = list(keys) if keys is not None else read_manifest(out)["runs"]
    rows = []
    for key in keys:
        record = load_point(out, key)
        if record is None:
            raise SpecbatchError(f"directory {out}: run {key} has no stored result (rerun the sweep)")
        config = record["config"]
        row = {name: _cell(value) for name, value in config.items()}
        for name, value in record["summary"].items():
            row[f"{name}_result" if name in config else name] = _cell(value)
        row["run"] = key
        row["setting"] = setting_key(config)
        rows.append(row)
    return pd.DataFrame(rows)


def write_results(out: str | os.PathLike, table: pd.DataFrame) -> None:
    """OUT/results.parquet and OUT/results.csv, each written atomically."""
    out = Path(out)
    atomic_write(out / "results.parquet", lambda tmp: table.to_parquet(tmp, index=False))
    atomic_write(out / "results.csv", table.to_csv(index=False))


def read_results(out: str | os.PathLike) -> pd.DataFrame:
    path = Path(out) / "results.parquet"
    if not path.exists():
        raise SpecbatchError(f"directory {out}: no results.parquet (run `specbatch sweep` first)")
    return pd.read_parquet(path)


def read_requests(out: str | os.PathLike, key: str) -> pd.DataFrame | None:
    """A run's stored per-request table, or None when the sweep did not keep it."""
    path = requests_path(out, key)
    return pd.read_parquet(path) if path.exists() else None
