"""The measured AIConfigurator rows a vLLM default deployment needs, compacted for bundling.

``cost = "aic"`` (simulator.cost.measured.aic_cost) prices each op from the measured curve of
its exact shape where AIConfigurator timed it, else by the transfer estimator from the nearest
timed shapes (simulator.cost.measured.aic_ops); both need the rows, not only the fitted laws.
:func:`compact` keeps, per system, only the groups a vLLM default deployment runs:

- ``gemm``: ``bfloat16`` (torch ``F.linear``: cuBLAS) and ``fp8`` (per-tensor W8A8, the
  ``--quantization fp8`` kernel) at n, k >= :data:`MIN_GEMM_DIM` (smaller per-GPU widths
  are no model's projection; the 128-block and 4-bit formats are left out: not priced);
- ``attention_decode`` / ``attention_prefill``: full attention (no window), head widths in
  :data:`HEAD_DIMS`, per KV dtype (bf16 and fp8) the kernel with the most rows (the backend
  vLLM picks by default on that GPU: FA3 on Hopper, FA2 on Ada/RTX PRO bf16, FlashInfer
  TRT-LLM on Blackwell, ...);
- ``allreduce``: the CUDA-graph backend (``vllm_graph``: custom all-reduce up to its 8 MiB
  ``max_size``, NCCL above, as a served model runs it);
- ``moe``: balanced routing, per dtype (bf16, fp8) the kernel with the most rows, and per
  dtype of :data:`MOE_KERNELS` the kernel it names (the one vLLM runs for that dtype where the
  table also times others: fp8_block's Triton experts, Hopper's TP kernel, and B200 / GB200's
  TRT-LLM monolithic class, its modular class kept as ``fp8_block_modular``
  (:data:`MOE_CLASSES`); w4a16_mxfp4's
  gpt-oss kernels, not compressed-tensors' Marlin at another model's shape; a GPU whose table
  has none keeps no rows of that dtype);
- ``mla_decode`` / ``mla_prefill``: bf16 projections (``gemm_dtype`` bfloat16; a kernel-only
  table has none) and a bf16 prefill query, bf16 / fp8 KV, prefill prompts of > 1 token with
  no cached prefix; every kernel kept: vLLM picks the backend per call (H100 runs a short
  prompt through its decode kernel), and each row is the one vLLM ran.

A table filled from a version its folder declares (``reuse.yaml``: traces.public.aic_reuse)
keeps its own kernel per dtype first (:func:`native_first`: a donor row of another kernel at a
dtype the native rows time is left out, so it cannot join the native kernel's curve; two
labels :data:`SAME_KERNEL` names one kernel on this GPU are one kernel), and its curve file
keeps ``from_version`` (the donor version of each taken row, "" for a native one).

Columns: the shape and row coordinates as int32, the kernel / dtype names as categories,
``latency_s`` as float32 (a 1e-7 relative rounding, far below the tables' run-to-run noise).
:func:`write_curves` stores one zstd parquet per (system, family) and returns each file's
provenance (its SHA-256 and rows, and the source table's path and SHA-256);
:func:`load_curves` reads a system's back (default: the bundled copy).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require

if TYPE_CHECKING:  # read where the curves are (a cold aic cache: aic_cache), not at import
    import pandas as pd

BUNDLED = (Path(__file__).resolve().parents[3] / "traces" / "data" / "aiconfigurator")
CURVES = "curves"
#: Smallest per-GPU GEMM width kept (n and k).
MIN_GEMM_DIM = 256
#: Attention head widths kept.
HEAD_DIMS = (64, 128, 256)
#: GEMM dtypes kept (the default kernel of each is the table's only one at these dtypes).
GEMM_DTYPES = ("bfloat16", "fp8")
MOE_DTYPES = ("bfloat16", "fp8", "fp8_block", "w4a16_mxfp4")
#: MoE dtype -> a fragment of the name of the one kernel kept at that dtype (the other dtypes
#: keep the kernel with the most rows). ``fp8_block`` (vLLM's ``Fp8Config`` with
#: ``weight_block_size``, 128x128 blocks, dynamic per-group activations: ``kFp8Static128BlockSym``
#: weights, ``kFp8Dynamic128Sym`` activations): vLLM 0.24's ``_get_priority_backends``
#: (vllm/model_executor/layers/fused_moe/oracle/fp8.py) moves Triton to the front on compute
#: capability 9.0 without expert parallelism and FlashInfer CUTLASS with it; AIConfigurator's
#: collector records the backend vLLM selected, and its H100 / H200 rows are Triton at ep = 1
#: and FlashInfer CUTLASS at ep > 1 (the most rows), so no fp8_block row at ep > 1 is kept
#: there and ``cost = "aic"`` refuses block fp8 under expert parallelism (aic_ep).
#: ``w4a16_mxfp4`` (OCP MXFP4 experts, bf16 activations): the rows AIConfigurator's collector
#: times through vLLM 0.24's ``Mxfp4Config`` at gpt-oss's shapes, one kernel per GPU
#: (``vllm_gptossmxfp4moe_<backend>_<experts>``: OAI Triton on H100 / H200, FlashInfer TRT-LLM
#: MXFP4 x BF16 on B200 / GB200, Marlin on RTX PRO 6000 and L40S); the table's other w4a16_mxfp4
#: kernel (compressed-tensors' Marlin, hidden 3584, 896 experts) is no gpt-oss model's.
#: Several fragments: the first whose rows the GPU's table holds (one kernel per dtype):
#: fp8_block on Blackwell is FlashInfer TRT-LLM's ``TrtLlmFp8ExpertsMonolithic``, which vLLM
#: picks for the routings it fuses (simulator.cost.measured.aic_moe_rows ``MONOLITHIC``).
MOE_KERNELS = {"fp8_block": ("fp8moe_triton_tritonexperts",
                             "fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic"),
               "w4a16_mxfp4": ("gptossmxfp4moe",)}
#: Bundled MoE table dtype -> (AIConfigurator's dtype, kernel fragment): a second experts class
#: vLLM runs at one dtype, kept under a name of its own so that each dtype of the bundle is one
#: kernel. ``fp8_block_modular``: B200 / GB200's ``TrtLlmFp8ExpertsModular`` rows (the class vLLM
#: falls to for the block fp8 routings the monolithic kernel does not fuse: Llama-4's,
#: DeepSeek-V4's; aic_moe_rows).
MOE_CLASSES = {"fp8_block_modular": ("fp8_block",
                                     "fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular")}
KV_DTYPES = ("bfloat16", "fp8")
#: The one model AIConfigurator's vLLM MLA module tables time (a kernel-only table names none).
MLA_MODEL = "deepseek-ai/DeepSeek-V3"
FAMILIES = ("gemm", "attention_decode", "attention_prefill", "allreduce", "moe", "mla_decode",
            "mla_prefill")
#: Columns kept per family (``latency_s`` besides).
KEEP = {
    "gemm": ("dtype", "kernel", "m", "n", "k"),
    "attention_decode": ("kv_dtype", "kernel", "batch", "context", "heads", "kv_heads",
                         "head_dim"),
    "attention_prefill": ("kv_dtype", "kernel", "batch", "prompt", "heads", "kv_heads",
                          "head_dim"),
    "allreduce": ("num_gpus", "elements"),
    "moe": ("dtype", "kernel", "tokens", "hidden", "inter", "experts", "topk", "tp", "ep"),
    "mla_decode": ("kv_dtype", "scope", "kernel", "heads", "batch", "context"),
    "mla_prefill": ("kv_dtype", "scope", "kernel", "heads", "batch", "prompt"),
}


def most_rows(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per value of ``by``, the rows of the kernel with the most rows (the default one)."""
    import pandas as pd

    keep = []
    for _, sub in frame.groupby(by, sort=True, observed=True):
        counts = sub["kernel"].value_counts()
        keep.append(sub[sub["kernel"] == counts.index[0]])
    return pd.concat(keep) if keep else frame.iloc[:0]


def moe_default(frame: pd.DataFrame) -> pd.DataFrame:
    """The balanced-routing MoE rows kept: per dtype of :data:`MOE_DTYPES` the kernel
    :data:`MOE_KERNELS` names, else the kernel with the most rows; the rows of each
    :data:`MOE_CLASSES` kernel under its bundled dtype."""
    import pandas as pd

    f = frame[(frame["distribution"] == "balanced") & frame["dtype"].isin(MOE_DTYPES)]
    named = f["dtype"].isin(list(MOE_KERNELS))
    keep = [most_rows(f[~named], "dtype")]
    for dtype, fragments in MOE_KERNELS.items():
        sub = f[f["dtype"] == dtype]
        kernels = sub["kernel"].astype(str)
        hit = next((k for k in fragments if kernels.str.contains(k, regex=False).any()), None)
        if hit is not None:
            keep.append(sub[kernels.str.contains(hit, regex=False)])
    for table, (dtype, fragment) in MOE_CLASSES.items():
        sub = f[(f["dtype"] == dtype)
                & f["kernel"].astype(str).str.contains(fragment, regex=False)]
        keep.append(sub.assign(dtype=table))
    return pd.concat(keep)


#: Kernel labels that name one kernel on the GPUs of some compute capability majors:
#: label -> (the kernel's label, the majors). AIConfigurator's vLLM attention collector labelled
#: a FLASH_ATTN row ``vllm_flash_attn`` until its 0.24 upgrade (commit d5bad971, PR #1344: the
#: resolved version appended, ``vllm_flash_attn_fa{impl.vllm_flash_attn_version}``); vLLM's
#: ``get_flash_attn_version`` (v1/attention/backends/fa_utils.py) defaults to FA2 below
#: capability 9 and asserts ``is_fa_version_supported``, which vllm_flash_attn's
#: ``flash_attn_interface`` grants FA3 on 9.x and FA4 on 10.x only: on 8.x (A100, L40S) the old
#: label can be FA2 alone. Where a filled table holds both (L40S 0.22.0's own rows and its
#: 0.24.0 donor's), they are one curve.
SAME_KERNEL = {"vllm_flash_attn": ("vllm_flash_attn_fa2", (8,))}
#: Per family, the column whose values each pick their own kernel (native_first).
KERNEL_BY = {"gemm": "dtype", "attention_decode": "kv_dtype", "attention_prefill": "kv_dtype",
             "moe": "dtype"}


def filled(frame: pd.DataFrame) -> bool:
    """Whether ``frame`` holds rows taken from a declared donor version."""
    return "from_version" in frame.columns and bool((frame["from_version"] != "").any())


def same_kernel(frame: pd.DataFrame, capability: int) -> pd.DataFrame:
    """``frame`` with each kernel label :data:`SAME_KERNEL` names on a GPU of compute
    ``capability`` (x 10, the catalogue's) written as the kernel's own label."""
    names = {old: new for old, (new, majors) in SAME_KERNEL.items()
             if capability // 10 in majors}
    kernel = frame["kernel"].astype(str)
    if not kernel.isin(list(names)).any():
        return frame
    out = frame.copy()
    out["kernel"] = kernel.replace(names)
    return out


def native_first(family: str, frame: pd.DataFrame, capability: int = 0) -> pd.DataFrame:
    """``frame`` without the donor rows whose kernel the native rows at the same
    :data:`KERNEL_BY` value do not time (a dtype the native table lacks keeps every donor
    row; the per-dtype kernel selection then decides among them); on a GPU of compute
    ``capability`` the labels :data:`SAME_KERNEL` names are first written as their kernel's
    (0: none are)."""
    by = KERNEL_BY.get(family)
    if by is None or not filled(frame):
        return frame
    frame = same_kernel(frame, capability)
    native = frame["from_version"] == ""
    kernels = set(zip(frame.loc[native, by].astype(str), frame.loc[native, "kernel"].astype(str)))
    timed = set(frame.loc[native, by].astype(str))
    pairs = zip(frame[by].astype(str), frame["kernel"].astype(str))
    keep = [n or b not in timed or (b, k) in kernels
            for n, (b, k) in zip(native.to_numpy(), pairs)]
    return frame[np.asarray(keep, dtype=bool)]


def select_default(family: str, frame: pd.DataFrame, capability: int = 0) -> pd.DataFrame:
    """The rows of ``family`` a vLLM default deployment runs (module docstring) on a GPU of
    compute ``capability`` (native_first)."""
    f = native_first(family, frame, capability)
    if family == "gemm":
        f = f[f["dtype"].isin(GEMM_DTYPES) & (f["n"] >= MIN_GEMM_DIM) & (f["k"] >= MIN_GEMM_DIM)]
    elif family.startswith("attention"):
        f = f[(f["window"] == 0) & f["head_dim"].isin(HEAD_DIMS) & f["kv_dtype"].isin(KV_DTYPES)]
        f = most_rows(f, "kv_dtype")
    elif family == "allreduce":
        f = f[(f["backend"] == "vllm_graph") & (f["dtype"] == "bfloat16")]
    elif family == "moe":
        f = moe_default(f)
    elif family.startswith("mla"):
        f = f[f["gemm_dtype"].isin(("bfloat16", "none")) & (f["compute_dtype"] == "bfloat16")
              & f["kv_dtype"].isin(KV_DTYPES) & f["model"].isin((MLA_MODEL, ""))]
        if family == "mla_prefill":
            f = f[(f["prompt"] > 1) & (f["prefix"] == 0)]
    return f


def compact_frame(family: str, frame: pd.DataFrame, capability: int = 0) -> pd.DataFrame:
    """``frame``'s default rows on a GPU of compute ``capability``, its kept columns narrowed
    (module docstring), sorted."""
    cols = list(KEEP[family])
    f = select_default(family, frame, capability)
    extra = ["from_version"] if filled(f) else []
    f = f[[*cols, *extra, "latency_s"]].copy()
    for c in extra:
        f[c] = f[c].astype(str).astype("category")
    for c in cols:
        if f[c].dtype.kind in "iuf":
            f[c] = f[c].astype(np.int32)
        else:
            f[c] = f[c].astype(str).astype("category")
    f["latency_s"] = f["latency_s"].astype(np.float32)
    return f.sort_values(cols, kind="stable").reset_index(drop=True)


def compact(tables, capability: int = 0) -> dict:
    """family -> compacted DataFrame of one system's
    :class:`~traces.public.aiconfigurator.AicTables` on a GPU of compute ``capability``
    (families without rows left out)."""
    out = {}
    for family in FAMILIES:
        if family in tables.frames:
            frame = compact_frame(family, tables.frames[family], capability)
            if len(frame):
                out[family] = frame
    return out


def write_curves(curves: dict, folder: Path, sources: dict) -> list[dict]:
    """Write ``curves`` {system: {family: DataFrame}} under ``folder``/curves/ and return
    each file's provenance record; ``sources`` {(system, family): [source file records]}, the
    first the native table (or a whole-table donor's), the others donors whose rows the curve
    holds (``reuse``: their declaration; ``rows_in_curve`` per donor)."""
    records = []
    for system, families in sorted(curves.items()):
        (folder / CURVES / system).mkdir(parents=True, exist_ok=True)
        for family, frame in families.items():
            path = folder / CURVES / system / f"{family}.parquet"
            frame.to_parquet(path, compression="zstd", index=False)
            src_all = sources.get((system, family), [])
            src = src_all[0] if src_all else {}
            record = {"system": system, "family": family,
                      "path": f"{CURVES}/{system}/{family}.parquet",
                      "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                      "rows": int(len(frame)), "bytes": path.stat().st_size,
                      "source_path": src.get("path"), "source_sha256": src.get("sha256"),
                      "selection": "simulator/cost/measured/aic_curves.py select_default"}
            if "from_version" in frame.columns:
                counts = frame["from_version"].astype(str).value_counts()
                record["filled_from"] = [
                    {"from_version": f["reuse"]["from_version"], "source_path": f["path"],
                     "source_sha256": f["sha256"], "reason": f["reuse"]["reason"],
                     "approved_by": f["reuse"]["approved_by"],
                     "rows_in_curve": int(counts.get(f["reuse"]["from_version"], 0))}
                    for f in src_all if "reuse" in f]
            records.append(record)
    return records


def curve_files(system: str, folder: str | Path = BUNDLED) -> list[Path]:
    """The curve files stored for ``system`` (family order; [] when none): what
    :func:`load_curves` reads, without reading them."""
    base = Path(folder) / CURVES / system
    return [base / f"{family}.parquet" for family in FAMILIES
            if (base / f"{family}.parquet").is_file()]


@functools.lru_cache(maxsize=16)
def load_curves(system: str, folder: str | Path = BUNDLED) -> dict:
    """family -> DataFrame of ``system``'s compacted curves (``latency_s`` as float64); {}
    when none are stored for it; a file that cannot be read is a one-line error naming it."""
    import pandas as pd

    base = Path(folder) / CURVES / system
    out = {}
    if not base.is_dir():
        return out
    for family in FAMILIES:
        path = base / f"{family}.parquet"
        if not path.is_file():
            continue
        try:
            frame = pd.read_parquet(path)
        except (OSError, ValueError) as exc:
            raise SpecbatchError(f"{path}: cannot read the curve ({exc})") from None
        for col in (*KEEP[family], "latency_s"):
            require(col in frame.columns, f"{path}: column {col!r} missing; expected a file "
                    "written by `specbatch cost import-aiconfigurator`")
        for col in KEEP[family]:
            if frame[col].dtype.kind not in "iuf":
                frame[col] = frame[col].astype(str)
        frame["latency_s"] = frame["latency_s"].astype(np.float64)
        out[family] = frame
    return out
