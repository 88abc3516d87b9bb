"""Per-op laws fitted to AIConfigurator's measured vLLM op tables, each with its held-out error.

Every law is linear in a few physical terms of one op call on one GPU, fitted by non-negative
least squares on the *relative* error (rows weighted 1/t, so a 10 µs call counts as much as a
10 ms one), per GPU and vLLM version (traces.public.aiconfigurator reads the tables), and
judged by leaving one shape out: every distinct shape (the op's model-dependent dimensions,
below) is predicted by the law fitted on all the others, and the MAPE is over every row so
predicted. Terms (b bytes per element of the op's dtype, e of the KV cache's):

- ``attention_decode`` (per kernel and KV dtype, full attention): B requests of one query
  token over c cached tokens, H query and H_kv KV heads of width d per GPU::

      t = a + u·B + u_h·B·H·d/128 + (2·B·(c+1)·H_kv·d·e)/β

  a per-call floor, a per-request and a per-(request, query head) term, the KV bytes read.
  Shape = (H, H_kv, d).
- ``attention_prefill`` (per kernel and KV dtype, full attention): B prompts of s tokens::

      t = a + u·B + 2·B·H·d·s(s+1)/π + (2·B·s·H_kv·d·e + 4·B·s·H·d)/β

  FLOPs of QKᵀ and AV under the causal mask, the KV written and Q/O moved. Shape = (H, H_kv, d).
- ``gemm`` (per dtype and kernel): input [m, k], weight [n, k]::

      t = a + 2mnk/π + (b·(mk + nk) + 2·mn)/β

  Shape = (n, k).
- ``allreduce`` (per GPU count and backend): M bytes (2 per bf16 element),
  t = a + M/β, fitted separately at M ≤ 8 MiB (vLLM's custom all-reduce: its default
  ``max_size`` of 8 MiB) and above (NCCL). Shape = the message size.
- ``moe`` (per dtype and kernel, balanced routing): T tokens, E experts of width I, k per
  token, hidden h, split tp / ep ways; E_t = expected experts one rank's slice receives
  (E/ep)·(1 − (1 − k/E)^T)::

      t = a + u·T + 6·T·k·h·I/(tp·ep)/π + 3·E_t·h·I·b/tp/β

  Shape = (h, I, E, k, tp, ep): leave one model-and-split out. ``moe_routed`` (features
  only, not fitted here): these and T·k·h/ep, E_t, the MoE transfer's law
  (simulator.cost.measured.aic_moe_transfer).

:func:`fit_tables` fits every family of one system; :func:`predict` prices rows of a family
with a fitted law.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError

if TYPE_CHECKING:  # the laws are fitted on DataFrames; evaluating one needs no pandas
    import pandas as pd

#: Bytes per element of the tables' dtypes (4-bit formats at half a byte, scales not counted).
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_block": 1.0,
               "fp8_e4m3": 1.0, "int8": 1.0, "int8_wo": 1.0, "int4_wo": 0.5, "nvfp4": 0.5,
               "mxfp4": 0.5, "w4a16_mxfp4": 0.5, "w4a8_mxfp4_mxfp8": 0.5, "awq": 0.5,
               "gptq": 0.5, "w4afp8": 0.5}
#: vLLM's custom all-reduce serves messages up to this many bytes (its default max_size).
CUSTOM_ALLREDUCE_MAX = 8 * 1024 * 1024
#: family -> (feature names, the columns a group shares, the columns that name a shape)
FAMILIES = {
    "attention_decode": (("floor", "per_request", "per_request_head", "kv_bytes"),
                         ("kernel", "kv_dtype"), ("heads", "kv_heads", "head_dim")),
    "attention_prefill": (("floor", "per_request", "flops", "bytes"),
                          ("kernel", "kv_dtype"), ("heads", "kv_heads", "head_dim")),
    "gemm": (("floor", "flops", "bytes"), ("dtype", "kernel"), ("n", "k")),
    "allreduce": (("floor", "bytes"), ("num_gpus", "backend", "regime"), ("elements",)),
    "moe": (("floor", "per_token", "flops", "weight_bytes"), ("dtype", "kernel"),
            ("hidden", "inter", "experts", "topk", "tp", "ep")),
}
#: family -> the columns that place a row within its shape's measured curve (the transfer's
#: matching coordinates; all-reduce has none: its shapes are single points).
ROW_COLUMNS = {"attention_decode": ("batch", "context"), "attention_prefill": ("batch", "prompt"),
               "gemm": ("m",), "moe": ("tokens",), "allreduce": ()}
#: Fewest rows and shapes a group needs to be fitted and judged.
MIN_ROWS, MIN_SHAPES = 5, 3
#: Nearest measured shapes whose measured/law ratios the transfer averages.
NEIGHBOURS = 2


def element_bytes(dtype) -> np.ndarray:
    """Bytes per element of each dtype name (a one-line error for an unknown one)."""
    names = np.asarray(dtype).astype(str)
    out = np.empty(names.shape, dtype=np.float64)
    for name in np.unique(names):
        if name not in DTYPE_BYTES:
            raise SpecbatchError(f"dtype {name!r}: not priced; expected one of "
                                 f"{', '.join(DTYPE_BYTES)}")
        out[names == name] = DTYPE_BYTES[name]
    return out


def features(family: str, rows) -> np.ndarray:
    """The law's terms of ``rows`` # [rows, features] (module docstring): a DataFrame or a
    mapping of column name -> array (a cached curve's law prices without pandas)."""
    f = {c: (rows[c].to_numpy() if hasattr(rows[c], "to_numpy") else np.asarray(rows[c]))
         for c in rows}
    one = np.ones(len(next(iter(f.values()))))
    if family == "attention_decode":
        b = f["batch"].astype(np.float64)
        kv = 2.0 * b * (f["context"] + 1.0) * f["kv_heads"] * f["head_dim"] * element_bytes(
            f["kv_dtype"])
        return np.column_stack([one, b, b * f["heads"] * f["head_dim"] / 128.0, kv])
    if family == "attention_prefill":
        b, s = f["batch"].astype(np.float64), f["prompt"].astype(np.float64)
        hd = f["heads"] * f["head_dim"]
        flops = 2.0 * b * hd * s * (s + 1.0)
        nbytes = (2.0 * b * s * f["kv_heads"] * f["head_dim"] * element_bytes(f["kv_dtype"])
                  + 4.0 * b * s * hd)
        return np.column_stack([one, b, flops, nbytes])
    if family == "gemm":
        m, n, k = (f[c].astype(np.float64) for c in ("m", "n", "k"))
        w = element_bytes(f["dtype"])
        return np.column_stack([one, 2.0 * m * n * k, w * (m * k + n * k) + 2.0 * m * n])
    if family == "allreduce":
        return np.column_stack([one, 2.0 * f["elements"].astype(np.float64)])
    if family in ("moe", "moe_routed"):
        t = f["tokens"].astype(np.float64)
        h, inter = f["hidden"].astype(np.float64), f["inter"].astype(np.float64)
        e, k = f["experts"].astype(np.float64), f["topk"].astype(np.float64)
        tp, ep = f["tp"].astype(np.float64), f["ep"].astype(np.float64)
        touched = (e / ep) * (1.0 - (1.0 - np.minimum(k / e, 1.0)) ** t)
        flops = 6.0 * t * k * h * inter / (tp * ep)
        wbytes = 3.0 * touched * h * inter * element_bytes(f["dtype"]) / tp
        if family == "moe_routed":  # + what does not split with the width (aic_moe_transfer)
            return np.column_stack([one, t, flops, wbytes, t * k * h / ep, touched])
        return np.column_stack([one, t, flops, wbytes])
    raise SpecbatchError(f"family {family!r}: expected one of {', '.join(FAMILIES)}")


def select(family: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows a family's laws are fitted on: full attention, balanced routing, priced dtypes;
    all-reduce rows tagged with their regime (custom ≤ 8 MiB, nccl above)."""
    out = frame
    if family.startswith("attention"):
        out = out[out["window"] == 0]
    if family == "moe":
        out = out[out["distribution"] == "balanced"]
    col = {"attention_decode": "kv_dtype", "attention_prefill": "kv_dtype"}.get(family, "dtype")
    out = out[out[col].astype(str).isin(DTYPE_BYTES)]
    if family == "allreduce":
        out = out.assign(regime=np.where(2.0 * out["elements"] <= CUSTOM_ALLREDUCE_MAX,
                                         "custom", "nccl"))
    return out.reset_index(drop=True)


def fit_relative(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising Σ (x·β / t − 1)² (relative least squares)."""
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    from scipy.optimize import nnls  # ~0.5 CPU s to import: only where a law is fitted

    coef, _ = nnls((x / scale) / t[:, None], np.ones_like(t))
    return coef / scale


@dataclass(frozen=True)
class Law:
    """One fitted law: ``family``, its ``group`` (the shared columns' values), the
    ``terms`` and their ``coef``, and how it was judged."""

    family: str
    group: dict
    terms: tuple
    coef: tuple
    rows: int
    shapes: int
    mape_fit: float  # in-sample MAPE
    mape_loso: float  # leave-one-shape-out MAPE
    p90_loso: float  # 90th percentile of the held-out |relative error|
    mape_transfer: float = float("nan")  # leave-one-shape-out MAPE of the law x neighbours
    p90_transfer: float = float("nan")

    def seconds(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted seconds of ``rows`` # [rows]."""
        return features(self.family, rows) @ np.asarray(self.coef)

    def as_dict(self) -> dict:
        return {"family": self.family, "group": self.group, "terms": list(self.terms),
                "coef": list(self.coef), "rows": self.rows, "shapes": self.shapes,
                "mape_fit": self.mape_fit, "mape_loso": self.mape_loso,
                "p90_loso": self.p90_loso, "mape_transfer": self.mape_transfer,
                "p90_transfer": self.p90_transfer}


def shape_ids(rows: pd.DataFrame, columns: tuple) -> np.ndarray:
    """An integer id per distinct shape (the ``columns``' values) of ``rows``."""
    return rows.groupby(list(columns), sort=True).ngroup().to_numpy()


def held_out_errors(x: np.ndarray, t: np.ndarray, ids: np.ndarray, sub: pd.DataFrame,
                    family: str) -> tuple[np.ndarray, np.ndarray]:
    """|relative error| of every row predicted without its shape, by (1) the law fitted on the
    other shapes and (2) the transfer: that law times the mean measured/law ratio of the
    :data:`NEIGHBOURS` nearest other shapes (Euclidean in log2 of the shape columns) at the
    same row coordinates (:data:`ROW_COLUMNS`; ratio 1 where no neighbour has the point)."""
    _, _, shape_cols = FAMILIES[family]
    row_cols = list(ROW_COLUMNS[family])
    uniq = np.unique(ids)
    coords = np.log2(np.vstack([sub.loc[ids == s, list(shape_cols)].iloc[0].to_numpy(
        dtype=np.float64) for s in uniq]).clip(min=1e-9))  # [shapes, dims]
    err_law, err_transfer = np.empty_like(t), np.empty_like(t)
    for i, s in enumerate(uniq):
        out = ids == s
        coef = fit_relative(x[~out], t[~out])
        law = x @ coef
        err_law[out] = np.abs(law[out] / t[out] - 1.0)
        dist = ((coords - coords[i]) ** 2).sum(axis=1)
        dist[i] = np.inf
        near = uniq[np.argsort(dist, kind="stable")[:NEIGHBOURS]]
        mine = sub.loc[out, row_cols].reset_index(drop=True)
        ratios = []
        for j in near:
            r_j = t[ids == j] / law[ids == j]
            if not row_cols:  # a shape is one point (all-reduce sizes): its mean ratio
                ratios.append(np.full(int(out.sum()), float(r_j.mean())))
                continue
            other = sub.loc[ids == j, row_cols].assign(_r=r_j).drop_duplicates(row_cols)
            ratios.append(mine.merge(other, on=row_cols, how="left")["_r"].to_numpy())
        r = np.vstack(ratios)  # [neighbours, rows of the shape]
        seen = np.isfinite(r)
        ratio = np.where(seen.any(axis=0), np.where(seen, r, 0.0).sum(axis=0)
                         / np.maximum(seen.sum(axis=0), 1), 1.0)
        err_transfer[out] = np.abs(law[out] * ratio / t[out] - 1.0)
    return err_law, err_transfer


def fit_family(family: str, frame: pd.DataFrame) -> list[Law]:
    """Every group's law of one family (groups with too few rows or shapes are skipped)."""
    terms, group_cols, shape_cols = FAMILIES[family]
    rows = select(family, frame)
    laws = []
    for key, sub in rows.groupby(list(group_cols), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        ids = shape_ids(sub, shape_cols)
        if len(sub) < MIN_ROWS or len(np.unique(ids)) < MIN_SHAPES:
            continue
        x = features(family, sub)
        t = sub["latency_s"].to_numpy(dtype=np.float64)
        coef = fit_relative(x, t)
        err, err_tr = held_out_errors(x, t, ids, sub.reset_index(drop=True), family)
        laws.append(Law(family=family,
                        group={c: (v.item() if hasattr(v, "item") else v)
                               for c, v in zip(group_cols, key)},
                        terms=terms, coef=tuple(float(c) for c in coef), rows=int(len(sub)),
                        shapes=int(len(np.unique(ids))),
                        mape_fit=float(np.mean(np.abs(x @ coef / t - 1.0))),
                        mape_loso=float(err.mean()), p90_loso=float(np.percentile(err, 90)),
                        mape_transfer=float(err_tr.mean()),
                        p90_transfer=float(np.percentile(err_tr, 90))))
    return laws


def fit_tables(tables) -> list[Law]:
    """Every family's laws of one system's :class:`~traces.public.aiconfigurator.AicTables`."""
    laws = []
    for family in FAMILIES:
        if family in tables.frames:
            laws.extend(fit_family(family, tables.frames[family]))
    return laws


def law_from_dict(d: dict) -> Law:
    """A :class:`Law` from :meth:`Law.as_dict`'s form (the bundled JSON)."""
    return Law(family=d["family"], group=dict(d["group"]), terms=tuple(d["terms"]),
               coef=tuple(float(c) for c in d["coef"]), rows=int(d["rows"]),
               shapes=int(d["shapes"]), mape_fit=float(d["mape_fit"]),
               mape_loso=float(d["mape_loso"]), p90_loso=float(d["p90_loso"]),
               mape_transfer=float(d.get("mape_transfer", "nan")),
               p90_transfer=float(d.get("p90_transfer", "nan")))


def predict(laws, family: str, rows: pd.DataFrame, **group) -> np.ndarray:
    """Seconds of ``rows`` under the one law of ``family`` whose group matches ``group``."""
    found = [law for law in laws if law.family == family
             and all(law.group.get(k) == v for k, v in group.items())]
    if len(found) != 1:
        raise SpecbatchError(f"{family} {group}: {len(found)} fitted laws match; expected one")
    return found[0].seconds(rows)
