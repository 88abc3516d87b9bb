"""Model helpers of benchmarks/gpu/smollm2.py: the GGUF -> state-dict conversion (llama.cpp's
Q/K row permutation undone), loading, layer subsets and saving a Hugging Face folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

META_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "chat_template.jinja")


_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

def reverse_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of q_proj / k_proj (rows = n_head·head_dim)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)

def gguf_state_dict(path: str | Path, heads: int, kv_heads: int) -> dict[str, torch.Tensor]:
    """float32 HF Llama state dict of a llama.cpp GGUF (embedding tied: no lm_head key)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    out = {}
    for t in reader.tensors:
        arr = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        name = t.name.removesuffix(".weight")
        if name == "token_embd":
            key = "model.embed_tokens.weight"
        elif name == "output_norm":
            key = "model.norm.weight"
        elif name == "output":
            key = "lm_head.weight"
        else:
            _, idx, part = name.split(".", 2)
            key = f"model.layers.{int(idx)}.{_LAYER_NAMES[part]}.weight"
            if part == "attn_q":
                arr = reverse_permute(arr, heads)
            elif part == "attn_k":
                arr = reverse_permute(arr, kv_heads)
        out[key] = torch.from_numpy(np.array(arr, dtype=np.float32, order="C"))
    return out

def load_model(path, device, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()

def keep_layers(model, keep: list[int]):
    """In place: only the decoder layers ``keep`` (in order), re-indexed for the KV cache."""
    layers = model.model.layers
    model.model.layers = torch.nn.ModuleList([layers[i] for i in keep])
    for j, layer in enumerate(model.model.layers):
        layer.self_attn.layer_idx = j
    model.config.num_hidden_layers = len(keep)
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[i] for i in keep]
    return model

def middle_drop(n_layers: int, drop: int) -> list[int]:
    """Layer indices kept when the ``drop`` middle layers go (30, 2 -> all but 14, 15)."""
    start = n_layers // 2 - drop // 2
    return [i for i in range(n_layers) if not start <= i < start + drop]

def init_layers(n_layers: int, layers: int, how: str) -> list[int]:
    """Target layers that initialise an L-layer draft: ``ends`` (first ⌈L/2⌉ and last ⌊L/2⌋)
    or ``spread`` (evenly spaced, first and last included)."""
    if how == "ends":
        head = (layers + 1) // 2
        return list(range(head)) + list(range(n_layers - (layers - head), n_layers))
    if layers == 1:
        return [0]
    return sorted({round(i * (n_layers - 1) / (layers - 1)) for i in range(layers)})

def save_dir(model, tokenizer_dir, out) -> None:
    out = Path(out)
    model.save_pretrained(out)
    for name in META_FILES[1:]:
        src = Path(tokenizer_dir) / name
        if src.is_file():
            shutil.copy(src, out / name)
