"""Architecture shapes of widely used draft/target models (Llama-style decoders).

Step time on a GPU depends on a model's shape, not on its weight values, so the roofline cost
model (simulator/) and the latency profiler (traces/) work from these numbers alone. Values
are the published ``config.json`` fields of each model; ``vicuna-68m`` is the 68M Llama-style
draft (JackFram/llama-68m) the TETRIS and SpecInfer papers use for Vicuna targets;
``smollm2-135m`` is HuggingFaceTB/SmolLM2-135M(-Instruct), the real target of the GPU runs
(benchmarks/gpu/).
"""

from __future__ import annotations

from dataclasses import dataclass

from specbatch.errors import SpecbatchError


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer with grouped-query attention and a gated (SwiGLU) MLP."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    #: config.json's explicit ``head_dim`` when it is not hidden / heads (Qwen3: 128 at
    #: hidden 5120, 64 heads); None = hidden / heads, every built-in shape
    explicit_head_dim: int | None = None

    @property
    def head_dim(self) -> int:
        if self.explicit_head_dim is not None:
            return self.explicit_head_dim
        return self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Query (and attention output) channels heads · head_dim (= hidden unless head_dim is
        explicit)."""
        return self.heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: q/o (h · heads · head_dim, = h² unless head_dim is
        explicit), k/v (h · kv_heads · head_dim), MLP (3 h I), 2 norms."""
        kv = self.kv_heads * self.head_dim
        return 2 * self.hidden * self.q_dim + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (one matrix when tied) plus the final norm."""
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token occupies across all layers (K and V)."""
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
    )
}


def get_shape(name: str) -> ModelShape:
    """Look up a shape by name (case-insensitive), or read it from a Hugging Face config.json
    path (traces.hf_config); a one-line error lists the known names."""
    shape = find_shape(name)
    if shape is None:
        raise SpecbatchError(f"model shape {name!r}: expected one of {', '.join(sorted(SHAPES))} "
                             "or a Hugging Face config.json path")
    return shape


def find_shape(name: str) -> ModelShape | None:
    """The shape ``name`` denotes (registry name or config.json path), None for any other
    name (a host-side drafter such as ``ngram``, or a profile's model name)."""
    from specbatch.traces.hf_config import is_config_path, read_hf_config

    if is_config_path(name):
        return read_hf_config(name)
    return SHAPES.get(str(name).lower())
