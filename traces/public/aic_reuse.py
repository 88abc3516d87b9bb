"""AIConfigurator's declared table reuse (``reuse.yaml``): which donor rows a version folder takes.

A vLLM version folder ``<system>/<family>/vllm/<version>/`` may hold a ``reuse.yaml``
(schema_version 1: ``reuse:`` a list of ``{table, from_version, reason, approved_by}``, four
non-empty strings; AIConfigurator's ``sdk/perf_database.py::_parse_reuse_yaml``). Its loader
(``aic-core/rust/aiconfigurator-core/src/perf_database/source_resolution.rs::resolve_one``,
commit 095f58a) orders a table's sources: the requested version's own file first ("primary"),
then each declared donor ("declared_reuse": the entries naming the table in every
``reuse.yaml`` at the requested version, in file order, deduplicated on ``from_version``, the
first kept; the donor version's own file, its ``reuse.yaml`` not followed; none for a ``comm``
table with its own file), then implicit nearest-earlier versions. The tables' readers (``gemm.rs
load_gemm_parquet``, ``attention.rs load_context_parquet`` / ``load_generation_parquet``,
``moe.rs load_moe_parquet``) read the sources in that order and keep, per shape key (the
table's coordinates, ``kernel_source`` not among them), the first row (``or_insert``): a donor
row fills a shape the native rows lack and never replaces one; a folder with no file of its
own takes the donor's whole table.

:func:`table_sources` finds a table's native file and declared donors; :func:`fill` merges
normalised frames that way and marks every taken donor row in ``from_version`` ("" for a
native row). Only the declared channel is followed: AIConfigurator's implicit backward fill
from earlier versions is not (a bundled version is one version's measurements plus what its
own folder declares).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from specbatch.errors import SpecbatchError, require

REUSE_FILE = "reuse.yaml"
#: The keys every declaration carries (AIConfigurator's ``_REUSE_ENTRY_REQUIRED_KEYS``).
REUSE_KEYS = ("table", "from_version", "reason", "approved_by")
#: The family whose own table AIConfigurator never fills from another version (all-reduce
#: curves are topology-bound: ``source_resolution.rs`` returns before the declared channel when
#: the table's own file resolves in a family folder; a folder without one still takes a
#: declared donor's whole table, ``op_file_family_from_path`` then naming no family).
NO_REUSE_FOLDERS = ("comm",)
#: Columns that are not a row's shape key: the kernel label and the measured value.
NOT_KEY = ("kernel", "latency_s", "from_version")


@dataclass(frozen=True)
class Reuse:
    """One ``reuse.yaml`` declaration: ``table`` at the folder's version takes
    ``from_version``'s rows; ``declared_in`` the file (relative to the data root)."""

    table: str
    from_version: str
    reason: str
    approved_by: str
    declared_in: str


def parse_reuse(path: Path, root: Path) -> list[Reuse]:
    """The declarations of one ``reuse.yaml``; a malformed file is a one-line error naming it
    (AIConfigurator fails loudly on one too)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecbatchError(f"{path}: cannot read reuse.yaml ({exc})") from None
    require(isinstance(raw, dict) and isinstance(raw.get("reuse"), list),
            f"{path}: expected a mapping with a 'reuse' list")
    out = []
    for i, entry in enumerate(raw["reuse"]):
        require(isinstance(entry, dict) and all(
            isinstance(entry.get(k), str) and entry[k].strip() for k in REUSE_KEYS),
            f"{path}: reuse[{i}] needs non-empty strings {', '.join(REUSE_KEYS)}")
        out.append(Reuse(*(entry[k].strip() for k in REUSE_KEYS),
                         declared_in=str(path.relative_to(root))))
    return out


def version_dirs(root: Path, system: str, version: str) -> list[Path]:
    """Every family folder's vLLM ``version`` folder of ``system`` (family name order)."""
    base = root / system
    return sorted(p / "vllm" / version for p in base.iterdir()
                  if (p / "vllm" / version).is_dir())


def find_table(root: Path, system: str, stem: str, version: str) -> Path | None:
    """``stem``'s own file at ``version`` in any family folder, or None (no ``reuse.yaml``
    followed: AIConfigurator's ``resolve_op_data_path``)."""
    for vdir in version_dirs(root, system, version):
        if (vdir / f"{stem}.parquet").is_file():
            return vdir / f"{stem}.parquet"
    return None


def declared(root: Path, system: str, stem: str, version: str) -> list[Reuse]:
    """The declarations naming ``stem`` in every ``reuse.yaml`` at ``version``, in order, one
    per donor version (the first kept)."""
    out, seen = [], set()
    for vdir in version_dirs(root, system, version):
        if (vdir / REUSE_FILE).is_file():
            for entry in parse_reuse(vdir / REUSE_FILE, root):
                if entry.table == stem and entry.from_version not in seen:
                    seen.add(entry.from_version)
                    out.append(entry)
    return out


def table_sources(root: Path, system: str, folder: str, stem: str,
                  version: str) -> tuple[Path | None, list[tuple[Reuse, Path]]]:
    """(``stem``'s own file at ``version`` or None, [(declaration, donor file)] in priority
    order, donors without the file left out)."""
    own = root / system / folder / "vllm" / version / f"{stem}.parquet"
    native = own if own.is_file() else None
    if folder in NO_REUSE_FOLDERS and native is not None:
        return native, []
    donors = []
    for entry in declared(root, system, stem, version):
        path = find_table(root, system, stem, entry.from_version)
        if path is not None:
            donors.append((entry, path))
    return native, donors


def fill(native: pd.DataFrame | None, donors: list[tuple[Reuse, pd.DataFrame]]
         ) -> tuple[pd.DataFrame, list[int]]:
    """(the merged frame with ``from_version`` per row, "" native; the rows taken from each
    donor): every native row, then each donor's rows at shapes (every column but
    :data:`NOT_KEY`) no earlier source holds."""
    frames = [] if native is None else [native.assign(from_version="")]
    taken = []
    for entry, frame in donors:
        if not frames:
            got = frame
        else:
            have = pd.concat(frames, ignore_index=True)
            key = [c for c in have.columns if c not in NOT_KEY]
            require(set(key) <= set(frame.columns),
                    f"{entry.declared_in}: donor {entry.from_version} lacks columns {key}")
            seen = pd.MultiIndex.from_frame(have[key].astype(str))
            got = frame[~pd.MultiIndex.from_frame(frame[key].astype(str)).isin(seen)]
        taken.append(int(len(got)))
        frames.append(got.assign(from_version=entry.from_version))
    require(frames, "fill: no native table and no donor")
    return pd.concat(frames, ignore_index=True), taken
