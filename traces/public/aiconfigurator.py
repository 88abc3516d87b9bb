"""AIConfigurator's measured vLLM op tables, read into normalised per-op rows with provenance.

AIConfigurator (github.com/ai-dynamo/aiconfigurator, Apache-2.0) ships per-GPU tables of single
ops timed inside vLLM, laid out as ``<DIR>/<system>/<family>/vllm/<version>/<table>.parquet``
(``aic-core/src/aiconfigurator_core/systems/data`` in its repository). What each column means
comes from its collectors (``collector/vllm/collect_attn.py``, ``collect_gemm.py``,
``collect_moe.py``, ``collector/network/collect_all_reduce.py``): every op is timed with
``benchmark_with_power`` (``collector/helper.py``: warm-up, CUDA-graph replay, the mean), and
``latency`` is milliseconds per call of one layer's op on one GPU. The rows kept here:

- ``gemm`` (``gemm_perf``): ``RowParallelLinear`` with input [m, k] and weight [n, k]:
  m tokens, n output and k input features, ``gemm_dtype`` bfloat16 / fp8 (per-tensor W8A8) /
  fp8_block (128-block scales) / 4-bit formats where present; ``kernel_source`` the kernel.
- ``attention_decode`` (``generation_attention_perf``): ``batch_size`` requests of one query
  token each over ``step`` cached tokens (vLLM's ``seq_lens`` = step + 1 include the query),
  ``num_heads`` / ``num_key_value_heads`` per GPU, ``head_dim``, ``kv_cache_dtype``
  bfloat16 / fp8, ``window_size`` 0 (full) or a sliding window.
- ``attention_prefill`` (``context_attention_perf``): ``batch_size`` prompts of ``isl`` tokens
  each, no cached prefix (``step`` 0).
- ``allreduce`` (``custom_allreduce_perf``): vLLM's ``tensor_model_parallel_all_reduce`` of
  ``message_size`` bf16 elements over ``num_gpus`` GPUs, ``backend`` vllm_graph (captured in
  a CUDA graph, as serving runs it) or vllm_eager; vLLM picks custom all-reduce or NCCL inside.
- ``moe`` (``moe_perf``): vLLM's ``FusedMoE`` layer over ``num_tokens`` tokens of width
  ``hidden_size``, ``num_experts`` experts of width ``inter_size``, ``topk`` per token, split
  ``moe_tp_size`` / ``moe_ep_size`` ways, router logits ``distribution`` balanced or a power law.

- ``mla_decode`` / ``mla_prefill`` (multi-head latent attention, DeepSeek-V2/V3): from vLLM
  0.19 ``mla_generation_module_perf`` / ``mla_context_module_perf``
  (``collector/vllm/collect_mla_module.py``): vLLM's whole ``DeepseekV2MLAAttention`` forward
  of DeepSeek-V3 (``model``; 7168 hidden, q_lora_rank 1536, kv_lora_rank 512, rope 64, nope and
  v heads 128) with ``num_heads`` query heads on one GPU (tp 1, the heads a tp shard holds):
  the fused q_a / kv_a projection, the q_a and kv_a RMSNorms, q_b_proj, rotary, the MLA
  backend (prefill: kv_b_proj's up-projection and the prefill kernel; decode: the absorbed
  W_UK / W_UV bmm around the latent-KV kernel) and o_proj, no all-reduce (``scope``
  "module"); ``gemm_type`` the projections' format, ``mla_dtype`` the prefill query's.
  Before (0.14.0, ``generation_mla_perf`` / ``context_mla_perf``,
  ``collector/vllm/collect_mla.py`` of that version): the backend's ``impl.forward`` alone,
  no projections, norms or rotary (``scope`` "kernel"). Decode rows: ``batch_size`` requests
  of one token at ``step`` tokens with the query (``context`` = step − 1 cached); prefill
  rows: ``batch_size`` prompts of ``isl`` tokens over a ``step``-token cached prefix. A
  system's MLA table is the module one where it resolves at the version, else the kernel one.

A version folder may hold a ``reuse.yaml`` (traces.public.aic_reuse): a table it declares takes
the donor version's rows at the shapes its own file lacks, or the donor's whole table where the
folder has none, as AIConfigurator's loader does; ``from_version`` marks each taken row.
:func:`newest_full_version` picks the newest
version whose gemm, attention, comm and moe tables all resolve (the default of the knob).

:func:`import_aiconfigurator` reads one system at one version into :class:`AicTables`: one
DataFrame per family with normalised columns, ``latency_s`` in seconds, and ``provenance``
(repository, commit, licence, and every file read with its SHA-256 and row count).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.errors import SpecbatchError, require
from specbatch.traces.public.aic_reuse import fill, table_sources

AIC_SOURCE = {"repository": "https://github.com/ai-dynamo/aiconfigurator",
              "licence": "Apache-2.0",
              "copyright": "Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES",
              "path": "aic-core/src/aiconfigurator_core/systems/data"}
#: family -> (folder under <system>, table file stem) AIConfigurator writes.
TABLES = {
    "gemm": ("gemm", "gemm_perf"),
    "attention_decode": ("attention", "generation_attention_perf"),
    "attention_prefill": ("attention", "context_attention_perf"),
    "allreduce": ("comm", "custom_allreduce_perf"),
    "moe": ("moe", "moe_perf"),
}
#: The columns each family's table must carry (besides ``latency``, ms).
COLUMNS = {
    "gemm": ("kernel_source", "gemm_dtype", "m", "n", "k"),
    "attention_decode": ("kernel_source", "batch_size", "step", "num_heads",
                         "num_key_value_heads", "head_dim", "kv_cache_dtype", "window_size"),
    "attention_prefill": ("kernel_source", "batch_size", "isl", "num_heads",
                          "num_key_value_heads", "head_dim", "kv_cache_dtype", "window_size"),
    "allreduce": ("kernel_source", "allreduce_dtype", "num_gpus", "message_size", "backend"),
    "moe": ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
            "num_experts", "moe_tp_size", "moe_ep_size", "distribution"),
}
#: Normalised names (the tables' own where they are clear).
RENAME = {
    "attention_decode": {"batch_size": "batch", "step": "context", "num_heads": "heads",
                         "num_key_value_heads": "kv_heads", "kv_cache_dtype": "kv_dtype",
                         "window_size": "window"},
    "attention_prefill": {"batch_size": "batch", "isl": "prompt", "num_heads": "heads",
                          "num_key_value_heads": "kv_heads", "kv_cache_dtype": "kv_dtype",
                          "window_size": "window"},
    "gemm": {"gemm_dtype": "dtype"},
    "allreduce": {"allreduce_dtype": "dtype", "message_size": "elements"},
    "moe": {"moe_dtype": "dtype", "num_tokens": "tokens", "hidden_size": "hidden",
            "inter_size": "inter", "num_experts": "experts", "moe_tp_size": "tp",
            "moe_ep_size": "ep"},
}
FAMILY_FOLDERS = ("gemm", "attention", "comm", "moe")
#: MLA family -> (folder, table stems in preference order: module, then the kernel-only one).
MLA_TABLES = {
    "mla_decode": ("mla", ("mla_generation_module_perf", "generation_mla_perf")),
    "mla_prefill": ("mla", ("mla_context_module_perf", "context_mla_perf")),
}
#: The columns every MLA table carries (besides ``latency``); module tables also ``model``
#: and ``gemm_type``.
MLA_COLUMNS = ("kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl",
               "step")
MLA_MODULE_COLUMNS = ("model", "gemm_type")
_VERSION = re.compile(r"^\d+(\.\d+)*$")


@dataclass(frozen=True)
class AicTables:
    """One system's tables at one vLLM version: ``frames`` family -> DataFrame (normalised
    columns, ``latency_s``), ``provenance`` (source, commit, files with SHA-256)."""

    system: str
    version: str
    frames: dict
    provenance: dict


def version_key(version: str) -> tuple:
    """Sort key of a dotted version (0.9.0 < 0.14.0)."""
    return tuple(int(x) for x in version.split("."))


def table_path(root: Path, system: str, folder: str, stem: str, version: str) -> Path | None:
    """The file ``stem`` at ``version`` resolves to: its own, else its first declared donor's
    (traces.public.aic_reuse), or None."""
    native, donors = table_sources(root, system, folder, stem, version)
    return native if native is not None else (donors[0][1] if donors else None)


def read_filled(root: Path, system: str, folder: str, stem: str, version: str, family: str,
                read) -> tuple[pd.DataFrame, list[dict]] | None:
    """``stem``'s rows at ``version``: its own file's, with the shapes it lacks filled from
    the donors its folder declares (aic_reuse.fill; ``from_version`` marks a donor's rows),
    read by ``read(path)``; and one provenance record per file read (a donor's with the rows
    taken and its declaration). None when neither exists."""
    native, donors = table_sources(root, system, folder, stem, version)
    if native is None and not donors:
        return None
    frame, taken = fill(None if native is None else read(native),
                        [(entry, read(path)) for entry, path in donors])
    files = []
    if native is not None:
        files.append(file_record(root, family, native, int((frame["from_version"] == "").sum())))
    for (entry, path), rows in zip(donors, taken):
        files.append({**file_record(root, family, path, rows),
                      "reuse": {"from_version": entry.from_version, "reason": entry.reason,
                                "approved_by": entry.approved_by,
                                "declared_in": entry.declared_in}})
    return frame, files


def file_record(root: Path, family: str, path: Path, rows: int) -> dict:
    """A table file's provenance: family, path under ``root``, SHA-256, rows read from it."""
    return {"family": family, "path": str(path.relative_to(root)),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "rows": rows}


def vllm_versions(root: Path, system: str) -> list[str]:
    """Every vLLM version folder of ``system`` under any family, oldest first."""
    found = set()
    for folder in FAMILY_FOLDERS:
        base = root / system / folder / "vllm"
        if base.is_dir():
            found.update(p.name for p in base.iterdir() if p.is_dir() and _VERSION.match(p.name))
    return sorted(found, key=version_key)


def newest_full_version(root: str | Path, system: str) -> str:
    """The newest vLLM version of ``system`` whose gemm, attention (both phases), all-reduce
    and MoE tables all resolve; a one-line error when none does."""
    root = Path(root)
    for version in reversed(vllm_versions(root, system)):
        if all(table_path(root, system, folder, stem, version) is not None
               for folder, stem in TABLES.values()):
            return version
    raise SpecbatchError(f"{root / system}: no vLLM version with gemm, attention, comm and moe "
                         "tables; expected AIConfigurator's systems/data layout")


def systems(root: str | Path) -> list[str]:
    """The systems under ``root`` that hold vLLM tables."""
    root = Path(root)
    require(root.is_dir(), f"{root}: not a folder; expected AIConfigurator's systems/data")
    return sorted(p.name for p in root.iterdir() if p.is_dir() and vllm_versions(root, p.name))


def read_table(path: Path, family: str) -> pd.DataFrame:
    """One table with its columns checked and renamed, ``latency_s`` in seconds (older
    attention tables have no ``window_size``: full attention, 0)."""
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise SpecbatchError(f"{path}: cannot read the table ({exc})") from None
    if family.startswith("attention") and "window_size" not in frame.columns:
        frame = frame.assign(window_size=0)
    for col in (*COLUMNS[family], "latency"):
        require(col in frame.columns, f"{path}: column {col!r} missing; expected "
                f"AIConfigurator's {TABLES[family][1]} table")
    keep = frame[list(COLUMNS[family])].rename(columns=RENAME.get(family, {}))
    latency = pd.to_numeric(frame["latency"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(latency) | (latency <= 0)
    keep = keep.loc[~bad].reset_index(drop=True)
    keep["latency_s"] = latency[~bad] * 1e-3
    keep = keep.rename(columns={"kernel_source": "kernel"})
    return keep


def mla_table(root: Path, system: str, version: str, family: str) -> tuple[str, str] | None:
    """(table stem, scope "module" or "kernel") of ``family``'s MLA table at ``version`` (its
    own or a declared donor's; the module table preferred), or None."""
    folder, stems = MLA_TABLES[family]
    for stem, scope in zip(stems, ("module", "kernel")):
        if table_path(root, system, folder, stem, version) is not None:
            return stem, scope
    return None


def read_mla_table(path: Path, family: str, scope: str) -> pd.DataFrame:
    """One MLA table, its columns checked and normalised (module docstring): ``kernel``,
    ``scope``, ``model``, ``gemm_dtype`` ("none" for a kernel table), ``compute_dtype``,
    ``kv_dtype``, ``heads``, ``batch``, then ``context`` (decode) or ``prompt`` and ``prefix``
    (prefill), ``latency_s`` in seconds; rows without a finite positive latency dropped."""
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise SpecbatchError(f"{path}: cannot read the table ({exc})") from None
    need = (*MLA_COLUMNS, *(MLA_MODULE_COLUMNS if scope == "module" else ()), "latency")
    for col in need:
        require(col in frame.columns, f"{path}: column {col!r} missing; expected "
                f"AIConfigurator's {scope} MLA table")
    ints = {}
    for col in ("num_heads", "batch_size", "isl", "step"):
        v = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        require(bool(np.isfinite(v).all()) and bool((v == np.round(v)).all()),
                f"{path}: column {col!r} holds a value that is not a whole number")
        ints[col] = v.astype(np.int64)
    require(bool((ints["num_heads"] >= 1).all() & (ints["batch_size"] >= 1).all()),
            f"{path}: column 'num_heads' / 'batch_size' holds a value below 1")
    out = pd.DataFrame({
        "kernel": frame["kernel_source"].astype(str), "scope": scope,
        "model": frame["model"].astype(str) if scope == "module" else "",
        "gemm_dtype": frame["gemm_type"].astype(str) if scope == "module" else "none",
        "compute_dtype": frame["mla_dtype"].astype(str),
        "kv_dtype": frame["kv_cache_dtype"].astype(str), "heads": ints["num_heads"],
        "batch": ints["batch_size"]})
    if family == "mla_decode":
        require(bool((ints["step"] >= 1).all()), f"{path}: column 'step' holds a value below 1"
                " (a decode row's step counts its query token)")
        out["context"] = ints["step"] - 1
    else:
        require(bool((ints["isl"] >= 1).all() & (ints["step"] >= 0).all()),
                f"{path}: column 'isl' below 1 or 'step' below 0")
        out["prompt"], out["prefix"] = ints["isl"], ints["step"]
    latency = pd.to_numeric(frame["latency"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(latency) | (latency <= 0)
    out = out.loc[~bad].reset_index(drop=True)
    out["latency_s"] = latency[~bad] * 1e-3
    return out


def import_aiconfigurator(root: str | Path, system: str, version: str | None = None,
                          commit: str | None = None) -> AicTables:
    """Read ``system``'s tables at vLLM ``version`` (None: :func:`newest_full_version`) from an
    AIConfigurator ``systems/data`` folder ``root``; ``commit`` is recorded as provenance."""
    root = Path(root)
    require((root / system).is_dir(), f"{root / system}: no such system folder; systems with "
            f"vLLM tables here: {', '.join(systems(root)) or 'none'}")
    if version is None:
        version = newest_full_version(root, system)
    require(version in vllm_versions(root, system),
            f"version {version!r}: {system} has vLLM tables at "
            f"{', '.join(vllm_versions(root, system)) or 'none'}")
    frames, files = {}, []
    for family, (folder, stem) in TABLES.items():
        got = read_filled(root, system, folder, stem, version, family,
                          lambda path, family=family: read_table(path, family))
        if got is not None:
            frames[family] = got[0]
            files.extend(got[1])
    for family in MLA_TABLES:
        found = mla_table(root, system, version, family)
        if found is None:
            continue
        stem, scope = found
        frames[family], got = read_filled(
            root, system, MLA_TABLES[family][0], stem, version, family,
            lambda path, family=family, scope=scope: read_mla_table(path, family, scope))
        files.extend({**f, "scope": scope} for f in got)
    require(frames, f"{root / system}: no vLLM table at version {version}")
    provenance = {**AIC_SOURCE, "commit": commit or "unknown", "system": system,
                  "vllm_version": version, "files": files}
    return AicTables(system, version, frames, provenance)
