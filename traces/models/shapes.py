"""Architecture shapes of widely used draft/target models (Llama-style decoders).

Step time on a GPU depends on a model's shape, not on its weight values, so the roofline cost
model (simulator/) and the latency profiler (traces/) work from these numbers alone. Values
are the published ``config.json`` fields of each model; ``vicuna-68m`` is the 68M Llama-style
draft (JackFram/llama-68m) the TETRIS and SpecInfer papers use for Vicuna targets;
``smollm2-135m`` is HuggingFaceTB/SmolLM2-135M(-Instruct), the real target of the GPU runs
(benchmarks/gpu/). The mixture-of-experts shapes are Qwen/Qwen3-30B-A3B (its config.json is
bundled: traces/data/configs/qwen3-30b-a3b/, read to the same shape in the tests) and
mistralai/Mixtral-8x7B-v0.1 (``num_local_experts`` 8, ``num_experts_per_tok`` 2,
``intermediate_size`` 14336 per expert, 32 layers, hidden 4096, 32/8 heads, vocab 32000) and
deepseek-ai/DeepSeek-V2-Lite (multi-head latent attention and MoE: 64 routed experts, 6 per
token, 2 shared, the first layer dense; its config.json fields are pinned in
tests/traces/models/test_hf_moe.py). The sliding-window shapes are mistralai/Mistral-7B-v0.1
(``sliding_window`` 4096 on all 32 layers, otherwise Llama-style: hidden 4096, 32/8 heads, MLP
14336, vocab 32000) and google/gemma-3-270m (18 layers, 15 of them sliding with window 512 by
its ``layer_types``; hidden 640, 4/1 heads of ``head_dim`` 256, MLP 2048, vocab 262144, tied
embeddings; its config.json fields are pinned in tests/traces/models/test_hf_window.py; the
shape's two norms per layer undercount Gemma's four by 2 h per layer).
"""

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
    sliding_window: int = 0
    sliding_layers: int = 0
    mtp_layers: int = 0  # config.json num_nextn_predict_layers: MTP modules beyond ``layers``

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
        """Query/output channels of attention, heads · head_dim (= h unless head_dim is explicit)."""
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
        return 2 * self.hidden * self.q_width + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate + 2 * self.hidden

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


SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in (
        ModelShape("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256),
        ModelShape("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256),
        ModelShape("llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256),
        ModelShape("llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, tie_embeddings=True),
        ModelShape("vicuna-7b", 32, 4096, 32, 32, 11008, 32000),
        ModelShape("vicuna-13b", 40, 5120, 40, 40, 13824, 32000),
        ModelShape("vicuna-33b", 60, 6656, 52, 52, 17920, 32000),
        ModelShape("vicuna-68m", 2, 768, 12, 12, 3072, 32000),
        ModelShape("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, tie_embeddings=True),
        ModelShape("smollm2-135m", 30, 576, 9, 3, 1536, 49152, tie_embeddings=True),
        ModelShape("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064),
        # mixture of experts (config.json fields: traces/models/hf_config.py, traces/models/hf_moe.py)
        ModelShape("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, attention_head_dim=128,
                   experts=128, top_k=8, expert_intermediate=768, moe_layers=48),
        ModelShape("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, experts=8, top_k=2,
                   expert_intermediate=14336, moe_layers=32),
        ModelShape("deepseek-v2-lite", 27, 2048, 16, 16, 10944, 102400, experts=64, top_k=6,
                   expert_intermediate=1408, shared_intermediate=2 * 1408, moe_layers=26,
                   kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
        # deepseek-ai/DeepSeek-V3 (config.json: 61 layers, first_k_dense_replace 3, 256 routed
        # experts of moe_intermediate_size 2048, 8 per token, 1 shared, MLA q_lora_rank 1536,
        # kv_lora_rank 512, num_nextn_predict_layers 1: its MTP module,
        # simulator.cost.features.draft_head)
        ModelShape("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, experts=256, top_k=8,
                   expert_intermediate=2048, shared_intermediate=2048, moe_layers=58,
                   kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
                   qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1),
        # sliding-window attention (config.json fields: traces/models/hf_config.py)
        ModelShape("mistral-7b-v0.1", 32, 4096, 32, 8, 14336, 32000, sliding_window=4096,
                   sliding_layers=32),
        ModelShape("gemma-3-270m", 18, 640, 4, 1, 2048, 262144, tie_embeddings=True,
                   attention_head_dim=256, sliding_window=512, sliding_layers=15),
    )
}


def get_shape(name: str) -> ModelShape:
    """Look up a shape by name (case-insensitive), or read it from a Hugging Face config.json
    path (traces.models.hf_config); a one-line error lists the known names."""
    shape = find_shape(name)
    if shape is None:
        raise SpecbatchError(f"model shape {name!r}: expected one of {', '.join(sorted(SHAPES))}, "
                             "a catalogued Hugging Face id (traces/models/catalogue.py) or "
                             "a Hugging Face config.json path")
    return shape


def find_shape(name: str) -> ModelShape | None:
    """The shape ``name`` denotes (registry name, config.json path, or a Hugging Face id of
    the catalogue, traces.models.catalogue), None for any other name (a host-side drafter
    such as ``ngram``, or a profile's model name)."""
    from dataclasses import replace

    from specbatch.traces.models.catalogue import canonical, resolve
    from specbatch.traces.models.hf_config import is_config_path, read_hf_config

    if is_config_path(name):
        return read_hf_config(name)
    where = resolve(name)
    if where is not None:
        shape = read_hf_config(where) if where.endswith(".json") else SHAPES[where]
        return replace(shape, name=canonical(name))
    return SHAPES.get(str(name).lower())
