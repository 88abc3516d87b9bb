"""The roofline cost model: step time from FLOPs, bytes and fixed latencies of one GPU preset.

Per forward pass of a model with L layers, hidden size h, vocabulary V, P_layers = L · (weights of
one decoder layer) (``traces.models.model_shape.ModelShape``), dtype width b bytes (bf16: 2), tensor
parallel degree tp, query vector q [n] and KV vector c [n] (Q = Σ q_i):

- FLOPs (per GPU, divided by tp)::

      F = 2 · (P_layers + h·V) · Q                       # every weight multiplies every token
        + 4 · L · h · Σ_i q_i · (c_i + (q_i + 1)/2)      # QK^T and AV, causal within the chunk

  The LM head (2·h·V per row) is charged for every query token unless the caller names the pass's
  logit rows R (``rows``): vLLM computes logits only where it samples, ``logits_indices =
  query_start_loc[1:] - 1`` (one row per scheduled request, a partial prefill chunk included, its
  token discarded) without speculation and s_i + 1 rows per request verifying s_i drafts
  (``vllm/v1/worker/gpu_model_runner.py``, ``_prepare_inputs`` and ``_calc_spec_decode_metadata``),
  so R = n + S; with ``rows`` the FLOPs are F − 2·h·V/tp · (Q − R). The vllm-v1 composer passes R
  (simulator.engine.v1.step). Attention uses heads·head_dim = h query channels (grouped-query
  attention changes the KV bytes, not these FLOPs).
- Bytes (per GPU)::

      B = b · (P_layers + h·V + h) / tp                  # weights, streamed once per pass
        + kv_bytes_per_token · f_kv · Σ_i (c_i + 2·q_i)  # KV read (cache + own chunk) and written
        + b · L · (9h + 2·d_kv + 6I) · Q / tp            # activations in/out of each kernel

  where d_kv = kv_heads · head_dim, I = MLP width and f_kv = max(1, kv_heads/tp)/kv_heads is the
  per-GPU share of KV heads (replicated once tp > kv_heads). The input embedding reads only
  the Q rows it needs and is not counted. The activation term assumes every linear layer reads
  its input and writes its output once (no fusion) and is split by tp.
- Time::

      t = max(F / (peak · eff_c), B / (bw · eff_m), H)   # roofline: compute-, memory- or host-bound
        + A                                               # fixed launch latencies
        + [tp > 1] · 2L · (allreduce_latency + 2(tp-1)/tp · b·h·Q / link_bw)

  with the execution preset's (``hardware.EXECUTIONS``, per role) pass floor p and layer
  floor l: ``cuda_graph`` (default) A = p + L·l, H = 0 (launch gaps of a replayed graph add to
  the kernels' time); ``eager`` A = 0, H = p + L·l (a host-bound engine issues kernels
  asynchronously ahead of the GPU, so a pass takes the larger of GPU and host time; the
  all-reduce latencies stay in A). Against every cell of the three H100 eager profiles the
  ``eager`` preset's MAPE is 35 / 33 / 20 % (8B / 1B / SmolLM2) against 82 / 90 / 97 % for
  ``cuda_graph``; adding the host floor instead of taking the max gives 32 / 35 / 18 %, so the
  data do not choose between the two and the max (asynchronous issue) is kept. The
  compute/memory/host knee is a hard max: the H100
  profiles (benchmarks/gpu/README.md) are too noisy (per-cell max/min of repeats up to 2.4) to
  support fitting a smooth one.

  i.e. two ring all-reduces of the hidden state per layer (after attention and after the MLP),
  not overlapped with compute. An empty batch (Q = 0) costs 0.
- The draft runs with ``draft_tp`` (default 1: vLLM's ``speculative_draft_tensor_parallel_size``
  = 1, the usual choice for a small draft), the target with ``tp``; tp must divide the number
  of attention heads (vLLM refuses otherwise).
- A quantised draft (``draft_weight_bits`` < 16, hardware.py's docstring): the draft's
  decoder-layer projections stream ``bits/8 + 4/128`` bytes per weight instead of b, so its
  weight term is::

      B_w = (b · (P_layers − P_lin + h·V + h) + (bits/8 + 4/128) · P_lin) / tp

  with P_lin = L · (layer params − 2h) (:func:`hardware.linear_params`); FLOPs, KV and
  activation bytes unchanged, and the memory accounting
  (:func:`~simulator.cost.analytic.memory.memory_kv_tokens`) counts the same bytes. The target's own
  weight format is the next bullets' ``quantization``.
- Mixture of experts (``ModelShape.is_moe``; THEORY.md §8): M of the L layers route each
  token to k of E experts of width I_e (3 h I_e weights each), next to always-read dense
  weights (attention, norms, router E·h, shared experts). A pass of Q = Σ q_i tokens reads
  the experts its tokens touch, in expectation (theory.moe)::

      E_touched(Q) = Σ_e (1 − (1 − π_e)^Q),   π_e = k/E (uniform) or a Zipf law (routing_skew)
      B_w = b · (P_dense + h·V + h + M · E_touched(Q) · 3 h I_e) / tp

  with P_dense = the decoder weights less the routed experts: the tokens of one pass route
  independently (routing is per token; only the expected count is priced, not its spread).
  FLOPs use the active parameters (k experts per token plus the shared ones), activations
  the k experts' width (k I_e + I_s in place of I on MoE layers), memory
  (:func:`~simulator.cost.analytic.memory.memory_kv_tokens`, weights fit) the total parameters.
  Experts are split by tp like every projection (vLLM's fused-MoE tensor parallelism) unless
  ``enable_expert_parallel`` splits them over dp · tp ranks (PassConstants ``ep_size`` / ``ep_dp``;
  simulator.cost.features.expert_parallel). A verify pass with s_i drafts has Q = Σ (s_i + 1): its
  expert traffic grows with the drafts, which a dense model reads once.
- The target's weight format (``quantization``: fp8, awq, gptq, mxfp4) and the KV cache's
  element type (``kv_cache_dtype``), simulator.cost.analytic.precision: the decoder projections and
  experts stream their format's bytes per weight (embeddings, head, norms, routers at b), the KV
  terms use 1 byte per element under fp8, and W8A8 FP8 (compute capability >= 8.9) adds its
  GEMM FLOPs at the FP8 peak, F_16 / (peak · eff_c) + F_8 / (peak_fp8 · eff_c), in place of
  F / (peak · eff_c).
- Sliding-window attention (``ModelShape.sliding_layers`` L_s of the L layers slide with window
  W; THEORY.md §10, :mod:`simulator.cost.analytic.window`): a sliding layer's query at
  position p sees the keys in (p − W, p] (flash-attn ``window_size = (W − 1, 0)``, as vLLM's
  FlashAttention backend runs a layer's ``sliding_window``), so the attention terms are split
  by layers::

      F_attn = 4 h / tp · ((L − L_s) · Σ_i q_i (c_i + (q_i + 1)/2) + L_s · P^W)
      B_kv   = kv_bytes_per_token / L · f_kv · ((L − L_s) · Σ_i (c_i + 2 q_i)
                                               + L_s · Σ_i (min(c_i, W − 1) + 2 q_i))

  with P^W = Σ_i Σ_{j<q_i} min(c_i + j + 1, W). These need per-request minima the five batch
  sums do not determine, so a windowed role is priced from arrays (:meth:`RooflineCost.step_time`,
  or ``time_from_sums(..., window=(K^W, P^W))``); the engine takes its array path for it
  (``RooflineCost.windowed``) and a model without windows keeps the sums path unchanged.
  Equal to full attention when W ≥ c_i + q_i for every request. The KV capacity is vLLM V1's
  hybrid KV cache manager's pool (:func:`~simulator.cost.analytic.memory.memory_kv_tokens`,
  simulator.cost.analytic.kv_groups): the layers grouped into block tables of equal page size
  sharing one pool of blocks, a sliding group's blocks behind its window freed (simulator.engine.kv;
  docs/simulate.md).
- Not modelled: activation quantisation other than W8A8 FP8, dequantisation time of
  weight-only kernels, KV-cache paging granularity, attention-kernel inefficiency at
  short contexts, CPU/GPU overlap, power throttling, MoE routing and
  permutation kernels (only their weight traffic and FLOPs are priced).
- Multi-head latent attention (``ModelShape.is_mla``, DeepSeek-V2/V3): the KV term reads and
  writes (r_kv + d_r) · b bytes per token and layer, the latent replicated on every tp rank
  (f_kv = 1; the memory plan charges each rank the whole latent); attention FLOPs per
  (query, cached token) pair and layer are 2 H (d_n + d_r + d_v), the expanded (prefill) form;
  vLLM's decode kernels work in the latent space, 2 H (2 r_kv + d_r) per pair, more FLOPs on
  fewer bytes, which matters only where decode attention is compute-bound (it is
  memory-bound on the cache here). The kv_b expansion of cached context during chunked
  prefill is not priced.

Sanity (tested in tests/simulator/cost/analytic/test_roofline.py): Vicuna-33B (65 GB bf16) decode at
batch 1 on one H100 is memory-bound at 65 GB / (3.35 TB/s · 0.8) + 0.5 ms ≈ 25 ms; the batch can
grow to about ``hardware.ridge`` ≈ 258 query tokens before it turns compute-bound; a 4096-token
prefill is compute-bound. Published figures this matches within a factor 1.5 (approximate, from the
vLLM / TensorRT-LLM / Vidur literature): Llama-2-7B bf16 batch-1 decode on A100-80GB at
~7-8 ms/token (model: 8.6 ms), Llama-3-8B on H100 at ~6-7 ms/token (model: 6.4 ms),
Llama-2-70B with tp=4 on H100 at ~15-25 ms/token (model: see test).

"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from specbatch.errors import require
from specbatch.simulator.cost.analytic.memory import memory_kv_tokens
from specbatch.simulator.cost.analytic.precision import (
    check_quantization,
    kv_element_bytes,
    quantize_constants,
    resolve_quantization,
)
from specbatch.simulator.cost.analytic.window import attention_work, batch_window_sums, window_sums
from specbatch.simulator.cost.gpus.hardware import (
    DEFAULT_EXECUTION,
    FULL_WEIGHT_BITS,
    Execution,
    Hardware,
    check_routing_skew,
    check_weight_bits,
    get_execution,
    linear_params,
    quantized_weight_bytes,
    settle_execution,
)
from specbatch.simulator.cost.interface import batch_sums, for_role
from specbatch.theory.moe import uniform_touched, zipf_load
from specbatch.traces.models.model_shape import ModelShape


@dataclass(frozen=True)
class PassConstants:
    """Per-role, per-GPU constants of the roofline, so ``step_time`` is scalar arithmetic."""

    model: str
    tp: int
    layers: int
    flops_per_token: float  # 2 (P_layers + h V) / tp
    attn_flops: float  # 4 L h / tp  (times Σ q (c + (q+1)/2))
    weight_bytes: float  # b (P_layers + h V + h) / tp  (quantised draft: module docstring)
    kv_bytes: float  # kv_bytes_per_token * f_kv  (times Σ c + 2 q)
    act_bytes_per_token: float  # b L (9h + 2 d_kv + 6 I) / tp
    comm_per_token: float  # seconds per query token of all-reduce bandwidth
    fixed: float  # added latencies: [cuda_graph] pass + L layer, plus all-reduce latencies
    floor: float  # host floor under the max: [eager] pass + L layer, else 0
    inv_compute: float  # 1 / (peak eff_c)
    inv_memory: float  # 1 / (bw eff_m)
    expert_bytes: float = 0.0  # MoE: b · M · 3 h I_e / tp  (times E_touched(Σq))
    experts: int = 0  # MoE: E routed experts per layer (0: dense)
    top_k: int = 0  # MoE: k experts per token
    expert_load: tuple = ()  # MoE: per-expert loads π (Σ = k) of a skewed law; () uniform
    fp8_flops_per_token: float = 0.0  # W8A8 FP8: 2 (P_lin + M k 3 h I_e) / tp (precision.py)
    inv_compute_fp8: float = 0.0  # 1 / (peak_fp8 eff_c)
    window: int = 0  # sliding-window layers' W (0: every layer attends to the whole context)
    sliding_layers: int = 0  # L_s of the ``layers`` L slide (their share of attn/kv terms)
    ep_size: int = 1  # expert parallel: dp · tp ranks sharing the experts (1: split by tp)
    ep_dp: int = 1  # expert parallel: data-parallel ranks whose tokens reach each rank
    head_flops: float = 0.0  # 2 h V / tp: the LM head's FLOPs per logit row (in flops_per_token)

    def experts_touched(self, tokens: float) -> float:
        """E_touched(Q) of a pass of Q = ``tokens`` query tokens (theory.moe); under expert
        parallelism the rank's E / ep_size experts touched by the ep_dp · Q tokens of every
        rank (theory.moe.ep_local_touched; simulator.cost.features.expert_parallel)."""
        if self.ep_size > 1:
            return (self.experts / self.ep_size) * (
                1.0 - (1.0 - self.top_k / self.experts) ** (self.ep_dp * tokens))
        if not self.expert_load:
            return uniform_touched(tokens, self.experts, self.top_k)
        return math.fsum(1.0 - (1.0 - p) ** tokens for p in self.expert_load)

    def moe_tokens(self, tokens: float) -> float:
        """Tokens' worth of (token, expert) pairs one rank's MoE block computes: Q, or under
        expert parallelism ep_dp · Q · k / ep_size pairs, i.e. ep_dp · Q / ep_size tokens."""
        return tokens if self.ep_size == 1 else self.ep_dp * tokens / self.ep_size


def pass_constants(shape: ModelShape, hw: Hardware, tp: int = 1,
                   execution: Execution | None = None, role: str = "target",
                   weight_bits: int = FULL_WEIGHT_BITS,
                   routing_skew: float = 0.0, kv_element_bytes: int | None = None
                   ) -> PassConstants:
    """Precompute the roofline constants of ``shape`` as ``role`` on ``tp`` GPUs of type ``hw``
    under ``execution`` (default: the ``cuda_graph`` preset), its linear projections stored at
    ``weight_bits`` (16: the preset's dtype; module docstring); a MoE shape's experts routed
    by the Zipf law of ``routing_skew`` (0: uniform; theory.moe). A shape whose
    ``quantization`` is set is priced in that format (simulator.cost.analytic.precision), its KV at
    ``kv_element_bytes`` per element (None: the preset's dtype)."""
    consts = unquantized_constants(shape, hw, tp, execution, role, weight_bits, routing_skew,
                                   kv_element_bytes)
    if shape.quantization == "none":
        return consts
    require(weight_bits >= FULL_WEIGHT_BITS,
            f"draft_weight_bits {weight_bits}: {shape.name} is already a {shape.quantization} "
            "checkpoint; expected 16")
    return quantize_constants(consts, shape, hw, tp)


def unquantized_constants(shape: ModelShape, hw: Hardware, tp: int,
                          execution: Execution | None, role: str, weight_bits: int,
                          routing_skew: float, kv_element_bytes: int | None) -> PassConstants:
    """:func:`pass_constants` of ``shape`` at the preset's dtype (the draft's projections at
    ``weight_bits``)."""
    if execution is None:
        execution = get_execution(DEFAULT_EXECUTION)
    require(isinstance(tp, (int, np.integer)) and tp >= 1, f"tp {tp!r}: expected an integer >= 1")
    require(shape.heads % tp == 0,
            f"tp {tp}: {shape.name} has {shape.heads} attention heads, not divisible by tp")
    b = hw.dtype_bytes
    kv_b = b if kv_element_bytes is None else kv_element_bytes
    L, h = shape.layers, shape.hidden
    p_layers = L * shape.layer_params
    head = h * shape.vocab
    d_kv = shape.kv_heads * shape.head_dim
    f_kv = max(1.0, shape.kv_heads / tp) / shape.kv_heads
    comm_tok = 0.0
    pass_lat, layer_lat = execution.latencies(role, hw)
    launch = pass_lat + L * layer_lat
    fixed, floor = (0.0, launch) if execution.overlap else (launch, 0.0)
    if tp > 1:
        comm_tok = 2 * L * (2 * (tp - 1) / tp) * b * h / hw.link_bw
        fixed += 2 * L * hw.allreduce_latency
    if shape.is_moe or shape.is_mla:
        return with_window(shape, sparse_pass_constants(shape, hw, tp, weight_bits, routing_skew,
                                                        comm_tok, fixed, floor, kv_b))
    return with_window(shape, PassConstants(
        model=shape.name,
        tp=int(tp),
        layers=L,
        flops_per_token=2.0 * (p_layers + head) / tp,
        head_flops=2.0 * head / tp,
        attn_flops=4.0 * L * shape.q_width / tp,
        weight_bytes=streamed_weight_bytes(shape, b, weight_bits) / tp,
        kv_bytes=float(shape.kv_bytes_per_token(kv_b)) * f_kv,
        act_bytes_per_token=b * L * (9 * h + 2 * d_kv + 6 * shape.intermediate) / tp,
        comm_per_token=comm_tok,
        fixed=fixed,
        floor=floor,
        inv_compute=1.0 / (hw.peak_flops * hw.compute_eff),
        inv_memory=1.0 / (hw.mem_bw * hw.memory_eff),
    ))


def with_window(shape: ModelShape, consts: PassConstants) -> PassConstants:
    """``consts`` carrying ``shape``'s sliding window (unchanged when no layer slides)."""
    if not shape.is_windowed:
        return consts
    return replace(consts, window=int(shape.sliding_window),
                   sliding_layers=int(shape.sliding_layers))


def sparse_pass_constants(shape: ModelShape, hw: Hardware, tp: int, weight_bits: int,
                          routing_skew: float, comm_tok: float, fixed: float,
                          floor: float, kv_b: int | None = None) -> PassConstants:
    """:func:`pass_constants` of a mixture-of-experts and/or multi-head latent attention shape
    (module docstring): FLOPs by active parameters, the dense weights streamed once and each
    MoE layer's experts by E_touched(Q) (THEORY.md §8), activations at the k experts' (plus
    shared) width; MLA's cache of r_kv + d_r numbers per token and layer, replicated on every
    tp rank, and its attention FLOPs per (query, cached token) pair 2 H (d_n + d_r + d_v)."""
    require(weight_bits >= FULL_WEIGHT_BITS,
            f"draft_weight_bits {weight_bits}: a quantised mixture-of-experts or MLA model is "
            "not priced; expected 16")
    b = hw.dtype_bytes
    kv_b = b if kv_b is None else kv_b
    L, h, M = shape.layers, shape.hidden, shape.moe_layers if shape.is_moe else 0
    head = h * shape.vocab
    if shape.is_mla:
        d_kv = shape.cache_width  # the latent and rope key, read whole by every head
        f_kv = 1.0  # replicated: every tp rank holds the whole latent (vLLM's MLA cache)
        pair = 2 * shape.heads * (shape.qk_nope_head_dim + shape.qk_rope_head_dim
                                  + shape.v_head_dim)
    else:
        d_kv = shape.kv_heads * shape.head_dim
        f_kv = max(1.0, shape.kv_heads / tp) / shape.kv_heads
        pair = 4 * shape.q_width
    expert_total = M * shape.experts * shape.expert_params
    moe_width = shape.top_k * shape.expert_intermediate + shape.shared_intermediate
    act = (L - M) * (9 * h + 2 * d_kv + 6 * shape.intermediate) + M * (9 * h + 2 * d_kv
                                                                     + 6 * moe_width)
    load = (() if routing_skew == 0 or not M else
            tuple(float(p) for p in zipf_load(shape.experts, shape.top_k, routing_skew)))
    return PassConstants(
        model=shape.name,
        tp=int(tp),
        layers=L,
        flops_per_token=2.0 * (shape.active_decoder_params + head) / tp,
        head_flops=2.0 * head / tp,
        attn_flops=1.0 * L * pair / tp,
        weight_bytes=b * (shape.decoder_params - expert_total + head + h) / tp,
        kv_bytes=float(shape.kv_bytes_per_token(kv_b)) * f_kv,
        act_bytes_per_token=b * act / tp,
        comm_per_token=comm_tok,
        fixed=fixed,
        floor=floor,
        inv_compute=1.0 / (hw.peak_flops * hw.compute_eff),
        inv_memory=1.0 / (hw.mem_bw * hw.memory_eff),
        expert_bytes=b * M * shape.expert_params / tp,
        experts=shape.experts if M else 0,
        top_k=shape.top_k,
        expert_load=load,
    )


def streamed_weight_bytes(shape: ModelShape, b: int, bits: int = FULL_WEIGHT_BITS) -> float:
    """Weight bytes one pass reads on one GPU before the tp split: b (P_layers + h V + h), the
    input embedding excluded; below 16 bits the linear projections at
    :func:`hardware.quantized_weight_bytes` each (module docstring)."""
    L, h = shape.layers, shape.hidden
    full = L * shape.layer_params + h * shape.vocab + h
    if bits >= FULL_WEIGHT_BITS:
        return float(b * full)
    linear = linear_params(shape)
    return float(b * (full - linear) + quantized_weight_bytes(bits) * linear)


@dataclass(frozen=True)
class RooflineCost:
    """Roofline step time (module docstring) for a draft/target pair on one hardware preset."""

    hardware: Hardware
    target: ModelShape
    draft: ModelShape
    tp: int = 1
    draft_tp: int = 1
    overhead: float = field(default=math.nan)
    execution: str = DEFAULT_EXECUTION  # a hardware.EXECUTIONS preset name
    draft_weight_bits: int = FULL_WEIGHT_BITS  # the draft's projections' bits per weight
    routing_skew: float = 0.0  # Zipf exponent of a MoE model's expert loads (theory.moe)
    quantization: str = "none"  # the target's --quantization (simulator.cost.analytic.precision)
    kv_cache_dtype: str = "auto"  # vLLM --kv-cache-dtype of both roles' KV cache
    consts: dict = field(default=None, repr=False, compare=False)  # role -> PassConstants

    def __post_init__(self) -> None:
        ex = settle_execution(self)
        bits = check_weight_bits(self.draft_weight_bits)
        check_routing_skew(self.routing_skew, self.target, self.draft)
        object.__setattr__(self, "quantization", check_quantization(self.quantization))
        object.__setattr__(self, "target", resolve_quantization(self.quantization, self.target))
        kv_b = kv_element_bytes(self.kv_cache_dtype, self.hardware)
        consts = {
            "target": pass_constants(self.target, self.hardware, self.tp, ex, "target",
                                     routing_skew=self.routing_skew, kv_element_bytes=kv_b),
            "draft": pass_constants(self.draft, self.hardware, self.draft_tp, ex, "draft", bits,
                                    self.routing_skew, kv_element_bytes=kv_b),
        }
        object.__setattr__(self, "consts", consts)

    def _consts(self, role: str) -> PassConstants:
        return for_role(self.consts, role)

    @property
    def windowed(self) -> bool:
        """Whether a role has sliding-window layers: its passes need the window sums
        (simulator.cost.analytic.window), which the five batch sums do not determine, so the engine
        prices them from arrays (:meth:`step_time`) instead of :meth:`time_from_sums`."""
        return any(c.sliding_layers for c in self.consts.values())

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray,
                  rows: float | None = None) -> float:
        """Seconds of one pass; ``query`` [n] new tokens, ``kv`` [n] cached tokens per request,
        ``rows`` the logit rows (None: Σq; module docstring)."""
        c = self.consts.get(role)
        if c is not None and c.sliding_layers:
            *sums, window = batch_window_sums(query, kv, c.window)
            return self.time_from_sums(role, *sums, window=window, rows=rows)
        return self.time_from_sums(role, *batch_sums(query, kv), rows=rows)

    #: The engine may pass a pass's logit rows (``rows``; module docstring).
    logit_rows = True

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float, window: tuple[float, float] | None = None,
                       rows: float | None = None) -> float:
        """:meth:`step_time` from the batch sums (:func:`batch_sums`: n, Σq, Σc, Σq·c, Σq²),
        so a caller that knows the sums (e.g. d draft passes whose KV grows by one token each)
        pays scalar arithmetic only; bit-identical to :meth:`step_time` on the same sums.
        A role with sliding-window layers also needs ``window`` = (K^W, P^W)
        (simulator.cost.analytic.window.window_sums). ``rows`` = the logit rows R the engine samples
        (None: every query token, Σq; module docstring)."""
        try:
            c = self.consts[role]
        except KeyError:
            c = self._consts(role)  # raises the one-line error
        if sq <= 0.0:
            return 0.0
        if c.sliding_layers:
            attn, kv_bytes = attention_work(c, sq, skv, sqkv, sqq, window)
            flops = c.flops_per_token * sq + attn
            nbytes = c.weight_bytes + kv_bytes + c.act_bytes_per_token * sq
        else:
            flops = c.flops_per_token * sq + c.attn_flops * (sqkv + 0.5 * (sqq + sq))
            nbytes = c.weight_bytes + c.kv_bytes * (skv + 2.0 * sq) + c.act_bytes_per_token * sq
        if rows is not None and rows < sq:  # the LM head only at the sampled rows
            flops -= c.head_flops * (sq - rows)
        if c.experts:
            nbytes += c.expert_bytes * c.experts_touched(sq)
        compute = flops * c.inv_compute
        if c.fp8_flops_per_token:  # W8A8 FP8: the quantised GEMMs at the FP8 peak
            compute += c.fp8_flops_per_token * sq * c.inv_compute_fp8
        return (max(compute, nbytes * c.inv_memory, c.floor) + c.fixed
                + c.comm_per_token * sq)

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, block_size: int = 16,
                           disable_hybrid_kv_cache_manager: bool = False) -> int:
        """KV-cache tokens per replica next to both models' weights on ``tp`` GPUs
        (:func:`kv_capacity_tokens`): the memory information paged KV mode asks for; a
        windowed model's pool under vLLM's hybrid KV cache manager
        (:func:`~simulator.cost.analytic.memory.memory_kv_tokens`)."""
        return memory_kv_tokens(self.hardware, self.target, self.draft, self.tp,
                                gpu_memory_utilization, self.draft_weight_bits,
                                self.kv_cache_dtype, block_size, disable_hybrid_kv_cache_manager)

    def breakdown(self, role: str, query: np.ndarray, kv: np.ndarray) -> dict:
        """The terms of :meth:`step_time`: flops, bytes, compute/memory/host/comm/fixed seconds,
        and the bound ("compute", "memory", or "host" when the eager host floor wins)."""
        c = self._consts(role)
        query = np.asarray(query, dtype=np.float64).ravel()
        kv = np.asarray(kv, dtype=np.float64).ravel()
        sq = float(query.sum())
        if c.sliding_layers:
            _, _, skv, sqkv, sqq = batch_sums(query, kv)
            attn, kv_bytes = attention_work(c, sq, skv, sqkv, sqq,
                                            window_sums(query, kv, c.window))
            flops = c.flops_per_token * sq + attn
        else:
            flops = c.flops_per_token * sq + c.attn_flops * float(np.dot(query,
                                                                          kv + 0.5 * (query + 1)))
            kv_bytes = c.kv_bytes * float((kv + 2.0 * query).sum())
        weight_bytes = c.weight_bytes
        moe = {}
        if c.experts:
            touched = c.experts_touched(sq) if sq > 0 else 0.0
            weight_bytes += c.expert_bytes * touched
            moe = {"experts_touched": touched, "expert_bytes": c.expert_bytes * touched}
        nbytes = weight_bytes + kv_bytes + c.act_bytes_per_token * sq
        compute_s, memory_s = flops * c.inv_compute, nbytes * c.inv_memory
        fp8 = {}
        if c.fp8_flops_per_token:
            fp8 = {"fp8_flops": c.fp8_flops_per_token * sq}
            compute_s += fp8["fp8_flops"] * c.inv_compute_fp8
        return {
            "role": role, "model": c.model, "tp": c.tp, "query_tokens": sq, **moe, **fp8,
            "flops": flops, "bytes": nbytes, "weight_bytes": weight_bytes, "kv_bytes": kv_bytes,
            "compute_s": compute_s, "memory_s": memory_s,
            "comm_s": c.comm_per_token * sq, "fixed_s": c.fixed if sq > 0 else 0.0,
            "host_floor_s": c.floor if sq > 0 else 0.0,
            "bound": ("host" if c.floor > max(compute_s, memory_s) else
                      "compute" if compute_s > memory_s else "memory"),
            "step_time_s": self.step_time(role, query, kv),
        }
