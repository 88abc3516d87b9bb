"""`specbatch cost import-aiconfigurator`: AIConfigurator's vLLM tables -> fitted per-op laws.

:func:`import_laws` reads each system's tables (traces.public.aiconfigurator) at one vLLM
version (the knob; default each system's newest version with a full set), fits every family's
laws and judges them by leaving one shape out (simulator.cost.measured.aic_laws). :func:`write_laws`
writes ``laws.json`` (per system: the version, every law with its coefficients and held-out
errors), ``curves/<system>/<family>.parquet`` (the measured rows a vLLM default deployment
needs, compacted: simulator.cost.measured.aic_curves) and ``PROVENANCE.json`` (repository,
commit, licence, every table read with its SHA-256, every curve file with its own and its
source's SHA-256) as one atomic result folder; :func:`load_laws` reads the laws back and
aic_curves.load_curves the curves (default: the bundled copy, ``traces/data/aiconfigurator``).
:func:`bundle_systems` adds a system to a written folder by the same import (GB200 was added so),
:func:`bundle_families` re-bundles some families' curves without refitting the laws.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.gpus.catalogue import GPUS
from specbatch.simulator.cost.measured.aic_laws import Law, law_from_dict

RESULT_KIND = "specbatch-aic-laws"
BUNDLED = (Path(__file__).resolve().parents[3] / "traces" / "data" / "aiconfigurator")
#: AIConfigurator's system name -> this package's hardware preset (simulator.cost.gpus.hardware).
AIC_PRESETS = {"h100_sxm": "h100", "h200_sxm": "h200", "a100_sxm": "a100", "l40s": "l40s",
               "rtx_pro_6000_server": "rtxpro6000", "b200_sxm": "b200", "gb200": "gb200"}
#: The GPUs whose laws are bundled (AIConfigurator's system names): the one list every
#: enumeration of the covered GPUs derives from (aic_cost's refusal, the benchmarks, tests).
COMMON_SYSTEMS = ("h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm", "gb200", "l40s",
                  "rtx_pro_6000_server")


def capability(system: str) -> int:
    """The compute capability (x 10) of AIConfigurator system ``system``'s GPU (its
    :data:`AIC_PRESETS` catalogue entry; 0 for a system without one), which picks the kernel
    labels one kernel has there (aic_curves.SAME_KERNEL)."""
    gpu = GPUS.get(AIC_PRESETS.get(system, ""))
    return 0 if gpu is None else int(gpu.compute_capability)


def import_laws(root: str | Path, only: tuple = (), version: str | None = None,
                commit: str | None = None) -> dict:
    """{"systems": {system: {"vllm_version", "laws": [Law dicts]}}, "provenance": {...}} of
    every system under ``root`` (or those in ``only``) at ``version`` (None: each system's
    newest full set)."""
    # the tables' reader and the fits need pandas and scipy: loaded here, not by a run that
    # only reads the bundled laws back
    from specbatch.simulator.cost.measured.aic_curves import compact
    from specbatch.simulator.cost.measured.aic_laws import fit_tables
    from specbatch.traces.public.aiconfigurator import import_aiconfigurator, systems

    found = systems(root)
    names = list(only) if only else found
    for name in names:
        require(name in found, f"--system {name}: no vLLM tables under {root}; expected one "
                f"of {', '.join(found) or 'none'}")
    out, files, source, curves = {}, [], {}, {}
    for name in names:
        tables = import_aiconfigurator(root, name, version, commit)
        out[name] = {"vllm_version": tables.version,
                     "laws": [law.as_dict() for law in fit_tables(tables)]}
        curves[name] = compact(tables, capability(name))
        files.extend({**f, "system": name} for f in tables.provenance["files"])
        source = {k: v for k, v in tables.provenance.items()
                  if k not in ("files", "system", "vllm_version")}
    provenance = dict(source)
    provenance.update({"format": RESULT_KIND, "files": files,
                       "fitted": "simulator/cost/measured/aic_laws.py: non-negative least squares "
                                 "on "
                                 "relative error per (system, family, group); judged by "
                                 "leaving one shape out"})
    return {"systems": out, "provenance": provenance, "curves": curves}


def bundle_families(root: str | Path, families: tuple, folder: str | Path = BUNDLED,
                    commit: str | None = None, only: tuple = ()) -> list[dict]:
    """Write the curves of ``families`` (aic_curves.FAMILIES) of every system bundled in
    ``folder`` (or those in ``only``) at its bundled vLLM version into ``folder`` and replace
    those records in its PROVENANCE.json (the source tables and the curve files); every other
    file is left as it is. Why: a family added later (MLA), or one system's tables read anew
    (L40S's declared reuse), is bundled without refitting the laws (the full ``cost
    import-aiconfigurator`` writes the same curves, and refits everything). Returns the new
    curve records."""
    from specbatch.simulator.cost.measured.aic_curves import compact, write_curves
    from specbatch.traces.public.aiconfigurator import import_aiconfigurator

    folder = Path(folder)
    laws, provenance = open_bundle(folder, commit)
    curves, files = {}, []
    for name, (version, _) in sorted(laws.items()):
        if only and name not in only:
            continue
        tables = import_aiconfigurator(root, name, version, provenance.get("commit"))
        got = compact(tables, capability(name))
        curves[name] = {f: got[f] for f in families if f in got}
        files.extend({**f, "system": name} for f in tables.provenance["files"]
                     if f["family"] in families)
    records = write_curves(curves, folder, source_records(files))

    def replaced(r: dict) -> bool:
        return r["family"] in families and (not only or r["system"] in only)

    write_provenance(folder, provenance, replaced, files, records)
    return records


def bundle_systems(root: str | Path, names: tuple, folder: str | Path = BUNDLED,
                   commit: str | None = None, version: str | None = None) -> dict:
    """Add (or replace) the systems ``names`` in the bundle ``folder``: each read, fitted and
    compacted by the full import (:func:`import_laws`: the same version rule, ``reuse.yaml``,
    selection), its laws set in ``laws.json``, its curves written, its table and curve records
    in PROVENANCE.json replacing any it had; every other system's files are left as they are.
    Why: a GPU added later (gb200) is bundled without refitting the others. Returns the
    import (:func:`import_laws`' result)."""
    from specbatch.io import atomic_write, dumps
    from specbatch.simulator.cost.measured.aic_curves import load_curves, write_curves

    folder = Path(folder)
    _, provenance = open_bundle(folder, commit)
    laws_path = folder / "laws.json"
    result = import_laws(root, only=tuple(names), version=version,
                         commit=provenance.get("commit"))
    records = write_curves(result["curves"], folder, source_records(
        result["provenance"]["files"]))
    laws = json.loads(laws_path.read_text())
    laws.update(result["systems"])
    atomic_write(laws_path, dumps(laws, indent=1) + "\n")
    written = {r["path"] for r in records}
    for old in provenance["curves"]:  # a family the new import no longer keeps
        if old["system"] in names and old["path"] not in written:
            (folder / old["path"]).unlink(missing_ok=True)
    write_provenance(folder, provenance, lambda r: r["system"] in names,
                     result["provenance"]["files"], records)
    bundled_laws.cache_clear()
    load_curves.cache_clear()
    return result


def open_bundle(folder: Path, commit: str | None) -> tuple[dict, dict]:
    """(laws, PROVENANCE.json) of the bundle ``folder``: one that is no bundle, or one imported
    from another ``commit`` than asked, is refused before anything is written."""
    laws = load_laws(folder)
    provenance = json.loads((folder / "PROVENANCE.json").read_text())
    require(commit is None or commit == provenance.get("commit"),
            f"--commit {commit}: the bundle was imported from {provenance.get('commit')}")
    return laws, provenance


def write_provenance(folder: Path, provenance: dict, replaced, files: list,
                     records: list) -> None:
    """``provenance`` with its table and curve records for which ``replaced`` holds replaced
    by ``files`` and ``records``, written to ``folder``'s PROVENANCE.json atomically."""
    from specbatch.io import atomic_write, dumps

    provenance["files"] = [f for f in provenance["files"] if not replaced(f)] + files
    provenance["curves"] = [c for c in provenance["curves"] if not replaced(c)] + records
    atomic_write(folder / "PROVENANCE.json", dumps(provenance, indent=2) + "\n")


def source_records(files) -> dict:
    """{(system, family): [file records in read order]} (aic_curves.write_curves' sources)."""
    out: dict = {}
    for f in files:
        out.setdefault((f["system"], f["family"]), []).append(f)
    return out


def identity(result: dict) -> str:
    """The result folder's identity: a hash of the source tables' SHA-256 and the versions."""
    digest = hashlib.sha256()
    for f in result["provenance"]["files"]:
        digest.update(f["sha256"].encode())
    for name, s in sorted(result["systems"].items()):
        digest.update(f"{name}@{s['vllm_version']}".encode())
    return digest.hexdigest()[:16]


def write_laws(result: dict, out: str | Path, force: bool = False) -> Path:
    """Write ``laws.json`` and ``PROVENANCE.json`` into ``out`` atomically
    (specbatch.io.result_dir: a folder holding anything else is refused)."""
    from specbatch.io import dumps, result_dir
    from specbatch.simulator.cost.measured.aic_curves import write_curves

    with result_dir(out, RESULT_KIND, identity(result), force=force) as tmp:
        (tmp / "laws.json").write_text(dumps(result["systems"], indent=1) + "\n")
        sources = source_records(f for f in result["provenance"]["files"] if "system" in f)
        provenance = dict(result["provenance"])
        provenance["curves"] = write_curves(result.get("curves", {}), tmp, sources)
        (tmp / "PROVENANCE.json").write_text(dumps(provenance, indent=2) + "\n")
    return Path(out)


def load_laws(folder: str | Path = BUNDLED) -> dict[str, tuple[str, list[Law]]]:
    """{system: (vLLM version, [Law])} of a folder :func:`write_laws` wrote (default: the
    bundled laws); a missing or foreign file is a one-line error naming it."""
    folder = Path(folder)
    paths = {name: folder / name for name in ("laws.json", "PROVENANCE.json")}
    for path in paths.values():
        require(path.is_file(), f"{path}: missing; expected a folder written by "
                "`specbatch cost import-aiconfigurator`")
    try:
        provenance = json.loads(paths["PROVENANCE.json"].read_text())
        raw = json.loads(paths["laws.json"].read_text())
    except (OSError, ValueError) as exc:
        raise SpecbatchError(f"{folder}: cannot read the laws ({exc})") from None
    require(isinstance(provenance, dict) and provenance.get("format") == RESULT_KIND,
            f"{paths['PROVENANCE.json']}: expected format {RESULT_KIND!r}")
    try:
        return {name: (s["vllm_version"], [law_from_dict(d) for d in s["laws"]])
                for name, s in raw.items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecbatchError(f"{paths['laws.json']}: malformed law ({exc!r})") from None


@functools.lru_cache(maxsize=1)
def bundled_laws() -> dict[str, tuple[str, list[Law]]]:
    """:func:`load_laws` of the bundled folder, read once per process (every aic cost and
    ``auto``'s coverage check ask it)."""
    return load_laws(BUNDLED)
