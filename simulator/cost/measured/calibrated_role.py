"""One role's pass in the calibrated cost model on every GPU but the RTX 4090 and RTX PRO 6000
(those: :mod:`simulator.cost.measured.lss`): :class:`RolePricer` prices it from Vidur's
measured table cells and the calibrated laws, and :func:`role_source` names each part's source.

Apart from the cost model (:mod:`simulator.cost.measured.calibrated`, which builds a role's
pricer and answers the engine) because it is the pricing itself: the five parts of
``t = layers(Q) + attention(q, c) + allreduce(Q) + lm_head(Q) + launch``, each from the best
source available:

- ``layers``: every decoder layer's non-attention ops plus the input embedding, exactly what
  Vidur's mlp.csv measures. Where the bundled table (traces.public.vidur_profiles, Vidur commit
  7d47513) has a cell with this GPU, tp and per-layer shape (hidden, heads, KV heads, MLP
  width; e.g. vicuna-7b = Llama-2-7B, llama-3.1-70b = Llama-2-70B), it is emb(Q) + L · block(Q)
  made non-decreasing in Q (running maximum: the measured medians dip by a few % where the
  GEMM kernel choice changes; a pass with more tokens is never priced cheaper) and
  interpolated linearly in Q between measured token counts (beyond the last one, the edge
  value times the calibrated law's growth). Otherwise the calibrated laws of
  :mod:`simulator.cost.measured.laws` (GEMM laws with their shape-neighbour correction, small-op
  laws; fitted on all bundled models of the GPU; a GPU the
  data do not cover borrows the nearest one's law with its datasheet peaks scaled:
  h200 <- h100, l40s <- a40). A quantised draft (``draft_weight_bits`` < 16) is always priced
  by the law, its weight bytes at bits/8 + 4/128 per projection weight; so is a quantised
  dense target (``quantization``, simulator.cost.analytic.precision): each projection GEMM's stream
  term over the byte ratio and, for W8A8 FP8, its compute term at the datasheet FP8/bf16 peak
  ratio (:func:`quantized_layer_seconds`; MoE / MLA shapes per GEMM kind: projections,
  routers at bf16, experts in their own bytes, :func:`format_scales`), a roofline projection,
  not fitted on quantised data (none is bundled).
- MoE / MLA shapes (traces.models.shapes; THEORY.md §8) are never priced from a table cell: the
  laws price their GEMMs as the roofline counts their bytes (:func:`sparse_gemms`): dense
  attention and norms every layer; on the M MoE layers the router, the shared MLP and the
  E_touched(Q) experts the pass touches (uniform routing or ``routing_skew``'s Zipf law, as
  the roofline) as one grouped GEMM of Q k / E_touched rows per expert; MLA's attention
  weights as one K = h GEMM. Expert parallelism is not modelled. Not validated against a
  measured MoE or MLA pass.
- ``attention``: analytic, max(F_attn / π, B_kv / β) with the roofline's attention FLOPs and
  KV bytes (simulator.cost.analytic.roofline's PassConstants: MLA's latent cache included) and the
  fitted GEMM law's achieved π, β; a model with sliding-window layers prices its L_s sliding layers
  at their windowed lengths (simulator.cost.analytic.window: keys min(c, W − 1), pairs P^W) and the
  rest at the full ones, the same law per layer. ASSUMED: FlashAttention
  / FlashInfer decode is memory-bound on KV bytes and reaches the bandwidth weight streaming
  reaches; no per-kernel floor beyond the launch term. No measured attention source is
  bundled (Vidur's attention.csv files are absent from its snapshot).
- ``allreduce`` (tp > 1): two all-reduces of the b·h·Q-byte hidden state per layer. Up to
  8 MiB on 2/4/6/8 GPUs vLLM runs its custom all-reduce (:data:`CUSTOM_AR_MAX_BYTES`), priced by the
  roofline's latency + ring formula (ASSUMED: no measurement of it is bundled); above, NCCL, read
  from Vidur's measured curve of the GPU's DGX cluster (h100_dgx, a100_dgx; the median over
  half-octave size bins, made non-decreasing, interpolated log-log) for that world size; elsewhere
  the roofline's formula.
- ``lm_head``: the fitted GEMM law (the MLP-up law: both are N >> K) for K = h, N = V/tp over
  all Q tokens (as the roofline: verification needs logits at every position).
- ``launch``: the execution preset's floors (hardware.EXECUTIONS): ``cuda_graph`` adds
  pass + L · layer latency; ``eager`` makes the pass max(GPU parts, host floor) by charging
  max(0, floor − GPU parts) here. Vidur's per-op CUDA-event times hold no launch gaps.

Validated errors (benchmarks/cost_vs_public.py, docs/simulate.md): read from
``simulator/cost/measured/data/calibrated_validation.json`` (leave-one-shape-out for the laws,
held-out token counts for the table cells) and reported with each source.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from specbatch.simulator.cost.analytic.precision import WeightFormat, describe
from specbatch.simulator.cost.analytic.roofline import PassConstants
from specbatch.simulator.cost.analytic.window import attention_work
from specbatch.simulator.cost.gpus.catalogue import allreduce_cluster, proxy_of
from specbatch.simulator.cost.gpus.hardware import (
    FULL_WEIGHT_BITS,
    Hardware,
    quantized_weight_bytes,
)
from specbatch.simulator.cost.measured.laws import (
    GEMMS,
    GpuFit,
    embedding_seconds,
    gemm_seconds,
    layer_seconds,
)
from specbatch.simulator.cost.measured.sources import (
    CUSTOM_AR_MAX_BYTES,
    curve_seconds,
    layer_shape,
    scaled_gemm_seconds,
    sparse_expert_seconds,
    sparse_layers,
    uses_custom_allreduce,
    validation,
)
from specbatch.traces.models.model_shape import ModelShape


@dataclass(frozen=True)
class TableCell:
    """One measured table of a role's decoder layers: the public (or user) profile of one
    (GPU, model, tp), as layers(Q) seconds on its token grid, made non-decreasing in Q."""

    model: str  # the profile's model name
    grid: np.ndarray  # [grid] token counts Q, increasing
    seconds: np.ndarray  # [grid] embedding + L x layer seconds at each Q
    folder: str | None  # the user's import-vidur folder it came from; None: the bundled one


@dataclass
class RolePricer:
    """Everything one role's pass needs: its shape, tp, laws, table cell and sources."""

    shape: ModelShape
    tp: int
    hw: Hardware
    fit: GpuFit
    weight_bits: int
    fmt: WeightFormat  # the target's weight format (simulator.cost.analytic.precision)
    cell: TableCell | None  # the measured table of its layers, or None (the law)
    allreduce: tuple | None  # a measured all-reduce curve, or None
    launch: tuple[float, float]  # (fixed s, host floor s)
    consts: PassConstants  # the roofline's constants: attention FLOPs, KV bytes, experts
    memo: dict = field(default_factory=dict)  # Q -> (layers, lm_head, allreduce) seconds

    def law_layers(self, q: float) -> float:
        """The calibrated law's layers(Q) (module docstring)."""
        if self.shape.is_moe or self.shape.is_mla or self.shape.attention_head_dim:
            touched = self.consts.experts_touched(q) if self.consts.experts else 0.0
            scales = format_scales(self.fmt, self.hw) if self.fmt.quantized else None
            return sparse_layers(self.fit, self.shape, self.tp, q, touched, scales)
        return float(self.law_layers_at(np.array([q]))[0])

    def law_layers_at(self, qa: np.ndarray) -> np.ndarray:
        """:meth:`law_layers` of a dense shape at every token count of qa # [rows], the same
        array expressions (:meth:`law_layers` is its one-row call; the PassTable builder,
        simulator.cost.measured.calibrated_table, takes every Q at once)."""
        ls = layer_shape(self.shape)
        per_layer = layer_seconds(self.fit, ls, self.tp, qa)
        if self.weight_bits < FULL_WEIGHT_BITS:  # fewer weight bytes: the GEMMs' stream term
            dims = ls.gemm_dims(self.tp)
            ratio = quantized_weight_bytes(self.weight_bits) / 2.0
            for op in GEMMS:
                law = self.fit.gemm[op]
                k, n = dims[op]
                full = gemm_seconds(self.fit, op, qa, k, n)
                light = full * (replace(law, bandwidth=law.bandwidth / ratio).seconds(qa, k, n)
                                / law.seconds(qa, k, n))
                per_layer = per_layer - full + np.minimum(full, light)
        elif self.fmt.quantized:
            per_layer = quantized_layer_seconds(self.fit, ls, self.tp, qa, per_layer, self.fmt,
                                                self.hw)
        return embedding_seconds(self.fit, ls, self.tp, qa) + self.shape.layers * per_layer

    def expert_share(self, q: float) -> float:
        """The routed experts' share of the law's layers(Q) (0 for a dense shape): ``cost
        show`` splits :meth:`layers` by it into layers and experts."""
        if not self.shape.is_moe or not self.consts.experts or q <= 0:
            return 0.0
        touched = self.consts.experts_touched(q)
        scales = format_scales(self.fmt, self.hw) if self.fmt.quantized else None
        experts = sparse_expert_seconds(self.fit, self.shape, self.tp, q, touched, scales)
        return experts / self.law_layers(q)

    def monotone(self, name: str, fn, q: float) -> float:
        """``fn`` made non-decreasing in Q, the scalar twin of laws.envelope over
        the correction grid: the corrected laws follow measured kernel-choice jumps, but a
        pass with more tokens is never priced cheaper (as the table cells)."""
        corr = next(iter((self.fit.corrections or {}).values()), None)
        if corr is None:
            return fn(q)
        vals = self.memo.get(name)
        if vals is None:  # running maximum of fn on the grid # [G]
            vals = np.maximum.accumulate(np.array([fn(float(g)) for g in corr.grid]))
            self.memo[name] = vals
        grid = corr.grid
        if q <= grid[-1]:
            return float(np.interp(q, grid, vals))
        return float(vals[-1] * fn(q) / fn(float(grid[-1])))

    def head(self, q: float) -> float:
        return float(self.head_at(np.array([q]))[0])

    def head_at(self, qa: np.ndarray) -> np.ndarray:
        """The LM head's GEMM law at every token count of qa # [rows] (:meth:`head`'s)."""
        s = self.shape
        return gemm_seconds(self.fit, "mlp_up_proj", qa, s.hidden, s.vocab / self.tp)

    def layers(self, q: float) -> float:
        if self.cell is None:
            return self.monotone("layers", self.law_layers, q)
        grid, secs = self.cell.grid, self.cell.seconds
        if q <= grid[-1]:
            return float(np.interp(q, grid, secs))
        return float(secs[-1] * self.law_layers(q) / self.law_layers(grid[-1]))

    def per_token_parts(self, q: float) -> tuple[float, float, float]:
        """(layers, lm_head, allreduce) seconds of a pass with Q = ``q`` (memoised)."""
        parts = self.memo.get(q)
        if parts is None:
            s = self.shape
            head = self.monotone("lm_head", self.head, q)
            comm = 0.0
            if self.tp > 1:
                nbytes = self.hw.dtype_bytes * s.hidden * q
                comm = 2 * s.layers * self.one_allreduce(nbytes)
            parts = (self.layers(q), head, comm)
            if len(self.memo) < 65536:
                self.memo[q] = parts
        return parts

    def one_allreduce(self, nbytes: float) -> float:
        """Seconds of one all-reduce of ``nbytes``: vLLM's custom all-reduce (roofline
        formula: latency + ring bytes / link) up to its max size, else the measured NCCL
        curve where one exists, else the same formula."""
        if self.allreduce is not None and not uses_custom_allreduce(self.tp, nbytes):
            return curve_seconds(self.allreduce, nbytes)
        return (self.hw.allreduce_latency
                + 2 * (self.tp - 1) / self.tp * nbytes / self.hw.link_bw)

    def attention(self, sq: float, skv: float, sqkv: float, sqq: float,
                  window: tuple[float, float] | None = None) -> float:
        """max(F_attn / π, B_kv / β): the roofline's attention FLOPs and KV bytes (MLA's
        latent cache and expanded FLOPs included; sliding layers at their ``window`` sums,
        simulator.cost.analytic.window) at the fitted GEMM law's π and β."""
        c, law = self.consts, self.fit.gemm["mlp_up_proj"]
        if c.sliding_layers:
            flops, nbytes = attention_work(c, sq, skv, sqkv, sqq, window)
            return max(flops / law.flops, nbytes / law.bandwidth)
        flops = c.attn_flops * (sqkv + 0.5 * (sqq + sq))
        nbytes = c.kv_bytes * (skv + 2.0 * sq)
        return max(flops / law.flops, nbytes / law.bandwidth)

    def sampled_head(self, sq: float, head: float, rows: float | None) -> float:
        """The LM head at ``rows`` logit rows (None: ``head``, its price at every query token;
        simulator.cost.analytic.roofline's docstring: vLLM computes logits where it samples)."""
        if rows is None or rows >= sq:
            return head
        return self.monotone("lm_head", self.head, float(rows)) if rows > 0 else 0.0

    def total(self, sq: float, skv: float, sqkv: float, sqq: float, n: float = 0.0,
              window: tuple[float, float] | None = None, rows: float | None = None) -> float:
        """The pass time: :meth:`split`'s parts summed in its order (bit-identical), without
        building the dict (the engine's hot path); ``n`` is not used here; the LM head at
        ``rows`` logit rows (None: every query token)."""
        if sq <= 0.0:
            return 0.0
        layers, head, comm = self.per_token_parts(sq)
        head = self.sampled_head(sq, head, rows)
        attn = self.attention(sq, skv, sqkv, sqq, window)
        fixed, floor = self.launch
        launch = fixed + max(0.0, floor - (layers + attn + comm + head))
        return (((layers + attn) + comm) + head) + launch

    def split(self, sq: float, skv: float, sqkv: float, sqq: float, n: float = 0.0,
              window: tuple[float, float] | None = None, rows: float | None = None) -> dict:
        """Seconds per part (module docstring); they sum to the pass time."""
        if sq <= 0.0:
            return dict.fromkeys(("layers", "attention", "allreduce", "lm_head", "launch"), 0.0)
        layers, head, comm = self.per_token_parts(sq)
        head = self.sampled_head(sq, head, rows)
        attn = self.attention(sq, skv, sqkv, sqq, window)
        fixed, floor = self.launch
        gpu = layers + attn + comm + head
        return {"layers": layers, "attention": attn, "allreduce": comm, "lm_head": head,
                "launch": fixed + max(0.0, floor - gpu)}


def format_scales(fmt: WeightFormat, hw: Hardware) -> dict:
    """GEMM kind -> (byte ratio, compute speed-up) of ``fmt`` against the bf16 laws: bytes per
    weight / dtype bytes, and under W8A8 FP8 the datasheet ratio peak_fp8 / peak (routers and
    the LM head stay bf16)."""
    speed = hw.fp8_peak_flops / hw.peak_flops if fmt.w8a8 else 1.0
    b = float(hw.dtype_bytes)
    return {"projection": (fmt.linear_bytes / b, speed if fmt.linear_bytes < b else 1.0),
            "expert": (fmt.expert_bytes / b, speed if fmt.expert_bytes < b else 1.0)}


def quantized_layer_seconds(fit: GpuFit, ls, tp: int, qa: np.ndarray, per_layer: np.ndarray,
                            fmt: WeightFormat, hw: Hardware) -> np.ndarray:
    """``per_layer`` seconds # [1] with every projection GEMM re-priced in ``fmt``
    (:func:`~simulator.cost.measured.sources.scaled_gemm_seconds` at
    :func:`format_scales`' projection ratios). A roofline projection of bf16-fitted laws."""
    dims = ls.gemm_dims(tp)
    ratio, speed = format_scales(fmt, hw)["projection"]
    for op in GEMMS:
        k, n = dims[op]
        full = gemm_seconds(fit, op, qa, k, n)
        per_layer = per_layer - full + scaled_gemm_seconds(fit, op, qa, k, n, ratio, speed)
    return per_layer


def cell_check(grid: np.ndarray, secs: np.ndarray) -> dict | None:
    """Error of the cell's interpolation: each interior token count left out and priced
    from its two neighbours (twice the spacing the model interpolates over)."""
    if len(grid) < 3:
        return None
    pred = secs[:-2] + (secs[2:] - secs[:-2]) * (grid[1:-1] - grid[:-2]) / (grid[2:] - grid[:-2])
    err = pred / secs[1:-1] - 1  # [grid - 2]
    return {"mape": round(float(np.abs(err).mean()), 4),
            "mean_signed": round(float(err.mean()), 4), "rows": int(err.size),
            "check": "each token count left out, interpolated from its neighbours"}


def role_source(r: RolePricer, gpu: str) -> dict:
    """The source record of one role (see :meth:`CalibratedCost.sources`)."""
    checks = validation()
    proxy = proxy_of(gpu)
    if r.cell is not None:
        cell = r.cell
        origin = "vidur" if cell.folder is None else f"user profile {cell.folder}:"
        layers = {"source": "public profile cell" if cell.folder is None else "user profile cell",
                  "cell": f"{origin} {gpu} {cell.model} tp {r.tp}",
                  "validated": cell_check(cell.grid, cell.seconds)}
    else:
        how = (f"calibrated roofline ({proxy} law scaled to {gpu}'s datasheet peaks; not "
               f"validated on {gpu})" if proxy else f"calibrated roofline ({gpu} law)")
        if r.weight_bits < FULL_WEIGHT_BITS:
            how += f", projections at {r.weight_bits} bits"
        if r.fmt.quantized:
            how += (f", {describe(r.shape, 'auto', r.hw)} (a roofline projection of the bf16 "
                    "laws, not fitted on quantised data)")
        # what the validated laws price no measured pass of: said after their error
        unchecked = [text for flag, text in (
            (r.shape.is_moe, "MoE experts touched as one grouped GEMM"),
            (r.shape.is_mla, "MLA attention weights as one GEMM")) if flag]
        layers = {"source": how,
                  "validated": checks.get("lomo", {}).get(f"{proxy or gpu}|tp{r.tp}")}
        if unchecked:
            layers["not_validated"] = ", ".join(unchecked)
    if r.tp == 1:
        comm = {"source": "none (tp 1)"}
    elif r.allreduce is not None:
        cluster = allreduce_cluster(gpu)
        comm = {"source": f"vLLM custom all-reduce up to {CUSTOM_AR_MAX_BYTES >> 20} MiB "
                          "(roofline latency + ring bytes; assumed, not validated), measured "
                          f"NCCL curve vidur {cluster} world {r.tp} above",
                "validated": checks.get("allreduce", {}).get(f"{cluster}|{r.tp}")}
    else:
        comm = {"source": "roofline all-reduce (latency + ring bytes; not validated)"}
    return {"model": r.shape.name, "tp": r.tp, "layers": layers,
            "attention": {"source": "analytic (memory-bound on KV bytes at the fitted "
                                    "bandwidth; not validated)" + window_note(r.shape)},
            "allreduce": comm, "lm_head": {"source": "calibrated GEMM law"},
            "summary": layers["source"] if r.cell is None else layers["cell"]}


def window_note(shape: ModelShape) -> str:
    """``, L_s of L layers within a W-token window`` for a sliding-window shape, else ''."""
    if not shape.is_windowed:
        return ""
    return (f", {shape.sliding_layers} of {shape.layers} layers within a "
            f"{shape.sliding_window}-token window")

