"""Sweep specs: the TOML grid format, its validation and its expansion into runs.

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

Validation checks every field name and value type against the config class (the simulator's
:class:`SimConfig` unless a caller passes another); :func:`expand` then builds every run's
config through the config module's own ``make_config``, so range checks happen before
anything runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbatch.analysis.sweep.points import plain, run_key
from specbatch.errors import SpecbatchError
from specbatch.fields import resolve_aliases
from specbatch.inputs import loads_toml, read_text

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SPEC_KEYS = {"name", "seeds", "store_requests", "base", "axes", "report"}

REPORT_KEYS = {"replicate", "title"}

REPLICATIONS = ("tetris", "block")


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

def default_config_class() -> type:
    """The simulator's :class:`SimConfig` (imported lazily: analysis -> simulator)."""
    from specbatch.simulator.config.sim_config import SimConfig

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
    _check_top_level(data, path)
    name, store = _parse_name_and_store(data, path)
    base = _parse_base(data, path, hints, aliases)
    seeds = _parse_seeds(data, base, path)
    grids = _parse_grids(data, path, hints, aliases)
    report = _parse_report(data, path)
    return SweepSpec(
        path=str(path), name=name, base=dict(base), grids=tuple(grids), seeds=tuple(seeds),
        store_requests=store, report=dict(report),
    )


def _check_top_level(data: Mapping, path: str) -> None:
    unknown = sorted(set(data) - SPEC_KEYS)
    if unknown:
        raise SpecbatchError(
            f"spec {path}: field '{unknown[0]}': unknown top-level key "
            f"(expected one of {', '.join(sorted(SPEC_KEYS))})"
        )


def _parse_name_and_store(data: Mapping, path: str) -> tuple[str, bool]:
    """The sweep's name (default: the file's stem) and whether runs keep request tables."""
    name = data.get("name", Path(path).stem)
    if not isinstance(name, str) or not name:
        raise SpecbatchError(f"spec {path}: field 'name': expected a non-empty string, got "
                             f"{name!r}")
    store = data.get("store_requests", True)
    if not isinstance(store, bool):
        raise SpecbatchError(f"spec {path}: field 'store_requests': expected true/false, got "
                             f"{store!r}")
    return name, store


def _parse_base(data: Mapping, path: str, hints: dict, aliases: dict) -> dict:
    """``[base]``: config fields shared by every run, aliases resolved and types checked."""
    base = data.get("base", {})
    if not isinstance(base, Mapping):
        raise SpecbatchError(f"spec {path}: field 'base': expected a table, got {base!r}")
    base = _canonical_keys(base, path, "base", aliases)
    for key, value in base.items():
        _check_field(path, "base", key, value, hints)
    if "seed" in base and "seeds" in data:
        raise SpecbatchError(f"spec {path}: [base] field 'seed': give either base.seed or seeds, "
                             "not both")
    return base


def _canonical_keys(table: Mapping, path: str, where: str, aliases: Mapping) -> dict:
    """``table`` with aliases spelled as their field; a field given under two spellings in
    one table (``k`` and ``num_speculative_tokens``) is a one-line error, as in a config file."""
    return resolve_aliases(table, aliases, f"spec {path}: [{where}]")


def _parse_seeds(data: Mapping, base: Mapping, path: str) -> list:
    """``seeds``: distinct integers >= 0 (default: ``[base.seed]`` or ``[0]``)."""
    seeds = data.get("seeds", [base.get("seed", 0)])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise SpecbatchError(f"spec {path}: field 'seeds': expected a non-empty list of integers "
                             f">= 0, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise SpecbatchError(f"spec {path}: field 'seeds': duplicate seeds in {seeds!r}")
    return seeds


def _parse_grids(data: Mapping, path: str, hints: dict, aliases: dict) -> list[dict]:
    """``[axes]`` (one grid) or ``[[axes]]`` (a union of grids): field -> tuple of values."""
    raw_axes = data.get("axes", {})
    if isinstance(raw_axes, Mapping):
        if "axes" in data and not raw_axes:  # left out, a spec runs [base] per seed
            raise SpecbatchError(f"spec {path}: field 'axes': expected at least one axis "
                                 "(field = [values, ...]), got an empty table; leave [axes] out "
                                 "to run [base] once per seed")
        raw_grids = [raw_axes]
    elif isinstance(raw_axes, list) and raw_axes and all(isinstance(g, Mapping) for g in raw_axes):
        raw_grids = raw_axes
        empty = next((i for i, grid in enumerate(raw_grids) if not grid), None)
        if empty is not None:  # it would add one [base] run silently
            raise SpecbatchError(f"spec {path}: [[axes]] table {empty + 1}: expected at least "
                                 "one axis (field = [values, ...]), got an empty table")
    else:
        raise SpecbatchError(f"spec {path}: field 'axes': expected a table or an array of tables")
    return [_parse_grid(grid, path, hints, aliases) for grid in raw_grids]


def _parse_grid(grid: Mapping, path: str, hints: dict, aliases: dict) -> dict:
    checked = {}
    for key, values in _canonical_keys(grid, path, "axes", aliases).items():
        if key == "seed":
            raise SpecbatchError(f"spec {path}: [axes] field 'seed': use the top-level seeds list")
        if not isinstance(values, list):
            raise SpecbatchError(f"spec {path}: [axes] field '{key}': expected a list of values, "
                                 f"got {values!r}")
        if not values:
            raise SpecbatchError(f"spec {path}: [axes] field '{key}': empty axis (expected at "
                                 "least one value)")
        for value in values:
            _check_field(path, "axes", key, value, hints)
        checked[key] = tuple(values)
    return checked


def _parse_report(data: Mapping, path: str) -> Mapping:
    """``[report]``: which paper to replicate (REPLICATIONS) and a title."""
    report = data.get("report", {})
    if not isinstance(report, Mapping):
        raise SpecbatchError(f"spec {path}: field 'report': expected a table, got {report!r}")
    bad = sorted(set(report) - REPORT_KEYS)
    if bad:
        raise SpecbatchError(f"spec {path}: [report] field '{bad[0]}': unknown (expected "
                             "replicate, title)")
    if "replicate" in report and report["replicate"] not in REPLICATIONS:
        raise SpecbatchError(
            f"spec {path}: [report] field 'replicate': expected one of {', '.join(REPLICATIONS)}, "
            f"got {report['replicate']!r}"
        )
    return report


def load_spec(path: str | os.PathLike, config_cls: type | None = None,
              overrides: Mapping | None = None) -> SweepSpec:
    """Read and validate a sweep spec TOML file; ``overrides`` see :func:`apply_overrides`."""
    path = str(path)
    try:
        data = loads_toml(read_text(path, f"spec {path}"), f"spec {path}")
    except FileNotFoundError:
        raise SpecbatchError(f"spec {path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecbatchError(f"spec {path}: not valid TOML: {exc}") from None
    if overrides:
        data = apply_overrides(data, overrides, _aliases(config_cls or default_config_class()))
    return parse_spec(data, path, config_cls)

def apply_overrides(data: Mapping, overrides: Mapping, aliases: Mapping | None = None) -> dict:
    """Set config fields for every run: into ``[base]``, and off every axis that varied them.

    ``aliases`` (spelling -> field, e.g. ``k`` -> ``num_speculative_tokens``) make an alias
    and its full name the same field on every side: an override spelled either way replaces
    ``[base]`` entries and axes spelled either way (later overrides win).
    """
    aliases = dict(aliases or {})

    def canon(name: Any) -> Any:
        return aliases.get(name, name)

    fixed: dict[str, Any] = {}
    for name, value in overrides.items():
        fixed[canon(name)] = value
    data = dict(data)
    base = data.get("base", {})
    if isinstance(base, Mapping):
        base = {k: v for k, v in base.items() if canon(k) not in fixed}
        data["base"] = {**base, **fixed}
    else:  # not a table: parse_spec reports it
        data["base"] = base
    axes = data.get("axes", {})
    grids = [axes] if isinstance(axes, Mapping) else list(axes) if isinstance(axes, list) else axes
    if isinstance(grids, list):
        grids = [{k: v for k, v in g.items() if canon(k) not in fixed} if isinstance(g, Mapping)
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
    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)}

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
