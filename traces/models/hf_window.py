"""Sliding-window attention read from a Hugging Face ``config.json``: the window W and how many
of the L layers slide (``ModelShape.sliding_window``, ``ModelShape.sliding_layers``).

The rules are the ones HF transformers' config classes and vLLM's model files apply, first
match wins:

1. No window: ``sliding_window`` absent or null, or ``use_sliding_window`` false
   (transformers' ``Qwen2Config`` / ``Qwen3Config`` set ``sliding_window = None`` then).
   ``sliding_window: 0`` and a ``layer_types`` naming sliding layers with no window are
   refused (one line): neither says which layers attend to what.
2. ``layer_types`` (transformers >= 4.53 writes it for Gemma-2/3, gpt-oss, Qwen2/3, Cohere2 and
   others): the layers whose type is ``"sliding_attention"`` slide; vLLM's model files test
   exactly that (vllm/model_executor/models/gemma3.py, gpt_oss.py, llama.py ``LlamaAttention``:
   ``config.layer_types[layer_idx] == "sliding_attention"`` -> ``per_layer_sliding_window``).
   Any type other than full/sliding attention (chunked, linear, ...) is refused.
3. ``sliding_window_pattern`` P (older Gemma-3 configs; ``_sliding_window_pattern`` newer):
   layer i slides iff (i + 1) mod P != 0 (vLLM's older gemma3.py ``Gemma3Attention``:
   ``bool((layer_idx + 1) % config.sliding_window_pattern)``), so L − ⌊L/P⌋ layers slide.
   ``model_type`` gemma3/gemma3_text without a pattern: P = 6 (``Gemma3TextConfig``'s
   default); gemma2: P = 2 (vLLM's gemma2.py and ``Gemma2Config``: the even layers slide).
4. ``max_window_layers`` M (Qwen2/3 with ``use_sliding_window`` true): layer i slides iff
   i >= M (transformers' configuration_qwen2.py ``layer_types``), so max(0, L − M) slide.
5. Otherwise (Mistral-7B-v0.1, Phi-3, ...): every layer slides. vLLM's ``Attention`` layer
   falls back to the model-wide ``cache_config.sliding_window`` (= config.json's
   ``sliding_window``) when the model file passes no per-layer window
   (vllm/attention/layer.py ``Attention.__init__``).
"""

from __future__ import annotations

import math

from specbatch.errors import SpecbatchError

#: model_type -> the sliding_window_pattern its config class defaults to
DEFAULT_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}
LAYER_TYPES = ("full_attention", "sliding_attention")


def window_fields(data: dict, layers: int, where: str) -> dict:
    """``{"sliding_window": W, "sliding_layers": L_s}`` of a config's key/value pairs (module
    docstring rules; ``{}`` when no layer slides); one-line errors name the field."""
    window = data.get("sliding_window")
    if data.get("use_sliding_window") is False:
        return {}
    if window is None or window is False:
        types = data.get("layer_types")
        if isinstance(types, list) and "sliding_attention" in types:
            raise SpecbatchError(f"{where}: field sliding_window: expected the window W (an "
                                 "integer >= 1) of the layers layer_types names "
                                 f"sliding_attention, got {window!r}")
        return {}
    if window == 0 and not isinstance(window, bool):  # HF writes null for no window
        raise SpecbatchError(f"{where}: field sliding_window: expected an integer >= 1, or null "
                             "for no window, got 0")
    window = _whole(window, "sliding_window", where)
    count = sliding_count(data, layers, where)
    return {"sliding_window": window, "sliding_layers": count} if count else {}


def sliding_count(data: dict, layers: int, where: str) -> int:
    """L_s: how many of the ``layers`` layers slide (rules 2-5 of the module docstring)."""
    types = data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise SpecbatchError(f"{where}: field layer_types: expected a list of "
                                 f"{layers} layer types (num_hidden_layers), got "
                                 f"{str(types)[:60]!r}")
        odd = next((t for t in types if t not in LAYER_TYPES), None)
        if odd is not None:
            raise SpecbatchError(f"{where}: field layer_types: expected "
                                 f"{' or '.join(map(repr, LAYER_TYPES))} per layer, got "
                                 f"{str(odd)[:40]!r}")
        return sum(t == "sliding_attention" for t in types)
    pattern = next((data[k] for k in ("sliding_window_pattern", "_sliding_window_pattern")
                    if data.get(k) is not None),
                   DEFAULT_PATTERNS.get(str(data.get("model_type", "")).lower()))
    if pattern is not None:
        p = _whole(pattern, "sliding_window_pattern", where)
        return layers - layers // p
    if data.get("max_window_layers") is not None:
        first = data["max_window_layers"]
        if not (isinstance(first, int) and not isinstance(first, bool) and first >= 0):
            raise SpecbatchError(f"{where}: field max_window_layers: expected an integer >= 0, "
                                 f"got {str(first)[:40]!r}")
        return max(0, layers - first)
    return layers


def _whole(value: object, key: str, where: str) -> int:
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and value == int(value) and 1 <= value < 2 ** 62)
    if not ok:
        raise SpecbatchError(f"{where}: field {key}: expected an integer >= 1, got "
                             f"{str(value)[:40]!r}")
    return int(value)
