"""The calibrated cost model (``cost = "calibrated"``): measured public profiles where they
cover the pass, a roofline calibrated on them everywhere else.

One forward pass of a role (L layers, tp GPUs, Q = Σq query tokens) is priced as a sum of five
parts, each from the best source available (:meth:`CalibratedCost.sources` names them)::

    t = layers(Q) + attention(q, c) + allreduce(Q) + lm_head(Q) + launch

On the RTX 4090 and RTX PRO 6000 (the GPUs of the measured vLLM runs, docs/fidelity.md) every
part comes from LLMServingSim's per-layer profiles of those GPUs
(:mod:`simulator.cost.measured.lss`; a user's ``profile`` folder is not read there); on every
other GPU from Vidur's measured table cells and the calibrated laws
(:mod:`simulator.cost.measured.calibrated_role`, whose docstring gives each part's source).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.memory import memory_kv_tokens
from specbatch.simulator.cost.analytic.precision import (
    kv_element_bytes,
    resolve_quantization,
    weight_format,
)
from specbatch.simulator.cost.analytic.roofline import pass_constants
from specbatch.simulator.cost.analytic.window import batch_window_sums, window_sums
from specbatch.simulator.cost.gpus.hardware import (
    DEFAULT_EXECUTION,
    FULL_WEIGHT_BITS,
    Hardware,
    check_routing_skew,
    check_weight_bits,
    launch_terms,
    settle_execution,
)
from specbatch.simulator.cost.interface import ROLES, batch_sums, for_role
from specbatch.simulator.cost.measured.calibrated_role import RolePricer, TableCell, role_source
from specbatch.simulator.cost.measured.lss import LssPricer, lss_gpu, lss_pricer
from specbatch.simulator.cost.measured.sources import (
    LAYER_OPS,
    allreduce_curve,
    find_cell,
    fitted_gpu,
    sparse,
)
from specbatch.traces.models.model_shape import ModelShape


@dataclass(frozen=True)
class CalibratedCost:
    """Step times from the bundled public profiles and the calibrated laws (module
    docstring); a :class:`~simulator.cost.interface.SumsCostModel`."""

    hardware: Hardware
    target: ModelShape
    draft: ModelShape
    tp: int = 1
    draft_tp: int = 1
    overhead: float = field(default=math.nan)
    execution: str = DEFAULT_EXECUTION
    draft_weight_bits: int = FULL_WEIGHT_BITS
    use_cells: bool = True  # False: the calibrated law even where a table cell exists
    profile: str | None = None  # a user's import-vidur folder, searched before the bundled one
    routing_skew: float = 0.0  # Zipf exponent of a MoE model's expert loads (theory.moe)
    quantization: str = "none"  # the target's --quantization (simulator.cost.analytic.precision)
    kv_cache_dtype: str = "auto"  # vLLM --kv-cache-dtype of both roles' KV cache
    roles: dict = field(default=None, repr=False, compare=False)  # role -> RolePricer

    def __post_init__(self) -> None:
        ex = settle_execution(self)
        bits = check_weight_bits(self.draft_weight_bits)
        check_routing_skew(self.routing_skew, self.target, self.draft)
        object.__setattr__(self, "target", resolve_quantization(self.quantization, self.target))
        check_calibrated_precision(self.hardware, (self.target, self.draft), self.kv_cache_dtype)
        roles = {"target": self.pricer(self.target, self.tp, ex, "target", FULL_WEIGHT_BITS),
                 "draft": self.pricer(self.draft, self.draft_tp, ex, "draft", bits)}
        object.__setattr__(self, "roles", roles)

    def pricer(self, shape: ModelShape, tp: int, ex, role: str, bits: int):
        consts = pass_constants(shape, self.hardware, tp, ex, role, bits,
                                self.routing_skew if shape.is_moe else 0.0,  # + its checks
                                kv_element_bytes(self.kv_cache_dtype, self.hardware))
        gpu = self.hardware.name
        launch = launch_terms(ex, role, self.hardware, shape.layers)
        if lss_gpu(gpu):  # the GPUs of the measured vLLM runs (simulator.cost.measured.lss)
            return lss_pricer(shape=shape, tp=tp, hw=self.hardware, launch=launch, consts=consts,
                              weight_bits=bits, full_bits=FULL_WEIGHT_BITS)
        cell = None
        found, folder = None, None
        fmt = weight_format(shape, self.hardware)
        if (self.use_cells and bits >= FULL_WEIGHT_BITS and not fmt.quantized
                and not sparse(shape)):
            for folder in ((self.profile,) if self.profile else ()) + (None,):
                found = find_cell(gpu, shape, tp, folder)
                if found is not None:
                    break
        if found is not None:
            model, rows = found
            grid = rows["num_tokens"].astype(np.float64)  # [grid]
            block = np.zeros(len(grid))  # [grid] one layer's ms, summed op by op in order
            for op in LAYER_OPS:
                block = block + rows[f"{op}_ms"].astype(np.float64)
            secs = 1e-3 * (rows["emb_ms"].astype(np.float64) + shape.layers * block)  # [grid]
            secs = np.maximum.accumulate(secs)  # more tokens never cost less (module docstring)
            cell = TableCell(model=model, grid=grid, seconds=secs, folder=folder)
        return RolePricer(shape=shape, tp=int(tp), hw=self.hardware, fit=fitted_gpu(gpu),
                          weight_bits=bits, fmt=fmt, cell=cell,
                          allreduce=allreduce_curve(gpu, int(tp)) if tp > 1 else None,
                          launch=launch, consts=consts)

    def _role(self, role: str) -> RolePricer:
        return for_role(self.roles, role)

    @property
    def windowed(self) -> bool:
        """Whether a role has sliding-window layers (priced from arrays: RooflineCost.windowed)."""
        return any(r.consts.sliding_layers for r in self.roles.values())

    #: The engine may pass a pass's logit rows (``rows``; simulator.cost.analytic.roofline).
    logit_rows = True

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray,
                  rows: float | None = None) -> float:
        """Seconds of one pass; ``query`` [n] new tokens, ``kv`` [n] cached tokens, ``rows``
        the logit rows (None: Σq)."""
        r = self.roles.get(role)
        if r is not None and r.consts.sliding_layers:
            *sums, window = batch_window_sums(query, kv, r.consts.window)
            return self.time_from_sums(role, *sums, window=window, rows=rows)
        return self.time_from_sums(role, *batch_sums(query, kv), rows=rows)

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float, window: tuple[float, float] | None = None,
                       rows: float | None = None) -> float:
        """:meth:`step_time` from the batch sums; bit-identical to it on the same sums (a
        role with sliding-window layers also needs ``window`` = (K^W, P^W)); the LM head at
        ``rows`` logit rows (None: every query token)."""
        r = self.roles.get(role)
        if r is None:
            r = self._role(role)  # raises the one-line error
        if window is None and rows is None:
            return r.total(sq, skv, sqkv, sqq, n)
        return r.total(sq, skv, sqkv, sqq, n, window, rows)

    def breakdown(self, role: str, query: np.ndarray, kv: np.ndarray) -> dict:
        """Seconds per part of one pass (``layers``, ``attention``, ``experts``,
        ``allreduce``, ``lm_head``, ``launch``), summing to :meth:`step_time`. ``experts``:
        a mixture of experts' routed experts moved out of ``layers`` (the measured MoE
        block on the LLMServingSim GPUs, else the expert GEMMs' share of the law's
        layers(Q): :meth:`RolePricer.expert_share`); 0 for a dense model."""
        r = self._role(role)
        n, sq, skv, sqkv, sqq = batch_sums(np.asarray(query), np.asarray(kv))
        if r.consts.sliding_layers:
            parts = r.split(sq, skv, sqkv, sqq, n, window_sums(query, kv, r.consts.window))
        else:
            parts = r.split(sq, skv, sqkv, sqq, n)
        experts = 0.0
        if sq > 0 and r.shape.is_moe:
            experts = (r.shape.moe_layers * r.moe_block(sq) if isinstance(r, LssPricer)
                       else parts["layers"] * r.expert_share(sq))
        layers = parts["layers"] - experts
        return {"layers": layers, "attention": parts["attention"], "experts": experts,
                "allreduce": parts["allreduce"], "lm_head": parts["lm_head"],
                "launch": parts["launch"]}

    def table_gap(self, role: str) -> str | None:
        """Why ``role``'s pass has no :meth:`pass_table` (one phrase), or None
        (simulator.cost.measured.calibrated_table)."""
        from specbatch.simulator.cost.measured.calibrated_table import table_gap

        return table_gap(self._role(role))

    def pass_table(self, role: str, max_tokens: int):
        """``role``'s pass as a simulator.cost.tabulated.PassTable for Σq = 0..``max_tokens``,
        or None where it has no such form (:meth:`table_gap`); built once per role and reused
        for any ``max_tokens`` up to the largest built (a shared model's runs)."""
        from specbatch.simulator.cost.measured.calibrated_table import role_table, table_gap

        r = self._role(role)
        if table_gap(r) is not None:
            return None
        table = r.memo.get(("pass_table",))
        if table is None or table.max_tokens < max_tokens:
            table = role_table(r, int(max_tokens))
            r.memo[("pass_table",)] = table
        return table

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, block_size: int = 16,
                           disable_hybrid_kv_cache_manager: bool = False) -> int:
        """KV-cache tokens next to both models' weights (simulator.cost.analytic.roofline's
        accounting, a windowed model's hybrid pool included)."""
        return memory_kv_tokens(self.hardware, self.target, self.draft, self.tp,
                                gpu_memory_utilization, self.draft_weight_bits,
                                self.kv_cache_dtype, block_size, disable_hybrid_kv_cache_manager)

    def sources(self) -> dict:
        """Per role: which source priced each part and its validated error."""
        return {role: (self.roles[role].source() if isinstance(self.roles[role], LssPricer)
                       else role_source(self.roles[role], self.hardware.name))
                for role in ROLES}


def check_calibrated_precision(hw: Hardware, shapes: tuple, kv_cache_dtype: str) -> None:
    """The calibrated model prices a quantised target through its GEMM laws
    (simulator.cost.measured.calibrated_role.quantized_layer_seconds, format_scales); refuse,
    naming the setting, what it cannot: quantised weights or fp8 KV on the GPUs priced by
    LLMServingSim's bf16 per-layer profiles."""
    for shape in shapes:
        if shape.quantization != "none" and lss_gpu(hw.name):
            raise SpecbatchError(f"cost 'calibrated': quantization {shape.quantization!r} on "
                                 f"{hw.name}: its per-layer profiles are bf16; expected none")
    if str(kv_cache_dtype).lower() != "auto" and lss_gpu(hw.name):
        raise SpecbatchError(f"cost 'calibrated': kv_cache_dtype {kv_cache_dtype!r} on "
                             f"{hw.name}: its attention law is fitted on bf16 KV; expected auto")
