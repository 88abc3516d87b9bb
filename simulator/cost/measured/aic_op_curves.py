"""AIConfigurator's measured op curves of one GPU as a role reads them, built once per process
and kept in the cache folder.

:func:`shape_curves` is a family's measured curves at a dtype with the law its transfer to an
untimed shape uses (a GEMM cell or MoE row no faster than its weights read cold: aic_cold);
:func:`op_curve` one shape's :class:`~simulator.cost.measured.aic_curve.Curve`, stored as JSON in
simulator.cost.measured.aic_cache so that a warm process reads no curve file; :func:`mla_gemm`
the bf16 GEMM curves aic_mla takes DeepSeek-V3's projections off its module rows with.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured import aic_cache
from specbatch.simulator.cost.measured.aic_cold import cold_gemm, cold_moe, gemm_rate, moe_rate
from specbatch.simulator.cost.measured.aic_curve import Curve, ShapeLaw
from specbatch.simulator.cost.measured.aic_curves import MOE_CLASSES, load_curves
from specbatch.simulator.cost.measured.aic_dispatch import EXTRAP, edges_of
from specbatch.simulator.cost.measured.aic_import import bundled_laws
from specbatch.simulator.cost.measured.aic_ops import ShapeCurves


@functools.lru_cache(maxsize=32)
def shape_curves(system: str, family: str, dtype: str) -> ShapeCurves:
    """The measured curves of ``family`` at ``dtype`` on ``system`` and the law of the same
    (dtype, kernel) group its transfer uses (a one-line error when none is bundled); a GEMM
    cell no faster than its weights read cold (aic_cold.cold_gemm: the collector replays
    L2-resident weights; numpy and compiled passes read the same curves), a MoE row no faster
    than the experts its routing touches (aic_cold.cold_moe); each curve within the kernel
    buckets vLLM dispatches (aic_dispatch: the fp8 GEMM's, FlashInfer's fp8 MoE tiles, the
    all-reduce's)."""
    frames = load_curves(system)
    frame = frames.get(family)
    if family == "allreduce":
        if frame is None:
            raise SpecbatchError(f"aic {system}: no all-reduce curve bundled")
        return ShapeCurves(family, frame, None, {}, edges_of(system, family, "", ""),
                           EXTRAP[family])
    rows = None if frame is None else frame[frame["dtype"] == dtype]
    if rows is None or rows.empty:
        raise SpecbatchError(f"aic {system}: no {dtype} {family} curve bundled")
    if family == "gemm":  # the weights read cold (aic_cold)
        rows = cold_gemm(rows, gemm_rate(system, dtype), dtype)
    elif family == "moe":  # the touched experts read cold (aic_cold)
        rows = cold_moe(rows, moe_rate(system, dtype), dtype)
    kernel = str(rows["kernel"].iloc[0])
    laws = bundled_laws().get(system, (None, []))[1]
    fitted = MOE_CLASSES.get(dtype, (dtype,))[0] if family == "moe" else dtype  # its AIC dtype
    law = next((w for w in laws if w.family == family and w.group.get("dtype") == fitted
                and w.group.get("kernel") == kernel), None)
    return ShapeCurves(family, rows, law, {"dtype": fitted},
                       edges_of(system, family, dtype, kernel), EXTRAP.get(family, "flat"))


def curve_json(curve: Curve) -> dict:
    """A built :class:`Curve` as JSON (aic_cache: floats kept exactly)."""
    law = None if curve.law is None else dataclasses.asdict(curve.law)
    return {"grid": curve.grid.tolist(), "seconds": curve.seconds.tolist(),
            "source": curve.source, "how": curve.how, "law": law,
            "edges": [float(e) for e in curve.edges], "extrap": curve.extrap}


def curve_from_json(d: dict) -> Curve:
    """The :class:`Curve` :func:`curve_json` stored."""
    law = d["law"]
    if law is not None:
        law = ShapeLaw(str(law["family"]), tuple(law["columns"]), str(law["row_col"]),
                       tuple(int(v) for v in law["key"]), tuple(tuple(e) for e in law["extra"]),
                       tuple(float(c) for c in law["coef"]))
    return Curve(np.asarray(d["grid"], dtype=np.float64),
                 np.asarray(d["seconds"], dtype=np.float64), law, str(d["source"]),
                 str(d["how"]), tuple(float(e) for e in d["edges"]), str(d["extrap"]))


@functools.lru_cache(maxsize=256)
def op_curve(system: str, family: str, dtype: str, key: tuple) -> Curve:
    """``shape_curves(system, family, dtype).curve(key)``, kept in the cache folder
    (simulator.cost.measured.aic_cache): a warm process reads no curve file."""
    key = tuple(int(v) for v in key)
    return aic_cache.entry("curve", system, (family, dtype, list(key)),
                           lambda: shape_curves(system, family, dtype).curve(key),
                           curve_json, curve_from_json)


def mla_gemm(system: str):
    """(n, k) -> the bf16 GEMM :class:`Curve` of ``system`` (what aic_mla takes V3's
    projections off its module rows with)."""
    return lambda key: op_curve(system, "gemm", "bfloat16", key)
