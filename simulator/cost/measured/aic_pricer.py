"""One role's forward pass priced op by op from AIConfigurator's measured vLLM curves.

A role (one model shape on one GPU at tensor parallel tp) runs, per decoder layer, the GEMMs
of its per-GPU shard (input [Q, k], weight [n, k]; h hidden, H / H_kv query / KV heads of width
d, I the MLP width, all split tp ways)::

    qkv      n = (H + 2 H_kv) d / tp    k = h
    o        n = h                      k = H d / tp
    gate_up  n = 2 I / tp               k = h
    down     n = h                      k = I / tp

each priced by :class:`~simulator.cost.measured.aic_curve.Curve` of its (n, k) in the weight
dtype's table (bf16, or fp8 W8A8 under ``--quantization fp8``): the measured curve where timed,
else the transfer from the nearest timed shapes. On a mixture of experts' M MoE layers the MLP
is the router (a bf16 GEMM n = E, k = h), the shared MLP (two GEMMs of width I_s) and the routed
experts: the measured ``FusedMoE`` block of (h, I_e, E, k, tp, ep = 1) (vLLM's default: experts
tensor-parallel) at Q tokens (under expert parallelism the row of tp = 1, ep = N · tp at every
DP rank's tokens, plus the dispatch: aic_ep). The small ops AIConfigurator does not time (the
embedding, 2 L + 1 RMSNorms with the residual add inside them, rotary, the gated activation (on
a MoE layer the shared expert's only: the routed experts' runs inside the timed block);
:meth:`AicPricer.small_calls`) come from the calibrated model's small-op laws
(simulator.cost.measured.laws, fitted on Vidur's profiles of this GPU or its catalogue proxy; on
a GPU with neither, H100's laws with their byte term scaled by the bandwidth ratio). The
all-reduce (tp > 1): 2 L + 1 of the Q·h-element hidden state (two per layer and the embedding's)
from the measured CUDA-graph all-reduce curve of tp GPUs. The LM head: the GEMM n = V / tp, k =
h at the logit rows r (bf16: vLLM does not quantise it).

:class:`AicPricer` holds one role's curves and memoises its per-Q parts; its
:meth:`AicPricer.total` is the tabulated form's expression (simulator.cost.tabulated), so a
:class:`~simulator.cost.tabulated.PassTable` built from the same memo evaluates to it bit for
bit.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np

from specbatch.errors import require
from specbatch.simulator.cost.analytic.all2all import dispatch_seconds
from specbatch.simulator.cost.analytic.window import window_sums
from specbatch.simulator.cost.gpus.hardware import Hardware
from specbatch.simulator.cost.measured.aic_curve import Curve
from specbatch.simulator.cost.measured.aic_fa3_window import fa3_window_sums
from specbatch.simulator.cost.measured.aic_mixed import backend, gpu_of
from specbatch.simulator.cost.measured.aic_mla import core_holds, projections
from specbatch.simulator.cost.measured.aic_op_curves import op_curve
from specbatch.simulator.cost.measured.aic_role_attention import attention_law, mla_attention_law
from specbatch.simulator.cost.measured.aic_window_prefill import (
    TileShape,
    local_parts,
    local_seconds,
    prefill_split,
)
from specbatch.simulator.cost.measured.laws import (
    SMALL_OPS,
    GpuFit,
    LayerShape,
    small_op_bytes,
)
from specbatch.simulator.cost.tabulated import AttentionLaw, PassTable, tabulate
from specbatch.traces.models.model_shape import ModelShape

MEMO_LIMIT = 65536


def gemm_dims(shape: ModelShape, tp: int) -> dict:
    """GEMM name -> (n, k) of one dense layer's per-GPU shard (module docstring)."""
    h, d = shape.hidden, shape.head_dim
    return {"qkv": ((shape.heads + 2 * shape.kv_heads) * d // tp, h),
            "o": (h, shape.heads * d // tp),
            "gate_up": (2 * shape.intermediate // tp, h),
            "down": (h, shape.intermediate // tp)}


@dataclass
class AicPricer:
    """One role's curves (module docstring) and its memoised per-Q parts."""

    shape: ModelShape
    tp: int
    hw: Hardware
    system: str
    gemm_dtype: str  # "bfloat16" or "fp8"
    kv_dtype: str  # "bfloat16" or "fp8"
    small: GpuFit  # the calibrated small-op laws
    small_scale: float  # byte-term scale of a proxy's small-op laws (1: the GPU's own)
    launch: tuple[float, float]  # (fixed s, host floor s)
    curves: dict = field(default_factory=dict)  # part name -> (count per pass, Curve)
    moe_dtype: str = ""  # the MoE table's dtype ("": gemm_dtype; "fp8_block": aic_cost)
    head_curve: Curve | None = None
    allreduce_curve: Curve | None = None
    attention: AttentionLaw | None = None
    attention_how: str = ""
    memo: dict = field(default_factory=dict)  # Q -> (layers, experts, allreduce)
    head_memo: dict = field(default_factory=dict)  # r -> LM head seconds
    tables: dict = field(default_factory=dict)  # Q_max -> PassTable (pass_table)
    held: tuple = ()  # small ops the attention law already holds (MLA module rows: rotary)
    prefill_law: tuple = ()  # (B, α_B, β_B) of a sliding role's prefill (aic_window_prefill)
    ep_dp: int = 1  # expert parallel: DP ranks whose tokens reach this rank's experts (aic_ep)
    ep_link: tuple = ()  # expert parallel: (bytes/s, s per ring step) of dispatch/combine

    def __post_init__(self) -> None:
        s, tp, system = self.shape, self.tp, self.system

        def gemm(key: tuple) -> Curve:
            return op_curve(system, "gemm", self.gemm_dtype, key)

        dense = s.layers - (s.moe_layers if s.is_moe else 0)
        dims = gemm_dims(s, tp)
        if s.is_mla:  # the MLA projections (aic_mla); the core is the attention law's
            dims = projections(s.hidden, s.q_lora_rank, s.kv_lora_rank, s.qk_rope_head_dim,
                               s.qk_nope_head_dim, s.v_head_dim, s.heads // tp)
            for name, key in dims.items():
                self.curves[name] = (s.layers, gemm(key))
        else:
            for name in ("qkv", "o"):
                self.curves[name] = (s.layers, gemm(dims[name]))
        dims = gemm_dims(s, tp)
        if dense:
            for name in ("gate_up", "down"):
                self.curves[name] = (dense, gemm(dims[name]))
        if s.is_moe:
            m = s.moe_layers
            self.curves["router"] = (m, op_curve(system, "gemm", "bfloat16",
                                                 (s.experts, s.hidden)))
            if s.shared_intermediate:
                self.curves["shared_gate_up"] = (m, gemm((2 * s.shared_intermediate // tp,
                                                          s.hidden)))
                self.curves["shared_down"] = (m, gemm((s.hidden, s.shared_intermediate // tp)))
            self.curves["experts"] = (m, op_curve(system, "moe", self.experts_dtype,
                                                  (s.hidden, s.expert_intermediate, s.experts,
                                                   s.top_k, tp, 1)))
        self.head_curve = op_curve(system, "gemm", "bfloat16", (s.vocab // tp, s.hidden))
        if tp > 1:
            self.allreduce_curve = op_curve(system, "allreduce", "", (tp,))
        kv_bytes = 1.0 if self.kv_dtype == "fp8" else 2.0
        if s.is_mla:
            self.attention, self.attention_how = mla_attention_law(
                system, self.kv_dtype, s.heads // tp, s.layers)
            self.held = core_holds(system, self.kv_dtype)
            return
        self.attention, self.attention_how = attention_law(
            system, self.kv_dtype, s.heads // tp, max(s.kv_heads // tp, 1), s.head_dim,
            kv_bytes, s.layers)

    @property
    def experts_dtype(self) -> str:
        """The MoE table dtype the routed experts are priced from."""
        return self.moe_dtype or self.gemm_dtype

    def small_calls(self) -> tuple:
        """(op, calls per pass, LayerShape) of the small ops vLLM runs outside the timed ops,
        in pricing order: the embedding once; the RMSNorm 2 L + 1 times (each layer's two and
        the model's final ``norm``); rotary per layer; the gated activation of each dense MLP
        (on a MoE layer a shared expert's only: AIConfigurator's collect_moe times the FusedMoE
        module's forward, whose experts apply it between their grouped GEMMs). No residual
        add: vLLM's decoder layers pass the residual to the norm (``input_layernorm(x,
        residual)``, ``post_attention_layernorm(x, residual)``, the final ``norm(x,
        residual)``), whose ``fused_add_rms_norm`` does the add in the norm's one kernel
        (vllm/model_executor/models/llama.py LlamaDecoderLayer.forward / LlamaModel.forward,
        qwen3_moe.py alike; layers/layernorm.py RMSNorm.forward_cuda), so Vidur's separately
        timed ``add`` is no op of vLLM's. A model with ``qk_norm`` (Qwen3, Gemma-3) runs two
        more RMSNorms a layer over its query and key heads before rotary (qwen3.py
        ``Qwen3Attention.forward``: ``q_norm`` / ``k_norm`` over each head's width), priced
        by the norm law at this GPU's H/tp · d and H_kv/tp · d channels per token (assumed:
        the law's per-row-width term read at that width, though the kernel's rows are one
        head wide). Ops the timed rows hold (``held``: an MLA module row's rotary,
        aic_mla.core_holds) are left out."""
        s = self.shape
        ls = LayerShape(s.hidden, s.heads, s.kv_heads, s.intermediate, s.vocab, True)
        dense = s.layers - (s.moe_layers if s.is_moe else 0)
        calls = {"emb": [(1, ls)], "input_layernorm": [(s.layers + 1, ls)],
                 "attn_rope": [(s.layers, ls)], "post_attention_layernorm": [(s.layers, ls)],
                 "mlp_act": [(s.layers, ls)], "add": []}
        if s.qk_norm:  # per-head q_norm / k_norm: the norm law at this GPU's q and k widths
            width = s.head_dim
            calls["input_layernorm"] += [
                (s.layers, LayerShape(s.heads // self.tp * width, 1, 1, 0, s.vocab, True)),
                (s.layers, LayerShape(max(s.kv_heads // self.tp, 1) * width, 1, 1, 0, s.vocab,
                                      True))]
        if s.is_moe:  # the routed experts' activation runs in the MoE rows
            shared = LayerShape(s.hidden, s.heads, s.kv_heads, s.shared_intermediate, s.vocab,
                                True)
            calls["mlp_act"] = [(dense, ls)] + ([(s.moe_layers, shared)]
                                                if s.shared_intermediate else [])
        return tuple((op, n, shape) for op in SMALL_OPS if op not in self.held
                     for n, shape in calls[op])

    def small_ops(self, q: float) -> float:
        """Seconds of the pass's small ops (:meth:`small_calls`) at Q = ``q``, each from its
        calibrated small-op law."""
        qa = np.array([q])
        total = 0.0
        for op, n, shape in self.small_calls():
            law = self.small.small[op]
            nbytes = float(small_op_bytes(op, shape, self.tp, qa)[0])
            total += n * (law.intercept + law.per_width * nbytes / max(q, 1.0)
                          + law.slope * self.small_scale * nbytes)
        return total

    def small_ops_many(self, q: np.ndarray) -> np.ndarray:
        """:meth:`small_ops` over ``q`` # [Q], the same expressions in the same order (bit for
        bit; the tabulated pass's fast path)."""
        q = np.asarray(q, dtype=np.float64)  # [Q]
        per_q = np.maximum(q, 1.0)  # [Q]
        total = np.zeros(q.shape)  # [Q]
        for op, n, shape in self.small_calls():
            law = self.small.small[op]
            nbytes = small_op_bytes(op, shape, self.tp, q)  # [Q]
            total += n * (law.intercept + law.per_width * nbytes / per_q
                          + law.slope * self.small_scale * nbytes)
        return total

    def allreduces(self) -> int:
        """All-reduces of the hidden state per pass at tp > 1: two per layer (after o_proj and
        after the MLP / MoE block) and the embedding's (vLLM's VocabParallelEmbedding.forward
        masks the ids outside its vocab shard and all-reduces the Q x h output,
        vllm/model_executor/layers/vocab_parallel_embedding.py)."""
        return 2 * self.shape.layers + 1

    def parts_many(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(layers, allreduce) # [Q] of :meth:`parts` over ``q``, bit for bit (the same sums
        in the same order on :meth:`Curve.at_many`); the memo is neither read nor filled."""
        q = np.asarray(q, dtype=np.float64)  # [Q]
        layers = self.small_ops_many(q)
        total = q * self.ep_dp  # [Q] the tokens an EP rank's experts see (aic_ep)
        for name, (count, curve) in self.curves.items():
            layers = layers + count * curve.at_many(total if name == "experts" else q)
        comm = np.zeros(q.shape)
        if self.allreduce_curve is not None:
            comm = self.allreduces() * self.allreduce_curve.at_many(q * self.shape.hidden)
        if self.ep_dp > 1:
            comm = comm + self.ep_dispatch(total)
        return layers, comm

    def parts(self, q: float) -> tuple[float, float, float]:
        """(layers, experts, allreduce) seconds of a pass with Q = ``q`` (memoised): layers
        holds every per-token op but the all-reduce and the LM head, the routed experts
        included (``experts`` is their share, for ``cost show``)."""
        got = self.memo.get(q)
        if got is None:
            got = self.pieces(q, q * self.ep_dp)
            if len(self.memo) < MEMO_LIMIT:
                self.memo[q] = got
        return got

    def pieces(self, q: float, total: float) -> tuple[float, float, float]:
        """:meth:`parts` (not memoised) with the routed experts at ``total`` tokens: Q
        without expert parallelism; an EP rank's MoE row at the tokens of every DP rank,
        and ``comm`` also the dispatch/combine of ``total`` (simulator.cost.measured.aic_ep)."""
        experts = 0.0
        layers = self.small_ops(q)
        for name, (count, curve) in self.curves.items():
            t = count * curve.at(total if name == "experts" else q)
            layers += t
            if name == "experts":
                experts = t
        comm = 0.0
        if self.allreduce_curve is not None:
            comm = self.allreduces() * self.allreduce_curve.at(q * self.shape.hidden)
        if self.ep_dp > 1:
            comm = comm + self.ep_dispatch(total)
        return layers, experts, comm

    def ep_dispatch(self, total):
        """t_a2a of the M MoE layers for ``total`` tokens of all DP ranks over ``ep_link``
        (simulator.cost.analytic.all2all; a float or an array)."""
        s = self.shape
        return s.moe_layers * dispatch_seconds(total, s.hidden, s.experts, self.ep_dp,
                                               *self.ep_link, 2)

    def layers_at(self, q: float) -> float:
        return self.parts(q)[0]

    def allreduce_at(self, q: float) -> float:
        return self.parts(q)[2]

    def head_at(self, r: float) -> float:
        """The LM head at ``r`` logit rows (0 at none)."""
        if r <= 0.0:
            return 0.0
        got = self.head_memo.get(r)
        if got is None:
            got = self.head_curve.at(r)
            if len(self.head_memo) < MEMO_LIMIT:
                self.head_memo[r] = got
        return got

    def tile_shape(self) -> TileShape:
        """What FA3's tile sizes read for this role's per-GPU head shape (aic_window_prefill;
        ``fa3`` False where the GPU's backend is not FA3, aic_mixed.backend), worked out once
        per pricer (every windowed pass reads it)."""
        return self._tiles

    @functools.cached_property
    def _tiles(self) -> TileShape:
        s = self.shape
        fa3 = not s.is_mla and backend(gpu_of(self.system), self.kv_dtype) == "fa3"
        return TileShape(fa3, max((s.heads // self.tp) // max(s.kv_heads // self.tp, 1), 1),
                         s.head_dim, 1.0 if self.kv_dtype == "fp8" else 2.0)

    def window_pairs(self, query, kv) -> float:
        """The window pairs a sliding layer of this role presents for ``query`` # [n] new and
        ``kv`` # [n] cached tokens: where the GPU's backend is FlashAttention 3 the pairs its
        tiles compute (aic_fa3_window), elsewhere the exact P^W (simulator.cost.analytic.window:
        no tile rule derived for FA2, FlashInfer or TRT-LLM)."""
        s = self.shape
        if not self.tile_shape().fa3:
            return window_sums(query, kv, s.sliding_window)[1]
        return fa3_window_sums(query, kv, s.sliding_window, s.heads // self.tp,
                               max(s.kv_heads // self.tp, 1), s.head_dim,
                               1.0 if self.kv_dtype == "fp8" else 2.0)[1]

    def window_sums(self, query, kv, exact: tuple[float, float]) -> tuple:
        """What :meth:`attention_at` prices a sliding layer of this role from for the pass of
        ``query`` # [n] new and ``kv`` # [n] cached tokens: (K^W, P, Σq', Σq'², cross, E, R,
        B_W), ``exact`` = (K^W, P^W) (simulator.cost.analytic.window), P the pairs
        :meth:`window_pairs`, the rest aic_window_prefill.local_parts'."""
        pairs = self.window_pairs(query, kv)
        return (exact[0], pairs, *local_parts(query, kv, self.shape.sliding_window,
                                               self.window_pairs, self.tile_shape(), pairs))

    def prefill_split(self) -> tuple:
        """(B axis, α_B, β_B) of the role's attention grid (aic_window_prefill.prefill_split,
        computed once)."""
        if not self.prefill_law:
            self.prefill_law = prefill_split(self.attention.grid, self.tile_shape())
        return self.prefill_law

    def attention_at(self, n: float, sq: float, skv: float, sqkv: float, sqq: float,
                     window: tuple | None = None) -> float:
        """Seconds of the pass's attention: the law of all L layers at the batch sums; with
        L_s sliding-window layers, its (L − L_s)/L share at the full sums plus its L_s/L share
        priced as a sliding layer runs (``window`` of :meth:`window_sums`): the grid at
        (n, Σq', K^W, K^W + cross, Σq'²): the decode cells at the windowed mean context, the
        multi-token requests' queries up to W as the causal prefill they are, the pairs
        against cached keys the window holds at the law's per-pair term; plus α_B per query
        token and β_B per product past the first W of each of the B = B_W requests of q > W
        (aic_window_prefill: α, β from the law's own causal prefill cells). The law is its
        per-layer cells times L (aic_attention.grid_law), so a share is that many layers of
        it; nothing in it was fitted on windowed data."""
        s = self.shape
        if not s.sliding_layers:
            return self.attention.seconds(n, sq, skv, sqkv, sqq)
        require(window is not None and len(window) == 8,
                f"model {s.name}: has sliding-window layers, so a pass is priced with its "
                "window sums (AicPricer.window_sums)")
        full = (s.layers - s.sliding_layers) / s.layers
        slide = s.sliding_layers / s.layers
        split = self.prefill_split() if window[7] > 0.0 else ()
        return (full * self.attention.seconds(n, sq, skv, sqkv, sqq)
                + slide * local_seconds(self.attention, split, n, window[0], window[2:]))

    def total(self, n: float, sq: float, skv: float, sqkv: float, sqq: float,
              rows: float | None = None, window: tuple | None = None) -> float:
        """The pass time in simulator.cost.tabulated.table_time's expressions and order (a
        sliding-window role's attention by :meth:`attention_at` at ``window``)."""
        if sq <= 0.0:
            return 0.0
        layers, _, comm = self.parts(sq)
        r = sq if rows is None or rows >= sq else float(max(int(rows), 0))
        attn = self.attention_at(n, sq, skv, sqkv, sqq, window)
        gpu = ((layers + attn) + comm) + self.head_at(r)
        fixed, floor = self.launch
        return float(gpu + (fixed + max(0.0, floor - gpu)))

    def split(self, n: float, sq: float, skv: float, sqkv: float, sqq: float,
              rows: float | None = None, window: tuple | None = None) -> dict:
        """Seconds per part (``layers`` without the experts, ``attention``, ``experts``,
        ``allreduce``, ``lm_head``, ``launch``); they sum to :meth:`total`."""
        names = ("layers", "attention", "experts", "allreduce", "lm_head", "launch")
        if sq <= 0.0:
            return dict.fromkeys(names, 0.0)
        layers, experts, comm = self.parts(sq)
        r = sq if rows is None or rows >= sq else float(max(int(rows), 0))
        attn = self.attention_at(n, sq, skv, sqkv, sqq, window)
        head = self.head_at(r)
        gpu = ((layers + attn) + comm) + head
        fixed, floor = self.launch
        return {"layers": layers - experts, "attention": attn, "experts": experts,
                "allreduce": comm, "lm_head": head, "launch": fixed + max(0.0, floor - gpu)}

    def pass_table_slow(self, max_tokens: int) -> PassTable:
        """The role's :class:`PassTable` for Q = 0..``max_tokens`` point by point from the
        memo: the reference twin of :meth:`pass_table`."""
        fixed, floor = self.launch
        return PassTable(layers=tabulate(self.layers_at, max_tokens),
                         allreduce=tabulate(self.allreduce_at, max_tokens),
                         head=tabulate(self.head_at, max_tokens),
                         attention=self.attention, fixed=fixed, floor=floor)

    def pass_table(self, max_tokens: int) -> PassTable:
        """The role's :class:`PassTable` for Q = 0..``max_tokens``: :meth:`pass_table_slow`'s
        values bit for bit, priced over all Q at once and kept per ``max_tokens`` (a pricer's
        curves never change after it is built; the planner asks for the same table once per
        run of a deployment)."""
        big = min((m for m in self.tables if m >= max_tokens), default=None)
        if big is not None and big > max_tokens:  # a prefix: each Q is priced on its own
            t, n = self.tables[big], max_tokens + 1
            return dataclasses.replace(t, layers=t.layers[:n], allreduce=t.allreduce[:n],
                                       head=t.head[:n])
        got = None if big is None else self.tables[big]
        if got is None:
            fixed, floor = self.launch
            q = np.arange(1, max_tokens + 1, dtype=np.float64)  # [Q_max]
            layers, comm = self.parts_many(q)
            zero = np.zeros(1)
            got = PassTable(layers=np.concatenate([zero, layers]),
                            allreduce=np.concatenate([zero, comm]),
                            head=np.concatenate([zero, self.head_curve.at_many(q)]),
                            attention=self.attention, fixed=fixed, floor=floor)
            for a in (got.layers, got.allreduce, got.head):
                a.flags.writeable = False
            if len(self.tables) < 8:
                self.tables[max_tokens] = got
        return got
