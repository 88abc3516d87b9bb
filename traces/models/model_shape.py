"""The shape of a decoder-only transformer (:class:`ModelShape`): the ``config.json`` numbers
step time depends on, and the per-token sizes derived from them. The named shapes are
:mod:`traces.models.shapes`; a Hugging Face config.json is read by
:mod:`traces.models.hf_config`."""

from __future__ import annotations

from dataclasses import dataclass

from specbatch.errors import SpecbatchError


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer with grouped-query attention and a gated (SwiGLU) MLP.

    Mixture of experts (``experts`` E > 0): ``moe_layers`` M of the ``layers`` L replace the
    dense MLP (width ``intermediate``) by a router (E · h), E routed experts of width
    ``expert_intermediate`` of which each token uses ``top_k`` k, and an always-active shared
    MLP of total width ``shared_intermediate`` (Qwen2-MoE's shared expert, DeepSeek's
    ``n_shared_experts`` x expert width; 0 when absent). Which layers are MoE matters only
    through their count (every layer has the same shape). ``attention_head_dim`` is an
    explicit ``head_dim`` (0: hidden / heads), as Qwen3 uses (128 with hidden 2048, 32 heads).

    Multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank`` r_kv > 0): queries through an
    optional low-rank ``q_lora_rank`` r_q, keys/values from a shared latent of width r_kv plus
    a decoupled rope key of ``qk_rope_head_dim`` d_r; the cache holds r_kv + d_r numbers per
    token and layer (vLLM's MLA cache), and each head has ``qk_nope_head_dim`` d_n + d_r query/key
    and ``v_head_dim`` d_v value channels. The dense defaults leave every dense shape's numbers
    unchanged.

    ``quantization`` is the checkpoint's own weight format (config.json's
    ``quantization_config.quant_method``: "none", "fp8", "awq", "gptq" or "mxfp4";
    traces.models.hf_moe), with ``quant_bits`` and ``quant_group_size`` for awq/gptq (0
    otherwise; group -1: one group per input row); simulator.cost.analytic.precision prices it.
    ``quant_scheme`` is an fp8 checkpoint's scale granularity (traces.models.hf_moe
    ``fp8_scheme``), which picks vLLM's fp8 MoE backend: "" per-tensor weights with dynamic
    activation scales or not stated (vLLM's ``Fp8Config`` default, also the
    ``--quantization fp8`` knob), "static" per-tensor weights and static per-tensor activation
    scales, "channel" per-channel weights (dynamic per-token activations: "ptpc"), "block"
    block-quantised weights, "mixed" compressed-tensors groups of different schemes; the
    roofline prices all alike, ``cost = "aic"`` admits an fp8 MoE only at the scheme its
    rows timed (simulator.cost.measured.aic_cost). ``moe_routing`` is the routing method vLLM's
    router gives a MoE's experts (traces.models.hf_moe ``moe_routing``: "renormalize",
    "deepseek_v3", "llama4", ...; "" dense), which picks Blackwell's block fp8 experts class.

    ``qk_norm``: each attention layer RMS-normalises every query and key head over its head
    width before rotary (``q_norm`` / ``k_norm``: vLLM's qwen3.py ``Qwen3Attention.forward``,
    qwen3_moe.py ``Qwen3MoeAttention.forward``, gemma3.py ``Gemma3Attention.forward``): two
    more small kernels a layer (traces.models.hf_config reads it from ``model_type``).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    attention_head_dim: int = 0
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    moe_layers: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    quantization: str = "none"
    quant_bits: int = 0
    quant_group_size: int = 0
    quant_scheme: str = ""
    moe_routing: str = ""  # vLLM's RoutingMethodType of the experts (hf_moe.moe_routing)
    sliding_window: int = 0
    sliding_layers: int = 0
    mtp_layers: int = 0  # config.json num_nextn_predict_layers: MTP modules beyond ``layers``
    qk_norm: bool = False  # per-head q_norm / k_norm before rotary (Qwen3, Gemma-3)

    def __post_init__(self) -> None:
        if not 0 <= self.sliding_layers <= self.layers or (self.sliding_layers
                                                           and self.sliding_window < 1):
            raise SpecbatchError(f"model shape {self.name}: sliding_layers "
                                 f"{self.sliding_layers!r}, sliding_window "
                                 f"{self.sliding_window!r}: expected 0 <= sliding_layers <= "
                                 f"layers {self.layers} and a window >= 1 when any layer slides")

    @property
    def is_windowed(self) -> bool:
        """Whether some layer attends within a sliding window (L_s > 0)."""
        return self.sliding_layers > 0

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """Query/output channels of attention, heads · head_dim (= h unless head_dim is
        explicit)."""
        return self.heads * self.head_dim if self.attention_head_dim else self.hidden

    @property
    def is_moe(self) -> bool:
        return self.experts > 0 and self.moe_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_params(self) -> int:
        """Attention weights of one layer. Grouped-query: q/o (h · heads · head_dim each, h² by
        default), k/v (h · kv_heads · head_dim). MLA (vLLM's deepseek_v2.py
        ``DeepseekV2MLAAttention``): q_a (h r_q) + its norm (r_q) + q_b (r_q H (d_n + d_r)), or q
        (h H (d_n + d_r)) without r_q; kv_a (h (r_kv + d_r)) + its norm (r_kv); kv_b
        (r_kv H (d_n + d_v)); o (H d_v h)."""
        h, H = self.hidden, self.heads
        if not self.is_mla:
            return 2 * h * self.q_width + 2 * h * self.kv_heads * self.head_dim
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        r_q, r_kv = self.q_lora_rank, self.kv_lora_rank
        q = (h * r_q + r_q + r_q * H * qk) if r_q else h * H * qk
        kv = h * (r_kv + self.qk_rope_head_dim) + r_kv + r_kv * H * (self.qk_nope_head_dim
                                                                        + self.v_head_dim)
        return q + kv + H * self.v_head_dim * h

    @property
    def cache_width(self) -> int:
        """Numbers one token caches per layer: K and V of every KV head, or MLA's latent plus
        rope key (r_kv + d_r)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Weights of one dense decoder layer: attention (:attr:`attention_params`), MLP
        (3 h I), 2 norms."""
        if self.is_mla:
            return self.attention_params + 3 * self.hidden * self.intermediate + 2 * self.hidden
        kv = self.kv_heads * self.head_dim
        return (
            2 * self.hidden * self.q_width
            + 2 * self.hidden * kv
            + 3 * self.hidden * self.intermediate
            + 2 * self.hidden
        )

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert (gate, up, down: 3 h I_e)."""
        return 3 * self.hidden * self.expert_intermediate

    @property
    def moe_layer_dense_params(self) -> int:
        """Weights of one MoE layer that every pass reads whole: attention, 2 norms, router
        (E · h) and shared experts (3 h I_s)."""
        attention = self.layer_params - 3 * self.hidden * self.intermediate
        return attention + self.experts * self.hidden + 3 * self.hidden * self.shared_intermediate

    @property
    def decoder_params(self) -> int:
        """Weights of all decoder layers (every expert counted: what memory holds)."""
        dense = (self.layers - self.moe_layers) * self.layer_params
        if not self.is_moe:
            return dense
        return dense + self.moe_layers * (self.moe_layer_dense_params
                                          + self.experts * self.expert_params)

    @property
    def active_decoder_params(self) -> int:
        """Weights of all decoder layers one token multiplies (k experts per MoE layer)."""
        if not self.is_moe:
            return self.decoder_params
        return ((self.layers - self.moe_layers) * self.layer_params
                + self.moe_layers * (self.moe_layer_dense_params + self.top_k * self.expert_params))

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (one matrix when tied) plus the final norm."""
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.decoder_params + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses (= ``params`` for a dense model)."""
        return self.active_decoder_params + self.embedding_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token occupies across all layers (K and V; MLA's latent)."""
        if self.is_mla:
            return self.layers * self.cache_width * dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes
