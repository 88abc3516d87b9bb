"""The calibrated cost on the GPUs of the measured vLLM runs (RTX 4090, RTX PRO 6000), from
LLMServingSim's per-layer kernel profiles of those GPUs (traces.public.llmservingsim_profiles).

One forward pass of a role (L layers, M of them MoE, tp GPUs, n requests, Q = Σq query
tokens, c the cached tokens) is priced, as :mod:`simulator.cost.measured.calibrated` does elsewhere,
as::

    t = layers(Q) + L · attention(n, Σq, Σc, Σqc, Σq²) + allreduce(Q) + lm_head(Q, n) + launch

- ``layers`` (a *cell*: the profile of this GPU, tp and per-layer shape): emb(Q) +
  final_norm(Q) + L · [2 · norm + qkv + qk_norm + rotary + o + gate_up + act + down](Q), each
  module's measured time interpolated linearly in Q between measured token counts (1 ...
  2048), made non-decreasing (running maximum); on a MoE layer the MLP is the measured MoE
  block at (Q, E_touched(Q)) (moe.csv, linear in both; E_touched as the roofline: uniform
  routing or ``routing_skew``'s Zipf law). The block is the one-GPU profile holding every
  expert; under expert parallelism (simulator.cost.features.expert_parallel) it is read at the
  rank's pairs and touched local experts, and ``allreduce`` adds the dispatch/combine traffic.
- ``attention``: an :class:`AttentionLaw` fitted to the GPU's measured attention table
  (one Attention call per row: one prefill chunk and n_d decodes). Two regimes, as vLLM's
  FlashAttention backend runs them (vllm/v1/attention/backends/flash_attn.py,
  ``FlashAttentionImpl.forward``: one varlen call over the batch; split-KV decode only
  when every request has one query token): a pure-decode batch (Σq² = Σq) reads each KV
  head once, t = a + u·n + B_kv/β; a batch with any chunk (Σq² > Σq) runs FlashAttention-2's
  split-KV kernel with one split: one CTA per (request, query head, 64 query rows) walking its
  request's whole cache, so t = a' + u'·n + e·E + ω·(F/π + B_H/β′) + B_miss/β_m, with
  B_kv = 2b·(H_kv/tp)·d·(Σc + Σq) the KV bytes, F = 4 (H/tp) d (Σqc + (Σq² + Σq)/2) the causal
  FLOPs, B_H = 2b·(H/tp)·d·(Σc + Σq) the same cache traversed once per *query* head (a decode's
  CTA pays a whole 64-row tile per KV block), E the empty CTAs of the grid (sized for the longest
  request: H/tp · (n · ceil(q̂_max/64) − Σ ceil(q_i/64)), q̂_max :func:`longest_query`),
  ω = S / min(S, CTAs) the occupancy (fewer CTAs than the S SMs: the longest CTA sets the time)
  and B_miss the re-reads of the H − H_kv other query heads that miss the L2 (the fraction of one
  KV head's slab 2b·d·(Σc + Σq) past :data:`L2_BYTES`). Measured: a 16-token chunk next to 128
  decodes of 1024 cached tokens takes 672 µs against 405 µs for the decodes alone (RTX PRO 6000,
  Llama-3.1-8B); each 64 query rows of a chunk add ~1.7 ns per other request and head.
  Non-negative least squares per regime, relative to t (:func:`fit_attention`), fitted on the
  GPU's Llama-3.1-8B tp 1 table only (a verification batch, every request k+1 tokens, falls in
  the chunked regime with E = 0; the tables hold no such batch, so it is not validated);
  :func:`attention_check` reports the error on the other bundled tables (Qwen3-32B tp 1 and 2,
  Qwen3-30B-A3B: held-out models). Not functions of the sums, so not priced: the longest
  request's own CTA when the CTAs fill the SMs, wave quantisation, and the L2 reuse that
  co-resident query heads of one group get (docs/fidelity.md).
- ``allreduce`` (tp > 1): 2 L ring all-reduces of b·h·Q bytes over the PCIe link the anchor
  configured for these runs (bench/examples/RTXPRO6000/Qwen3-32B/config.json: ``link_bw``
  16 GB/s, ``link_latency`` 20 µs; a configuration, not a measurement — no public all-reduce
  measurement of these GPUs is known), 2(tp−1) steps of λ + S/(tp·B).
- ``lm_head``: the measured LogitsProcessor at Q rows (per_sequence.csv, linear in rows up to
  its last measured count, then 2 h V / tp FLOPs per further row at the preset's fitted GEMM
  efficiency: logits at every query position, the package's convention), plus the measured
  sampler at n sequences.
- ``launch``: the execution preset's floors, as :mod:`simulator.cost.measured.calibrated` (the
  profiles ran eager and time kernels, not launch gaps).

A dense role whose (GPU, tp, shape) has no bundled cell is priced from the GPU's nearest cell
(:mod:`simulator.cost.measured.transfer`); a MoE or MLA role without its own cell, or a quantised
draft, is refused with a one-line error.

A pass's attention is evaluated by simulator.cost.tabulated.regime_attention on the law packed
over the role's layers (:attr:`LssPricer.packed`; the same bits as :meth:`AttentionLaw.seconds`'s
``x @ c`` where numpy's BLAS fuses its dot product, on any CPU), the function the compiled
vllm-v1 loop compiles; simulator.cost.measured.lss_table gives a role's PassTable.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.analytic.all2all import dispatch_seconds
from specbatch.simulator.cost.analytic.window import windowed_sums
from specbatch.simulator.cost.gpus.catalogue import GPUS
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.laws import scipy_optimize
from specbatch.simulator.cost.measured.transfer import (
    nearest_profile,
    transfer_curves,
)
from specbatch.simulator.cost.tabulated import pack_regimes, regime_attention
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import get_shape
from specbatch.traces.public.llmservingsim_profiles import bundled_profiles, read_profile

#: The anchor's configured PCIe link for its tp 2 run: (bytes/s, seconds per step).
PCIE_LINK = (16e9, 20e-6)
#: Modules of one dense decoder layer (a name absent from a profile is skipped) and their count.
LAYER_MODULES = {"layernorm": 2, "qkv_proj": 1, "qk_norm": 1, "rotary_emb": 1, "o_proj": 1,
                 "gate_up_proj": 1, "act_fn": 1, "down_proj": 1}
MLP_MODULES = ("gate_up_proj", "act_fn", "down_proj")
PASS_MODULES = ("embedding", "final_layernorm")
#: The model each GPU's attention law is fitted on.
ATTENTION_FIT_MODEL = "llama-3.1-8b"
DTYPE_BYTES = 2


#: FlashAttention-2's split-KV kernel, which vLLM's varlen call runs over a paged cache
#: (``flash_fwd_splitkv_kernel``, one split when some request has more than one query token):
#: query rows per CTA (kBlockM, 64 for every head size), so a request of q tokens is
#: ceil(q / 64) CTAs per query head and the grid is sized for the longest request.
TILE_ROWS = 64
#: L2 cache bytes per GPU (the catalogue's ``l2_bytes``: 72 MB in the RTX 4090, 128 MB in the
#: RTX PRO 6000): the KV of one head over the batch that stays resident while the other
#: query heads of its group re-read it.
L2_BYTES = {name: GPUS[name].l2_bytes for name in ("rtx4090", "rtxpro6000")}


def longest_query(n, sq, sqq):
    """The largest query length q_max the sums allow (Samuelson's bound: mean +
    sqrt((n − 1)/n · Σ(q − mean)²)): exact for one chunk among single-token requests and for
    equal lengths (a verification batch); arrays or scalars."""
    n = np.maximum(n, 1.0)
    spread = np.maximum(sqq - sq * sq / n, 0.0) * (n - 1.0) / n
    return sq / n + np.sqrt(spread)


def attention_features(shape: ModelShape, tp: int, n, sq, skv, sqkv, sqq,
                       gpu: str | None = None) -> np.ndarray:
    """[rows, 7] features of one layer's attention (module docstring): 1, n, B_kv GB, F TFLOP,
    B_H GB, E (millions of empty CTAs), B_miss GB; F and B_H are scaled by the occupancy
    ω = S / min(S, CTAs) when ``gpu`` names S and L2 (else ω = 1, B_miss = 0); arguments
    scalars or [rows]."""
    h_q = shape.heads / tp
    h_kv = max(shape.kv_heads / tp, 1.0)
    d = shape.head_dim
    n, sq, skv, sqkv, sqq = (np.asarray(x, dtype=np.float64) for x in (n, sq, skv, sqkv, sqq))
    kv = 2 * DTYPE_BYTES * h_kv * d * (skv + sq) * 1e-9
    flops = 4 * h_q * d * (sqkv + 0.5 * (sqq + sq)) * 1e-12
    trav = 2 * DTYPE_BYTES * h_q * d * (skv + sq) * 1e-9
    m_blocks = np.ceil(np.round(longest_query(n, sq, sqq), 6) / TILE_ROWS)
    tiles = np.maximum(n - 1.0 + m_blocks, np.ceil(sq / TILE_ROWS))  # <= Σ ceil(q_i / 64)
    empty = h_q * np.maximum(n * m_blocks - tiles, 0.0) * 1e-6
    miss = np.zeros_like(kv)
    if gpu is not None:
        sms = float(GPUS[gpu].sm_count)
        occupancy = sms / np.minimum(sms, np.maximum(h_q * tiles, 1.0))
        flops, trav = flops * occupancy, trav * occupancy
        slab = 2 * DTYPE_BYTES * d * (skv + sq)  # one KV head's K and V over the batch
        resident = np.clip(L2_BYTES[gpu] / np.maximum(slab, 1.0), 0.0, 1.0)
        miss = 2 * DTYPE_BYTES * (h_q - h_kv) * d * (skv + sq) * (1.0 - resident) * 1e-9
    return np.stack(np.broadcast_arrays(np.ones_like(sq), n, kv, flops, trav, empty, miss),
                    axis=-1)


#: Feature columns of each regime: decode (1, n, B_kv), chunked (1, n, F, B_H, E, B_miss).
REGIME_COLUMNS = {"decode": (0, 1, 2), "chunked": (0, 1, 3, 4, 5, 6)}


@dataclass(frozen=True)
class AttentionLaw:
    """Seconds of one layer's attention call: coefficient vectors [7] per regime, on
    :func:`attention_features` of ``gpu``."""

    decode: tuple
    chunked: tuple
    fitted_on: str
    gpu: str | None = None

    def seconds(self, shape: ModelShape, tp: int, n, sq, skv, sqkv, sqq) -> np.ndarray:
        x = attention_features(shape, tp, n, sq, skv, sqkv, sqq, self.gpu)  # [rows, 7]
        chunked = np.asarray(sqq) > np.asarray(sq)
        return np.where(chunked, x @ np.array(self.chunked), x @ np.array(self.decode))

    def packed(self, shape: ModelShape, tp: int, layers: float) -> tuple:
        """This law over ``layers`` layers of ``shape`` on ``tp`` GPUs as
        simulator.cost.tabulated.pack_regimes packs it: regime_attention prices one pass from
        it, the numpy engine's and the compiled loop's one source (:meth:`seconds` at n ≥ 1
        times ``layers``, bit for bit where numpy's BLAS fuses its dot product)."""
        h_q = shape.heads / tp
        h_kv = max(shape.kv_heads / tp, 1.0)
        sms, l2 = (0.0, 0.0) if self.gpu is None else (GPUS[self.gpu].sm_count,
                                                       L2_BYTES[self.gpu])
        return pack_regimes(layers, h_q, h_kv, shape.head_dim, DTYPE_BYTES, TILE_ROWS, sms, l2,
                            self.decode, self.chunked)


def table_sums(rows) -> tuple[np.ndarray, ...]:
    """(n, Σq, Σc, Σqc, Σq²) # [rows] of attention.csv rows: one chunk, n_d decodes."""
    pc, kp = rows["prefill_chunk"].to_numpy(), rows["kv_prefill"].to_numpy()
    nd, kd = rows["n_decode"].to_numpy(), rows["kv_decode"].to_numpy()
    return (nd + (pc > 0), pc + nd, kp + nd * kd, pc * kp + nd * kd, pc * pc + nd)


def attention_rows(gpu: str, model: str, tp: int):
    """The bundled attention rows of (gpu, model, tp) with a non-empty batch, their sums and
    the model's shape."""
    ps = bundled_profiles()[(gpu, model, tp)]
    rows = read_profile(ps.files["attention"], "attention")
    rows = rows[(rows["prefill_chunk"] + rows["n_decode"]) > 0]
    return rows, table_sums(rows), get_shape(str(ps.config))


def fit_attention(shape: ModelShape, tp: int, sums: tuple, seconds: np.ndarray,
                  fitted_on: str, gpu: str | None = None) -> AttentionLaw:
    """NNLS of the :class:`AttentionLaw` per regime to measured calls: ``sums`` the (n, Σq,
    Σc, Σqc, Σq²) # [rows] of each call, ``seconds`` # [rows]; residuals relative to t.
    (Relative weights were kept from the two-term law, where t^(-1/2) weights fit the table's
    long rows better but over-priced the :data:`SERVING` region.) ``gpu`` names the SM count
    and L2 of the occupancy and miss features (None: ω = 1, no misses)."""
    x = attention_features(shape, tp, *sums, gpu)  # [rows, 7]
    t = np.asarray(seconds, dtype=np.float64)  # [rows]
    chunked = np.asarray(sums[4]) > np.asarray(sums[1])
    coef = {}
    for regime, mask in (("decode", ~chunked), ("chunked", chunked)):
        cols = list(REGIME_COLUMNS[regime])
        sol, _ = scipy_optimize().nnls(x[mask][:, cols] / t[mask, None], np.ones(int(mask.sum())))
        full = np.zeros(x.shape[1])
        full[cols] = sol
        coef[regime] = tuple(float(v) for v in full)
    return AttentionLaw(coef["decode"], coef["chunked"], fitted_on, gpu)


@functools.lru_cache(maxsize=4)
def fitted_attention(gpu: str) -> AttentionLaw:
    """The :class:`AttentionLaw` of ``gpu``: :func:`fit_attention` on its
    :data:`ATTENTION_FIT_MODEL` tp 1 table."""
    rows, sums, shape = attention_rows(gpu, ATTENTION_FIT_MODEL, 1)
    return fit_attention(shape, 1, sums, rows["time_us"].to_numpy() * 1e-6,
                         f"{gpu} {ATTENTION_FIT_MODEL} tp 1", gpu)


#: The rows a serving step of the bundled runs reaches (2048-token budget, ShareGPT lengths):
#: a cache of at most 2048 tokens before the chunk, 16 or more decodes of 256 ... 4096.
SERVING = {"kv_prefill": (0, 2048), "n_decode": (16, 256), "kv_decode": (256, 4096)}


@functools.lru_cache(maxsize=4)
def attention_check(gpu: str) -> dict:
    """The fitted law's error on every bundled attention table of ``gpu``: per (model, tp)
    and regime, the MAPE over rows and the time-weighted error Σ(t̂ − t) / Σt, over the whole
    table and over its :data:`SERVING` rows."""
    law = fitted_attention(gpu)
    out = {}
    for (g, model, tp), ps in bundled_profiles().items():
        if g != gpu or "attention" not in ps.files:
            continue
        rows, sums, shape = attention_rows(gpu, model, tp)
        t = rows["time_us"].to_numpy() * 1e-6
        pred = law.seconds(shape, tp, *sums)
        chunked = sums[4] > sums[1]
        serving = np.ones(len(rows), dtype=bool)
        for col, (lo, hi) in SERVING.items():
            serving &= rows[col].between(lo, hi).to_numpy()
        for regime, mask in (("decode", ~chunked), ("chunked", chunked)):
            rec = {"held_out": model != ATTENTION_FIT_MODEL or tp != 1}
            for name, m in (("", mask), ("serving_", mask & serving)):
                err = pred[m] / t[m] - 1
                rec.update({f"{name}rows": int(m.sum()),
                            f"{name}mape": round(float(np.abs(err).mean()), 4),
                            f"{name}weighted": round(float((pred[m] - t[m]).sum()
                                                           / t[m].sum()), 4)})
            out[f"{model}|tp{tp}|{regime}"] = rec
    return out


def same_layer(a: ModelShape, b: ModelShape) -> bool:
    """Whether two shapes have the same decoder layer (the cell's key; layers may differ)."""
    keys = ("hidden", "heads", "kv_heads", "head_dim", "vocab", "experts", "top_k",
            "expert_intermediate", "shared_intermediate", "is_mla")
    dense = not a.is_moe or a.moe_layers < a.layers
    return (all(getattr(a, k) == getattr(b, k) for k in keys)
            and (not dense or a.intermediate == b.intermediate))


def find_profile(gpu: str, shape: ModelShape, tp: int):
    """The bundled ProfileSet pricing ``shape`` on ``tp`` ``gpu`` GPUs, or None."""
    for (g, _, t), ps in bundled_profiles().items():
        if g == gpu and t == tp and "dense" in ps.files and same_layer(
                get_shape(str(ps.config)), shape):
            return ps
    return None


def curve(rows, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(grid [G], seconds [G]) of one module's rows, non-decreasing (running maximum)."""
    grid = rows[key].to_numpy(dtype=np.float64)
    return grid, np.maximum.accumulate(rows["time_us"].to_numpy(dtype=np.float64) * 1e-6)


def interp(c: tuple[np.ndarray, np.ndarray], x: float) -> float:
    """Linear in x, clamped below the grid, extrapolated from the top two points above."""
    grid, secs = c
    if x <= grid[-1] or len(grid) < 2:
        return float(np.interp(x, grid, secs))
    slope = (secs[-1] - secs[-2]) / (grid[-1] - grid[-2])
    return float(secs[-1] + slope * (x - grid[-1]))


@dataclass
class LssPricer:
    """One role's pass on an LLMServingSim-profiled GPU (module docstring)."""

    shape: ModelShape
    tp: int
    hw: object  # simulator.cost.gpus.hardware.Hardware
    profile: object  # traces.public.llmservingsim_profiles.ProfileSet
    law: AttentionLaw
    launch: tuple[float, float]  # (fixed s, host floor s)
    consts: object  # the roofline's PassConstants (experts touched)
    memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        dense = read_profile(self.profile.files["dense"], "dense")
        self.modules = {name: curve(rows, "tokens") for name, rows in dense.groupby("layer")}
        seq = read_profile(self.profile.files["per_sequence"], "per_sequence")
        self.per_seq = {name: curve(rows, "sequences") for name, rows in seq.groupby("layer")}
        src = get_shape(str(self.profile.config))
        self.transferred = not (same_layer(src, self.shape) and self.profile.tp == self.tp)
        if self.transferred:  # a neighbour's cell (simulator.cost.measured.transfer)
            self.modules, self.per_seq = transfer_curves(self.modules, self.per_seq, src,
                                                         self.profile.tp, self.shape, self.tp,
                                                         self.hw)
        self.moe = None
        if self.shape.is_moe:
            if "moe" not in self.profile.files:
                raise SpecbatchError(f"cost 'calibrated': no MoE block profile of "
                                     f"{self.shape.name} on {self.hw.name}")
            moe = read_profile(self.profile.files["moe"], "moe")
            self.moe = {int(e): curve(rows, "tokens")
                        for e, rows in moe.groupby("activated_experts")}
        #: the attention law packed over all layers and over one (sliding windows' share)
        self.packed = self.law.packed(self.shape, self.tp, self.shape.layers)
        self.packed_one = self.law.packed(self.shape, self.tp, 1)

    def moe_block(self, q: float) -> float:
        """The MoE block at (Q, E_touched(Q)): linear in tokens, then in activated experts;
        under expert parallelism at the rank's pairs (consts.moe_tokens: dp · Q / ep_size
        tokens' worth) and its touched local experts (simulator.cost.features.expert_parallel)."""
        return self.block_at(self.consts.moe_tokens(q), self.consts.experts_touched(q))

    def block_at(self, tokens: float, touched: float) -> float:
        """The measured MoE block at ``tokens`` tokens' pairs and ``touched`` experts."""
        es = sorted(self.moe)
        vals = [interp(self.moe[e], tokens) for e in es]
        return float(np.interp(touched, es, vals))

    def layers(self, q: float) -> float:
        s = self.shape
        moe_layers = s.moe_layers if s.is_moe else 0
        block, mlp = 0.0, 0.0
        for name, count in LAYER_MODULES.items():
            if name in self.modules:
                t = count * interp(self.modules[name], q)
                block += t
                mlp += t if name in MLP_MODULES else 0.0
        total = s.layers * block
        if moe_layers:
            total += moe_layers * (self.moe_block(q) - mlp)
        return total + sum(interp(self.modules[m], q) for m in PASS_MODULES if m in self.modules)

    def head(self, q: float, n: float) -> float:
        """The LM head at ``q`` logit rows and the sampler at ``n`` sequences."""
        return self.logits(q) + self.sampler_at(n)

    def logits(self, q: float) -> float:
        """The measured LogitsProcessor at ``q`` rows (clamped below its first row), past its
        last row the preset's fitted GEMM rate (module docstring)."""
        grid, secs = self.per_seq["lm_head"]
        lm = float(np.interp(q, grid, secs))
        if q > grid[-1]:
            per_row = 2 * self.shape.hidden * self.shape.vocab / self.tp
            lm += (q - grid[-1]) * per_row / (self.hw.peak_flops * self.hw.compute_eff)
        return lm

    def sampler_at(self, n: float) -> float:
        """The measured sampler at max(n, 1) sequences (0 where the profile has none)."""
        sampler = self.per_seq.get("sampler")
        return interp(sampler, max(n, 1.0)) if sampler is not None else 0.0

    def allreduce(self, q: float) -> float:
        if self.consts.ep_size > 1:  # + the experts' dispatch/combine (expert_parallel)
            return self.tp_allreduce(q) + self.ep_dispatch(q)
        return self.tp_allreduce(q)

    def ep_dispatch(self, q: float, total: float | None = None) -> float:
        """t_a2a of the M MoE layers over the anchor's PCIe link for ``total`` tokens of all
        DP ranks (None: the other ranks carry Q each too;
        simulator.cost.features.expert_parallel)."""
        s, dp = self.shape, self.consts.ep_dp
        return s.moe_layers * dispatch_seconds(dp * q if total is None else total, s.hidden,
                                               s.experts, dp, *PCIE_LINK, DTYPE_BYTES)

    def tp_allreduce(self, q: float) -> float:
        if self.tp == 1:
            return 0.0
        bw, lat = PCIE_LINK
        nbytes = DTYPE_BYTES * self.shape.hidden * q
        one = 2 * (self.tp - 1) * (lat + nbytes / (self.tp * bw))
        return 2 * self.shape.layers * one

    def parts(self, n: float, sq: float, skv: float, sqkv: float, sqq: float,
              window: tuple[float, float] | None = None, rows: float | None = None) -> dict:
        """Seconds per part of one pass (they sum to :meth:`total`); the LM head at ``rows``
        logit rows (None: Σq; simulator.cost.analytic.roofline's docstring)."""
        names = ("layers", "attention", "allreduce", "lm_head", "launch")
        if sq <= 0.0:
            return dict.fromkeys(names, 0.0)
        cached = self.memo.get(sq)
        if cached is None:
            cached = (self.layers(sq), self.allreduce(sq))
            if len(self.memo) < 65536:
                self.memo[sq] = cached
        layers, comm = cached
        n = max(float(n), 1.0)
        attn = self.attention(n, sq, skv, sqkv, sqq, window)
        head = self.head(sq if rows is None else min(float(rows), sq), n)
        fixed, floor = self.launch
        launch = fixed + max(0.0, floor - (layers + attn + comm + head))
        return dict(zip(names, (layers, attn, comm, head, launch)))

    def attention(self, n: float, sq: float, skv: float, sqkv: float, sqq: float,
                  window: tuple[float, float] | None) -> float:
        """L layers of the fitted per-layer attention law at n ≥ 1 (simulator.cost.tabulated.
        regime_attention on :attr:`packed`: the compiled loop's source too); with
        sliding-window layers, L − L_s at the full sums and L_s at the sums a sliding layer
        presents (simulator.cost.analytic.window .windowed_sums: the law was fitted on full
        attention and is applied per layer)."""
        s = self.shape
        if not s.is_windowed:
            return regime_attention(self.packed, n, sq, skv, sqkv, sqq)
        require(window is not None, f"model {s.name}: has sliding-window layers, so a pass is "
                                    "priced with its window sums (K^W, P^W)")
        full = (s.layers - s.sliding_layers) * regime_attention(self.packed_one, n, sq, skv,
                                                                sqkv, sqq)
        w_sq, w_skv, w_sqkv, w_sqq = windowed_sums(sq, skv, sqkv, sqq, window)
        return full + s.sliding_layers * regime_attention(self.packed_one, n, w_sq, w_skv,
                                                          w_sqkv, w_sqq)

    def total(self, sq: float, skv: float, sqkv: float, sqq: float, n: float = 0.0,
              window: tuple[float, float] | None = None, rows: float | None = None) -> float:
        p = self.parts(n, sq, skv, sqkv, sqq, window, rows)
        return (((p["layers"] + p["attention"]) + p["allreduce"]) + p["lm_head"]) + p["launch"]

    def split(self, sq: float, skv: float, sqkv: float, sqq: float, n: float = 0.0,
              window: tuple[float, float] | None = None, rows: float | None = None) -> dict:
        return self.parts(n, sq, skv, sqkv, sqq, window, rows)

    def cell_check(self) -> dict:
        """Error of the cell's interpolation in tokens: the layers(Q) sum at each interior
        measured token count left out and interpolated from its two neighbours."""
        grid = next(iter(self.modules.values()))[0]
        secs = np.array([self.layers(float(q)) for q in grid])  # [G]
        pred = secs[:-2] + (secs[2:] - secs[:-2]) * (grid[1:-1] - grid[:-2]) / (
            grid[2:] - grid[:-2])
        err = pred / secs[1:-1] - 1  # [G - 2]
        return {"mape": round(float(np.abs(err).mean()), 4),
                "mean_signed": round(float(err.mean()), 4), "rows": int(err.size),
                "check": "each token count left out, interpolated from its neighbours"}

    def source(self) -> dict:
        """The source record of this role (simulator.cost.measured.calibrated's ``sources``)."""
        ps = self.profile
        cell = f"llmservingsim {ps.gpu} {ps.model} tp {ps.tp}"
        layers = {"source": "public per-layer profile cell"
                  + (", MoE block at E_touched(Q)" if self.moe else ""),
                  "cell": cell, "validated": self.cell_check()}
        if self.transferred:
            cell += f" transferred to {self.shape.name} tp {self.tp}"
            layers = {"source": "a profiled neighbour's cell scaled by roofline and byte "
                                "ratios (simulator.cost.measured.transfer)", "cell": cell,
                      "validated": transfer_check(ps.gpu) or None}
        comm = ({"source": "none (tp 1)"} if self.tp == 1 else
                {"source": f"ring all-reduce over the anchor's configured PCIe link "
                           f"({PCIE_LINK[0] / 1e9:g} GB/s, {PCIE_LINK[1] * 1e6:g} µs; not "
                           "measured)"})
        checks = attention_check(ps.gpu)
        held = {k: v for k, v in checks.items() if v["held_out"]}
        return {"model": self.shape.name, "tp": self.tp,
                "layers": layers,
                "attention": {"source": f"attention law fitted on {self.law.fitted_on}"
                                        + (f", {self.shape.sliding_layers} of "
                                           f"{self.shape.layers} layers at a "
                                           f"{self.shape.sliding_window}-token window"
                                           if self.shape.is_windowed else ""),
                              "validated": held or checks},
                "allreduce": comm,
                "lm_head": {"source": "measured LogitsProcessor rows + sampler at n"},
                "summary": cell}


def lss_pricer(shape: ModelShape, tp: int, hw, launch: tuple[float, float], consts,
               weight_bits: int, full_bits: int) -> LssPricer:
    """The :class:`LssPricer` of ``shape`` on ``tp`` ``hw`` GPUs, or the one-line refusal."""
    if weight_bits < full_bits:
        raise SpecbatchError(f"cost 'calibrated': draft_weight_bits {weight_bits} on "
                             f"{hw.name}: its per-layer profiles are bf16; expected 16")
    ps = find_profile(hw.name, shape, int(tp))
    if ps is None and not (shape.is_moe or shape.is_mla):
        ps = nearest_profile(hw.name, shape)
    if ps is None:
        have = ", ".join(f"{m} tp {t}" for g, m, t in bundled_profiles() if g == hw.name)
        raise SpecbatchError(f"cost 'calibrated': no per-layer profile of {shape.name} at tp "
                             f"{tp} on {hw.name} (a MoE or MLA shape needs its own); "
                             f"bundled: {have}")
    return LssPricer(shape, int(tp), hw, ps, fitted_attention(hw.name), launch, consts)


def lss_gpu(gpu: str) -> bool:
    """Whether the bundled LLMServingSim profiles price ``gpu`` (else the Vidur-based path)."""
    return any(g == gpu for g, _, _ in bundled_profiles())


@functools.lru_cache(maxsize=4)
def transfer_check(gpu: str) -> dict:
    """Per other dense cell of ``gpu``: layers(Q) priced from its nearest neighbour against
    its own measured modules, at every measured token count (MAPE, mean signed error)."""
    out = {}
    for (g, model, tp), ps in bundled_profiles().items():
        if g != gpu or "moe" in ps.files:
            continue
        shape = get_shape(str(ps.config))
        src = nearest_profile(gpu, shape, exclude=model)
        if src is None:
            continue
        hw, law = get_hardware(gpu), fitted_attention(gpu)
        own = LssPricer(shape, tp, hw, ps, law, (0.0, 0.0), None)
        moved = LssPricer(shape, tp, hw, src, law, (0.0, 0.0), None)
        grid = next(iter(own.modules.values()))[0]
        want = np.array([own.layers(float(q)) for q in grid])  # [G]
        got = np.array([moved.layers(float(q)) for q in grid])  # [G]
        err = got / want - 1
        out[f"{model}|tp{tp}"] = {"from": f"{src.model} tp {src.tp}",
                                  "mape": round(float(np.abs(err).mean()), 4),
                                  "mean_signed": round(float(err.mean()), 4),
                                  "rows": int(err.size)}
    return out
