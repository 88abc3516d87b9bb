"""Model shapes read from a Hugging Face ``config.json``, so any Llama-style model can be priced.

The roofline cost model (simulator/cost/analytic/roofline.py) and the KV/weight accounting need only
a model's shape (:class:`traces.models.model_shape.ModelShape`). For a model outside the built-in
registry a user points ``target`` / ``draft`` at its ``config.json`` (or the directory holding it)
and the shape is read from the standard fields:

==========================  =====================================================
ModelShape                  config.json field (aliases)
==========================  =====================================================
layers                      num_hidden_layers (n_layer, num_layers)
hidden                      hidden_size (n_embd, d_model)
heads                       num_attention_heads (n_head)
kv_heads                    num_key_value_heads (default: num_attention_heads)
intermediate                intermediate_size (n_inner, ffn_dim; default 4 x hidden)
vocab                       vocab_size
tie_embeddings              tie_word_embeddings (default false)
attention_head_dim          head_dim, when it differs from hidden / heads (Qwen3)
experts, top_k, ...         mixture-of-experts fields: traces.models.hf_moe
kv_lora_rank, ...           multi-head latent attention fields: traces.models.hf_moe
sliding_window, ...         sliding-window layers (layer_types, ...): traces.models.hf_window
Llama-4 (llama4_text)       its MoE layers, shared expert, dense MLP and chunked local
                            attention: traces.models.hf_llama4
mtp_layers                  num_nextn_predict_layers (default 0: no MTP module)
==========================  =====================================================

A multimodal config (Llama-4, Gemma-3 >= 4B) is read for its text model: ``text_config``'s
fields, with the top level's where the text model has none (:func:`text_model`); the vision
tower and projector are not priced (text-only serving).

``torch_dtype`` (or ``dtype``) is checked against what the roofline prices: 2-byte weights
and KV. ``bfloat16`` and ``float16`` are served as they are; ``float32`` checkpoints are
served in 16 bits (vLLM's ``dtype = "auto"`` does the same), so they are priced at 2 bytes
too; any other dtype (8-bit, 4-bit) is a one-line error. Shapes the roofline cannot price
are refused the same way (:mod:`traces.models.hf_moe`): quantised checkpoints of a method
not priced (``quantization_config`` other than fp8, awq, gptq, mxfp4; a top-level ``bits``;
the read ones become the shape's ``quantization``), sparse attention indexers (``index_topk``) and
mixture-of-experts spellings it does not read (``moe_num_experts``, nested or string-typed
expert counts, per-layer lists).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from specbatch.errors import SpecbatchError
from specbatch.limits import INT64_MAX
from specbatch.traces.models.hf_llama4 import LLAMA4_MOE_KEYS, is_llama4, llama4_fields
from specbatch.traces.models.hf_moe import (
    KNOWN_KEYS,
    check_unknown_moe_fields,
    mla_fields,
    moe_fields,
    read_quantization,
)
from specbatch.traces.models.hf_window import window_fields
from specbatch.traces.models.model_shape import ModelShape

#: ModelShape field -> accepted config.json keys, first present wins.
FIELD_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
}
#: dtypes priced at 2 bytes (float32 is served in 16 bits, as vLLM's dtype "auto" does).
SERVED_DTYPES = ("bfloat16", "float16", "float32", "bf16", "fp16", "fp32", "half", "float")


def is_config_path(name: str) -> bool:
    """Whether a model name denotes a config.json (a ``.json`` path or a directory with one)
    rather than a registry shape name."""
    text = str(name)
    return text.lower().endswith(".json") or Path(text, "config.json").is_file()


def config_file(name: str) -> Path:
    """The config.json file ``name`` denotes (itself, or ``name/config.json``)."""
    path = Path(name)
    return path / "config.json" if path.is_dir() else path


def read_hf_config(name: str) -> ModelShape:
    """The :class:`ModelShape` of the Hugging Face config ``name`` (a file or its directory);
    every problem is a one-line error naming the file and the field."""
    path = config_file(name)
    where = f"model config {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecbatchError(
            f"{where}: expected an existing config.json, got no such file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecbatchError(f"{where}: expected a readable UTF-8 file, got {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise SpecbatchError(f"{where}: expected JSON, got {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SpecbatchError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return shape_from_fields(text_model(data), str(name), where)


#: ``model_type`` values whose attention normalises each query and key head (ModelShape
#: ``qk_norm``; vLLM's qwen3.py, qwen3_moe.py, gemma3.py).
QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text"})


def text_model(data: dict) -> dict:
    """A multimodal config's text model as one flat config: ``text_config``'s fields, with the
    top level's (``quantization_config``, ``torch_dtype``, ``tie_word_embeddings``,
    ``architectures``, ``vision_config``, ...) where the text model has none; a config without
    ``text_config`` as it is."""
    text = data.get("text_config")
    if not isinstance(text, dict):
        return data
    return {**{k: v for k, v in data.items() if k != "text_config"}, **text}


def shape_from_fields(data: dict, name: str, where: str) -> ModelShape:
    """A :class:`ModelShape` from a config's key/value pairs (module docstring table; the
    mixture-of-experts fields and the refusals: :mod:`traces.models.hf_moe`)."""
    quant = read_quantization(data, where)
    mla = mla_fields(data, where)
    llama4 = is_llama4(data)
    check_unknown_moe_fields(data, where, known=KNOWN_KEYS | LLAMA4_MOE_KEYS if llama4
                             else KNOWN_KEYS)
    values = {name_: _field(data, keys, where) for name_, keys in FIELD_KEYS.items()}
    kv = data.get("num_key_value_heads")
    values["kv_heads"] = values["heads"] if kv is None else _positive(kv, "num_key_value_heads",
                                                                       where)
    inter = next((data[k] for k in ("intermediate_size", "n_inner", "ffn_dim")
                  if data.get(k) is not None), None)
    values["intermediate"] = (4 * values["hidden"] if inter is None
                              else _positive(inter, "intermediate_size", where))
    if llama4:  # its dense MLP, experts, shared expert and chunked layers: hf_llama4
        values.update(llama4_fields(data, values["layers"], where))
        values["moe_routing"] = "llama4"  # Llama4MoE.custom_routing_function (hf_moe)
    else:
        values.update(moe_fields(data, values["layers"], None if inter is None
                                 else values["intermediate"], where))
    values["attention_head_dim"] = _check_heads(data, values, where)
    values.update(mla)
    values.update(quant)
    if not llama4:
        values.update(window_fields(data, values["layers"], where))
    mtp = data.get("num_nextn_predict_layers")  # DeepSeek-V3 / GLM-4.5 / MiMo MTP modules
    values["mtp_layers"] = 0 if mtp in (None, 0) else _positive(mtp, "num_nextn_predict_layers",
                                                                where)
    values["qk_norm"] = str(data.get("model_type", "")).lower() in QK_NORM_MODEL_TYPES
    _check_dtype(data, where)
    tie = data.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise SpecbatchError(f"{where}: field tie_word_embeddings: expected true or false, got "
                             f"{tie!r}")
    return ModelShape(name=name, tie_embeddings=tie, **values)


def _check_heads(data: dict, values: dict, where: str) -> int:
    """The explicit head_dim when it differs from hidden / heads (Qwen3), else 0."""
    heads, kv, hidden = values["heads"], values["kv_heads"], values["hidden"]
    if kv > heads or heads % kv:
        raise SpecbatchError(f"{where}: field num_key_value_heads: expected a divisor of "
                             f"num_attention_heads {heads}, got {kv}")
    head_dim = data.get("head_dim")
    if head_dim is not None:
        head_dim = _positive(head_dim, "head_dim", where)
        if hidden % heads or head_dim != hidden // heads:
            return head_dim
    elif hidden % heads:
        raise SpecbatchError(f"{where}: field num_attention_heads: expected a divisor of "
                             f"hidden_size {hidden} (or an explicit head_dim), got {heads}")
    return 0


def _check_dtype(data: dict, where: str) -> None:
    for key in ("torch_dtype", "dtype"):
        dtype = data.get(key)
        if dtype is not None and str(dtype).lower() not in SERVED_DTYPES:
            raise SpecbatchError(f"{where}: field {key}: expected bfloat16, float16 or float32 "
                                 f"(the roofline prices 2-byte weights and KV), got {dtype!r}")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(value: object, key: str, where: str) -> int:
    whole = _number(value) and (isinstance(value, int) or (math.isfinite(value)
                                                           and value == int(value)))
    if not (whole and 1 <= value <= INT64_MAX):
        raise SpecbatchError(f"{where}: field {key}: expected an integer in [1, 2^63 - 1], "
                             f"got {str(value)[:40]!r}")
    return int(value)


def _field(data: dict, keys: tuple[str, ...], where: str) -> int:
    for key in keys:
        if key in data:
            return _positive(data[key], key, where)
    raise SpecbatchError(f"{where}: field {keys[0]}: expected an integer >= 1, got none")
