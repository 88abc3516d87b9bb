"""What-if sweeps: a TOML grid over simulation-config fields, run locally or on Dask.

A sweep is three steps, each its own module: :mod:`analysis.sweep.spec` parses and validates the
spec file (``[base]``, ``[axes]`` or ``[[axes]]``, ``seeds``, ``[report]``) and expands it into
fully resolved :class:`simulator.config.sim_config.SimConfig` runs; :mod:`analysis.sweep.executors`
computes the runs (in process, a local process pool, or Dask distributed);
:mod:`analysis.sweep.points` stores each run's result under a key that hashes its config, the
package version and the trace's identity, so a rerun after a crash or Ctrl-C computes only the
missing runs.

This module ties them together (:func:`run_sweep`: one run at a time per directory, which
belongs to one spec) and owns the results table
``OUT/results.parquet`` (and ``.csv``): one row per run, every config field, then every
summary metric, in the spec's expansion order, so it is identical whichever executor produced
it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbatch.analysis.sweep.executors import Runner, execute, progress_bar, simulate_point
from specbatch.analysis.sweep.points import (
    claim_sweep_dir,
    first_line,
    load_point,
    read_manifest,
    requests_path,
    run_key,
    setting_key,
    store_point,
    trace_fingerprint,
    tree_nodes,
    write_manifest,
)
from specbatch.analysis.sweep.spec import (
    SweepSpec,
    expand,
)
from specbatch.errors import SpecbatchError, require
from specbatch.io import atomic_write, dir_lock, prepare_output_dir

if TYPE_CHECKING:  # pandas loads where a results table is built or read
    import pandas as pd

__all__ = [
    "RESULT_COLUMNS", "SweepOutcome", "collect_results", "preflight", "read_requests",
    "read_results", "run_sweep", "write_results",
]


@dataclass(frozen=True)
class SweepOutcome:
    """What :func:`run_sweep` did: how many runs in all, computed now, and reused."""

    out: str
    total: int
    computed: int
    reused: int
    elapsed_s: float
    table: pd.DataFrame = field(repr=False)


def preflight(spec: SweepSpec, runs: list[dict]) -> dict[str, str]:
    """Check every run against its trace before anything runs; return trace name -> identity.

    Raises a one-line SpecbatchError naming the spec, the run and the field when a policy
    would draft deeper than the trace's K or a trace does not exist.
    """
    from specbatch.simulator.config.sim_config import SimConfig, policy_depth
    from specbatch.simulator.replay.rules import names as rule_names

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
        limit, what = depths[name], "draft depth K"
        # a tree run verifies up to the tree's nodes
        if config.get("verify") in rule_names(kind="tree"):
            limit, what = tree_nodes(name), "tree's non-root nodes"
        if need > limit:
            raise SpecbatchError(
                f"spec {spec.path}: field 'num_speculative_tokens': expected k + extra <= the "
                f"trace's {what} = {limit} (trace {name!r}), got {need} for policy "
                f"{config['policy']} k = {config['num_speculative_tokens']} e = {config['extra']}")
    return ids


def input_identity(config: dict, trace_ids: dict[str, str]) -> str | None:
    """What a run reads besides its config values: the trace's identity and a hash of the
    bytes of every file the config names (:func:`input_files`: an imported workload, a
    config.json target or draft, a ``cost = "profiled"`` profile, an acceptance profile, a user
    policy's module), so
    a file edited in place under the same name gets new run keys and is recomputed, never
    reused stale. A run that names no file keeps the key it had (the trace's identity)."""
    trace_id = trace_ids.get(config.get("trace"))
    parts = [f"{field}:{_digest(path, field)}" for field, path in input_files(config)]
    return "+".join([str(trace_id), *parts]) if parts else trace_id


def input_files(config: dict) -> list[tuple[str, Path]]:
    """(field, file) of every input file a resolved run config names, in field order."""
    from specbatch.traces.models.hf_config import config_file, is_config_path

    files: list[tuple[str, Path]] = []
    if config.get("workload"):
        from specbatch.simulator.workload.arrivals import resolve_workload

        files.append(("workload", resolve_workload(config["workload"])))
    for role in ("target", "draft", "draft_head"):  # draft_head: an EAGLE head's config.json
        name = config.get(role)
        if isinstance(name, str) and is_config_path(name):
            files.append((role, config_file(name)))
    if config.get("cost") == "profiled" and config.get("profile"):
        files.append(("profile", Path(config["profile"])))
    if config.get("acceptance_profile"):  # a profile file, or a bundled one by name
        from specbatch.traces.acceptance.library import profile_path

        files.append(("acceptance_profile", profile_path(config["acceptance_profile"])))
    policy = config.get("policy")
    if isinstance(policy, str) and ":" in policy:
        files.append(("policy", _policy_file(policy)))
    return files


def _policy_file(policy: str) -> Path:
    """The module file a user's ``module:Class`` policy is imported from."""
    from specbatch.simulator.policies.registry import resolve_policy, user_file

    return Path(user_file(resolve_policy(policy, "field 'policy'")))


def _digest(path: Path, field: str) -> str:
    """sha256 (16 hex digits) of a file's bytes, or a one-line error naming the field."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise SpecbatchError(f"field '{field}': cannot read {path} ({exc.strerror})") from None


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
    finished first), so the next call resumes. Refuses (one line) a directory that holds
    another spec's sweep or other files, or that another sweep is running on.
    """
    require(isinstance(spec, SweepSpec), f"run_sweep: argument spec: expected a SweepSpec "
            f"(specbatch.load_spec or parse_spec), got {type(spec).__name__} {spec!r:.60}")
    require(isinstance(out, (str, os.PathLike)), f"run_sweep: argument out: expected a "
            f"directory path, got {type(out).__name__} {out!r:.60}")
    if workers < 1:
        raise SpecbatchError(f"--workers: expected an integer >= 1, got {workers}")
    runner = runner or simulate_point
    start = time.perf_counter()
    runs = expand(spec, config_cls)
    ids = preflight(spec, runs) if runner is simulate_point else {}
    keys = [run_key(c, trace_id=input_identity(c, ids)) for c in runs]
    out = prepare_output_dir(out, allow_existing=True)
    with dir_lock(out, what="sweep"):
        claim_sweep_dir(out, spec)
        write_manifest(out, spec, keys)
        todo = [(k, c) for k, c in zip(keys, runs) if load_point(out, k) is None]
        _compute(spec, out, todo, runner, progress, workers=workers, scheduler=scheduler,
                 client=client)
        table = collect_results(out, keys)
        write_results(out, table)
    return SweepOutcome(out=str(out), total=len(runs), computed=len(todo),
                        reused=len(runs) - len(todo), elapsed_s=time.perf_counter() - start,
                        table=table)


def _compute(spec: SweepSpec, out: Path, todo: list[tuple[str, dict]], runner: Runner,
             progress: bool, **where: Any) -> None:
    """Run ``todo`` on the executor ``where`` names, storing each run as it finishes."""
    keep_requests = spec.store_requests
    bar = progress_bar(len(todo), progress, spec.name)

    def done(key, config, summary, requests, elapsed):
        store_point(out, config, summary, requests if keep_requests else None, elapsed, key)
        bar.update(1)

    try:
        execute(runner, todo, done, **where)
    finally:
        bar.close()


def _cell(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def _switch_names() -> frozenset[str]:
    """SimConfig fields of kind AutoBool ("auto", true or false: ``async_scheduling``)."""
    from specbatch.fields import AutoBool
    from specbatch.simulator.config.sim_config import specs

    return frozenset(name for name, spec in specs().items() if spec.kind is AutoBool)


def _switch_cell(value: Any) -> Any:
    """An AutoBool field's value as a user writes it (auto, true, false): one string column
    whatever the runs hold (a column of True and "auto" is no Parquet type)."""
    return ("true" if value else "false") if isinstance(value, bool) else value


def collect_results(out: str | os.PathLike, keys: Iterable[str] | None = None) -> pd.DataFrame:
    """The tidy table: one row per run (config fields, then metrics), in manifest order.

    Summary keys that clash with a config field (``requests``: the number completed;
    ``async_scheduling``: as resolved, the config's as asked) get a ``_result`` suffix. A switch
    the engine may resolve (``async_scheduling``) is spelled auto / true / false. Extra
    columns: ``run`` (the run key) and ``setting`` (the key without the seed, to pair seeds
    across settings).
    """
    keys = list(keys) if keys is not None else read_manifest(out)["runs"]
    switches = _switch_names()
    rows = []
    for key in keys:
        record = load_point(out, key)
        if record is None:
            raise SpecbatchError(f"directory {out}: run {key} has no stored result (rerun the "
                                 "sweep)")
        config = record["config"]
        row = {name: _switch_cell(value) if name in switches else _cell(value)
               for name, value in config.items()}
        for name, value in record["summary"].items():
            row[f"{name}_result" if name in config else name] = _cell(value)
        row["run"] = key
        row["setting"] = setting_key(config)
        rows.append(row)
    import pandas as pd

    return pd.DataFrame(rows)


def write_results(out: str | os.PathLike, table: pd.DataFrame) -> None:
    """OUT/results.parquet and OUT/results.csv, each written atomically."""
    out = Path(out)
    atomic_write(out / "results.parquet", lambda tmp: table.to_parquet(tmp, index=False))
    atomic_write(out / "results.csv", table.to_csv(index=False))


#: Columns a results table must have for a report (config fields, keys, a metric).
RESULT_COLUMNS = ("run", "setting", "seed", "policy", "verify", "num_speculative_tokens",
                  "extra", "arrival", "rate", "throughput")


def read_results(out: str | os.PathLike) -> pd.DataFrame:
    """OUT/results.parquet, checked to be a sweep's results table (one-line errors)."""
    require(isinstance(out, (str, os.PathLike)), f"read_results: argument out: expected a "
            f"sweep directory path, got {type(out).__name__} {out!r:.60}")
    path = Path(out) / "results.parquet"
    if not path.exists():
        raise SpecbatchError(f"directory {out}: no results.parquet (run `specbatch sweep` first)")
    table = _read_parquet(path, "a sweep results table")
    missing = [c for c in RESULT_COLUMNS if c not in table.columns]
    require(not missing, f"file {path}: expected a sweep results table, missing column(s) "
            f"{', '.join(missing)}")
    require(len(table) > 0, f"file {path}: expected a sweep results table, got no rows")
    import pandas as pd

    require(pd.api.types.is_numeric_dtype(table["throughput"]),
            f"file {path}: column 'throughput': expected numbers, got {table['throughput'].dtype}")
    return table


def read_requests(out: str | os.PathLike, key: str) -> pd.DataFrame | None:
    """A run's stored per-request table, or None when the sweep did not keep it."""
    path = requests_path(out, key)
    return _read_parquet(path, "a run's per-request table") if path.exists() else None


def _read_parquet(path: Path, what: str) -> pd.DataFrame:
    """A Parquet file, or a one-line error naming it (garbage, truncated, empty, a folder)."""
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - whatever the reader raises, the file is bad
        raise SpecbatchError(f"file {path}: expected {what} (Parquet), got an unreadable file: "
                             f"{first_line(exc)}") from None
