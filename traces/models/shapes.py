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

from specbatch.errors import SpecbatchError
from specbatch.traces.models.catalogue import canonical, resolve
from specbatch.traces.models.hf_config import is_config_path, read_hf_config
from specbatch.traces.models.model_shape import ModelShape

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
        # mixture of experts (config.json fields: traces/models/hf_config.py,
        # traces/models/hf_moe.py)
        ModelShape("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, attention_head_dim=128,
                   experts=128, top_k=8, expert_intermediate=768, moe_layers=48, qk_norm=True,
                   moe_routing="renormalize"),
        ModelShape("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, experts=8, top_k=2,
                   expert_intermediate=14336, moe_layers=32, moe_routing="renormalize"),
        ModelShape("deepseek-v2-lite", 27, 2048, 16, 16, 10944, 102400, experts=64, top_k=6,
                   expert_intermediate=1408, shared_intermediate=2 * 1408, moe_layers=26,
                   kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                   moe_routing="default"),
        # deepseek-ai/DeepSeek-V3 (config.json: 61 layers, first_k_dense_replace 3, 256 routed
        # experts of moe_intermediate_size 2048, 8 per token, 1 shared, MLA q_lora_rank 1536,
        # kv_lora_rank 512, num_nextn_predict_layers 1: its MTP module,
        # simulator.cost.features.draft_head)
        ModelShape("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, experts=256, top_k=8,
                   expert_intermediate=2048, shared_intermediate=2048, moe_layers=58,
                   kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
                   qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1,
                   moe_routing="deepseek_v3"),
        # sliding-window attention (config.json fields: traces/models/hf_config.py)
        ModelShape("mistral-7b-v0.1", 32, 4096, 32, 8, 14336, 32000, sliding_window=4096,
                   sliding_layers=32),
        ModelShape("gemma-3-270m", 18, 640, 4, 1, 2048, 262144, tie_embeddings=True,
                   attention_head_dim=256, sliding_window=512, sliding_layers=15,
                   qk_norm=True),
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

    if is_config_path(name):
        return read_hf_config(name)
    where = resolve(name)
    if where is not None:
        shape = read_hf_config(where) if where.endswith(".json") else SHAPES[where]
        return replace(shape, name=canonical(name))
    return SHAPES.get(str(name).lower())
