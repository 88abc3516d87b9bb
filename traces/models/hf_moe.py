"""Mixture-of-experts, quantisation and attention-variant fields of a Hugging Face config.json.

What :mod:`traces.models.hf_config` reads beyond a dense Llama shape, every spelling the public
checkpoints use, and the refusals (one-line errors naming the field) for what the roofline
does not price:

=========================  ==============================================================
ModelShape                 config.json fields (architecture)
=========================  ==============================================================
experts E                  num_experts (Qwen2-MoE, Qwen3-MoE, OLMoE), num_local_experts
                           (Mixtral, gpt-oss, transformers >= 5 Qwen3-MoE), n_routed_experts
                           (DeepSeek-V2/V3)
top_k k                    num_experts_per_tok (all), experts_per_token (gpt-oss)
expert_intermediate        moe_intermediate_size (Qwen, DeepSeek); else intermediate_size
                           (Mixtral, gpt-oss: every MLP is an expert)
shared_intermediate        shared_expert_intermediate_size (Qwen2-MoE);
                           n_shared_experts x moe_intermediate_size (DeepSeek)
moe_layers                 layer i is MoE unless i is in mlp_only_layers or (i + 1) is not a
                           multiple of decoder_sparse_step (Qwen), or i < first_k_dense_replace
                           or i is not a multiple of moe_layer_freq (DeepSeek); the rules are
                           vLLM's (vllm/model_executor/models/qwen2_moe.py, qwen3_moe.py
                           ``*DecoderLayer.__init__``; deepseek_v2.py
                           ``DeepseekV2DecoderLayer.__init__``); the rest use intermediate_size
moe_routing                vLLM's routing method (:func:`moe_routing`): scoring_func,
                           norm_topk_prob, topk_method, n_group, routed_scaling_factor
=========================  ==============================================================

Multi-head latent attention (DeepSeek-V2/V3, Moonlight, Kimi-K2: ``kv_lora_rank``,
``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``) is read into the
shape's MLA fields (:class:`~specbatch.traces.models.model_shape.ModelShape`).

Quantised checkpoints (``quantization_config``, vLLM's ``ModelConfig._verify_quantization``
reads the same field, vllm/config/model.py): ``quant_method`` fp8, awq, gptq or mxfp4 becomes
the shape's ``quantization`` (with ``bits`` (default 4; awq: 4 only, vLLM's ``AWQConfig``;
gptq: 2, 3, 4, 8, vLLM's ``GPTQConfig``) and ``group_size`` (default 128; -1 = per row) for
awq/gptq), priced by simulator.cost.analytic.precision. ``modules_to_not_convert`` /
``ignored_layers`` may name only modules priced at 16 bits anyway (lm_head, embeddings, norms,
routers, vision towers; for mxfp4, anything but the experts); naming a decoder projection is
refused, since the pricing would count it quantised. ``compressed-tensors`` whose every
``config_groups`` entry has 8-bit float weights (RedHatAI's FP8 checkpoints, e.g.
Llama-4-Scout FP8) is priced as fp8 (:func:`_compressed_tensors`). An fp8 checkpoint's scale
granularity becomes the shape's ``quant_scheme`` (:func:`fp8_scheme`, :func:`_ct_scheme`:
"block", "channel", "static" or "" for per-tensor weights with dynamic activations), which
picks vLLM's fp8 MoE backend. Refused, naming the field:
any other method or compressed-tensors scheme (bitsandbytes, int8 / 4-bit compressed-tensors,
fbgemm_fp8, modelopt, ...), a top-level ``bits`` below 16,
``load_in_4bit`` / ``load_in_8bit``;
DeepSeek-V3.2's sparse attention indexer (``index_topk``); any other field whose name mentions
experts or MoE with a value that could change the shape (an integer > 1, a numeric string, a
list or an object: ``moe_num_experts``, DBRX's nested ``ffn_config.moe_num_experts``,
``moe_top_k``, ...), and a known field of the wrong type (``"num_local_experts": "8"``, a
per-layer list). Not priced, and not refused: Qwen2-MoE's
shared-expert gate (h weights per layer), Qwen3's per-head q/k norms (2 x head_dim), biases.
"""

from __future__ import annotations

import math
import re

from specbatch.errors import SpecbatchError

EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")
#: every MoE-named field read here (the scan for unknown spellings skips them)
KNOWN_KEYS = frozenset(EXPERT_KEYS + TOP_K_KEYS + (
    "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts",
    "decoder_sparse_step", "mlp_only_layers", "first_k_dense_replace", "moe_layer_freq"))
QUANT_FLAGS = ("load_in_4bit", "load_in_8bit")
#: ``quantization_config.quant_method`` values priced (vLLM's ``--quantization`` names).
QUANT_METHODS = ("fp8", "awq", "gptq", "mxfp4")
#: llm-compressor's format; its 8-bit float weight schemes are priced as fp8.
COMPRESSED_TENSORS = "compressed-tensors"
#: The integer weight-only methods, which carry ``bits`` and ``group_size``.
INT_METHODS = ("awq", "gptq")
#: Bit widths vLLM's GPTQConfig accepts (``GPTQConfig.__init__``); AWQ is 4-bit only.
GPTQ_BITS = (2, 3, 4, 8)
DEFAULT_QUANT_GROUP = 128
#: The fields listing modules a quantised checkpoint keeps unquantised.
KEPT_MODULE_KEYS = ("modules_to_not_convert", "ignored_layers")
#: Module-name components the pricing keeps at 16 bits under every method.
SIXTEEN_BIT_MODULES = frozenset({
    "lm_head", "embed_tokens", "embed", "wte", "norm", "router", "gate", "shared_expert_gate",
    "visual", "vision_tower", "vision_model", "audio_tower", "multi_modal_projector",
    "mm_projector"})
MAX_EXPERTS = 65_536  # routed experts per layer (the largest public models use 384)
MAX_LAYERS = 10_000  # decoder layers of a MoE config (the layer rules are evaluated per layer)
MAX_NESTING = 16  # nested objects scanned for expert spellings
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
SPARSE_ATTENTION_KEYS = ("index_topk", "index_n_heads")


def read_quantization(data: dict, where: str) -> dict:
    """The checkpoint's weight format as :class:`~specbatch.traces.models.model_shape.ModelShape`
    fields (``quantization``, ``quant_bits``, ``quant_group_size``), {} for a 16-bit one
    (module docstring: the methods read, the refusals)."""
    quant = data.get("quantization_config")
    if quant is None:
        _check_legacy_bits(data, where)
        return {}
    if quant == {}:  # neither a format nor its absence: refused rather than read as 16-bit
        raise SpecbatchError(f"{where}: field quantization_config: expected an object with "
                             f"quant_method (one of {', '.join(QUANT_METHODS)}), or no "
                             "quantization_config for a 16-bit checkpoint, got {}")
    if not isinstance(quant, dict):
        raise SpecbatchError(f"{where}: field quantization_config: expected an object with "
                             f"quant_method, got {quant!r}")
    method = str(quant.get("quant_method", "")).lower()
    if method == COMPRESSED_TENSORS:
        return _compressed_tensors(quant, where)
    if method not in QUANT_METHODS:
        raise SpecbatchError(f"{where}: field quantization_config.quant_method: expected one of "
                             f"{', '.join(QUANT_METHODS)} (the formats priced), got "
                             f"{quant.get('quant_method')!r}")
    _check_kept_modules(quant, method, where)
    if method == "fp8":
        return {"quantization": "fp8", **_scheme_field(fp8_scheme(quant))}
    if method not in INT_METHODS:
        return {"quantization": method}
    # AutoAWQ's older spellings w_bit / q_group_size, as vLLM's AWQConfig.from_config reads
    bits = quant.get("bits", quant.get("w_bit", 4))
    allowed = (4,) if method == "awq" else GPTQ_BITS  # vLLM's AWQConfig / GPTQConfig
    if not (_integer(bits) and int(bits) in allowed):
        raise SpecbatchError(f"{where}: field quantization_config.bits: expected one of "
                             f"{', '.join(map(str, allowed))} for {method}, got {bits!r}")
    group = quant.get("group_size", quant.get("q_group_size", DEFAULT_QUANT_GROUP))
    if not (_integer(group) and (int(group) >= 1 or int(group) == -1)):
        raise SpecbatchError(f"{where}: field quantization_config.group_size: expected an "
                             f"integer >= 1 or -1 (one group per input row), got {group!r}")
    return {"quantization": method, "quant_bits": int(bits), "quant_group_size": int(group)}


def _compressed_tensors(quant: dict, where: str) -> dict:
    """A ``compressed-tensors`` checkpoint (llm-compressor's format; vLLM's
    ``CompressedTensorsConfig``, model_executor/layers/quantization/compressed_tensors/):
    priced as ``fp8`` when every ``config_groups`` entry quantises its weights to 8-bit
    floats (vLLM's ``CompressedTensorsW8A8Fp8`` scheme, or ``CompressedTensorsW8A16Fp8``
    without ``input_activations``: the same 1-byte weights; the weight-only kernel's bf16
    compute is not told apart). Any other scheme (int8, 4-bit packs, sparsity) is refused, and
    the ``ignore`` list (regexes ``re:...`` or module names) may name only modules priced at 16
    bits anyway, as for ``modules_to_not_convert``."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise SpecbatchError(f"{where}: field quantization_config.config_groups: expected an "
                             f"object of quantisation groups, got {groups!r}")
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not (isinstance(weights, dict) and weights.get("type") == "float"
                and weights.get("num_bits") == 8):
            raise SpecbatchError(
                f"{where}: field quantization_config.config_groups.{name}.weights: expected "
                "8-bit float weights (type float, num_bits 8: the compressed-tensors scheme "
                f"priced, as fp8), got {weights!r}")
    ignore = quant.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(e, str) for e in ignore):
        raise SpecbatchError(f"{where}: field quantization_config.ignore: expected a list of "
                             f"module names or re: patterns, got {ignore!r}")
    kept = [e[3:] if e.startswith("re:") else e for e in ignore]
    _check_kept_modules({"ignore": [re.sub(r"[\\^$()?+\[\]|]", "", e) for e in kept]},
                        "fp8", where, keys=("ignore",))
    schemes = {_ct_scheme(group) for group in groups.values()}
    return {"quantization": "fp8", **_scheme_field(schemes.pop() if len(schemes) == 1
                                                   else "mixed")}


def fp8_scheme(quant: dict) -> str:
    """The ``quant_scheme`` of a ``quant_method`` fp8 block (vLLM's ``Fp8Config``): "block"
    with ``weight_block_size``, else per-tensor weights: "static" when ``activation_scheme``
    is static, "" for Fp8Config's default dynamic activation scales."""
    if quant.get("weight_block_size") is not None:
        return "block"
    return "static" if str(quant.get("activation_scheme", "")).lower() == "static" else ""


def _ct_scheme(group: dict) -> str:
    """The ``quant_scheme`` of one compressed-tensors fp8 group (vLLM's
    ``CompressedTensorsW8A8Fp8MoEMethod`` maps ``weights.strategy`` channel / tensor / block
    and ``input_activations`` to its fp8 MoE keys): "block", "channel" (per-channel weights,
    "ptpc" with dynamic per-token activations), "static" (per-tensor weights, static per-tensor
    activations), "" (per-tensor weights, dynamic or no activation quantisation); any other
    weight strategy by its name."""
    strategy = str(group["weights"].get("strategy") or "tensor").lower()
    if strategy != "tensor":
        return strategy
    act = group.get("input_activations")
    static = (isinstance(act, dict) and str(act.get("strategy") or "").lower() == "tensor"
              and act.get("dynamic") is False)
    return "static" if static else ""


def _scheme_field(scheme: str) -> dict:
    """``{"quant_scheme": scheme}``, {} for "" (the field's default: a shape reads as before)."""
    return {"quant_scheme": scheme} if scheme else {}


def _check_legacy_bits(data: dict, where: str) -> None:
    """Refuse the quantisation spellings outside ``quantization_config`` (a top-level
    ``bits`` below 16, bitsandbytes' ``load_in_4bit`` / ``load_in_8bit``)."""
    bits = data.get("bits")
    if bits is not None and not (_integer(bits) and bits >= 16):
        raise SpecbatchError(f"{where}: field bits: expected a 16-bit checkpoint or a "
                             f"quantization_config of {', '.join(QUANT_METHODS)}, got {bits!r}")
    for key in QUANT_FLAGS:
        if data.get(key):
            raise SpecbatchError(f"{where}: field {key}: expected a 16-bit checkpoint or a "
                                 f"quantization_config of {', '.join(QUANT_METHODS)}, got "
                                 f"{data[key]!r}")


def _check_kept_modules(quant: dict, method: str, where: str,
                        keys: tuple[str, ...] = KEPT_MODULE_KEYS) -> None:
    """Refuse a ``modules_to_not_convert`` / ``ignored_layers`` entry that would keep at 16
    bits a weight the pricing quantises (a decoder-layer projection; for mxfp4 an expert).
    Entries naming what is 16-bit anyway (module docstring) pass."""
    for key in keys:
        entries = quant.get(key) or []
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise SpecbatchError(f"{where}: field quantization_config.{key}: expected a list of "
                                 f"module names, got {entries!r}")
        for entry in entries:
            parts = {p for p in entry.lower().replace("*", "").split(".") if p}
            if method == "mxfp4":
                harmless = not any("expert" in p for p in parts)
            else:
                harmless = bool(parts & SIXTEEN_BIT_MODULES)
            if not harmless:
                raise SpecbatchError(
                    f"{where}: field quantization_config.{key}: expected only modules the "
                    f"pricing keeps at 16 bits ({', '.join(sorted(SIXTEEN_BIT_MODULES))}"
                    f"{'; for mxfp4 anything but experts' if method == 'mxfp4' else ''}), "
                    f"got {entry!r}")


def mla_fields(data: dict, where: str) -> dict:
    """The multi-head latent attention fields of
    :class:`~specbatch.traces.models.model_shape.ModelShape` (``kv_lora_rank``, ``q_lora_rank``
    (null: none), ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``), {} without
    ``kv_lora_rank``. DeepSeek-V3.2's sparse attention indexer (``index_topk``) is refused: its
    top-k token selection is not priced."""
    for key in SPARSE_ATTENTION_KEYS:
        if data.get(key) is not None:
            raise SpecbatchError(f"{where}: field {key}: expected dense attention (a sparse "
                                 f"attention indexer is not priced), got {data[key]!r}")
    if data.get("kv_lora_rank") is None:
        for key in MLA_KEYS[1:]:
            if data.get(key) is not None:
                raise SpecbatchError(f"{where}: field kv_lora_rank: expected an integer >= 1 "
                                     f"next to {key}, got none")
        return {}
    out = {"kv_lora_rank": _optional_int(data, "kv_lora_rank", where, minimum=1),
           "q_lora_rank": _optional_int(data, "q_lora_rank", where, minimum=1) or 0}
    for key in MLA_KEYS[2:]:
        value = _optional_int(data, key, where, minimum=1)
        if value is None:
            raise SpecbatchError(f"{where}: field {key}: expected an integer >= 1 (multi-head "
                                 "latent attention), got none")
        out[key] = value
    return out


def check_unknown_moe_fields(data: dict, where: str, prefix: str = "", depth: int = 0,
                             known: frozenset = KNOWN_KEYS) -> None:
    """Refuse any expert/MoE-named field this module does not read (also inside nested
    objects: DBRX's ``ffn_config.moe_num_experts``) whose value could change the shape: an
    integer > 1, a numeric string, a list or an object. Coefficients (floats such as
    ``router_aux_loss_coef``), flags, names (``"moe_router_dtype": "float32"``) and zeros
    pass. ``known``: the top-level fields read (Llama-4 adds its own: traces.models.hf_llama4)."""
    if depth > MAX_NESTING:
        raise SpecbatchError(f"{where}: field {prefix.rstrip('.')}: expected at most "
                             f"{MAX_NESTING} nested objects, got more")
    for key, value in data.items():
        name = f"{prefix}{key}"
        if key == "quantization_config":
            continue
        if isinstance(value, dict):
            check_unknown_moe_fields(value, where, f"{name}.", depth + 1, known)
        lowered = str(key).lower()
        if ("expert" not in lowered and "moe" not in lowered) or (not prefix and key in known):
            continue
        shaping = (isinstance(value, (list, dict)) and bool(value)) or (
            isinstance(value, str) and value.strip().lstrip("-").isdigit()) or (
            _integer(value) and value > 1)
        if shaping:
            raise SpecbatchError(f"{where}: field {name}: expected one of the mixture-of-experts "
                                 f"spellings the roofline prices ({', '.join(EXPERT_KEYS)}; "
                                 f"{', '.join(TOP_K_KEYS)}), got {value!r}")


def moe_fields(data: dict, layers: int, intermediate: int | None, where: str) -> dict:
    """The MoE fields of :class:`~specbatch.traces.models.model_shape.ModelShape` (module
    docstring), {} for a dense config. ``intermediate`` is the config's intermediate_size (None if
    absent)."""
    check_unknown_moe_fields(data, where)
    experts = _agreeing(data, EXPERT_KEYS, where, minimum=0)
    if not experts:
        routed = [k for k in (*TOP_K_KEYS, "moe_intermediate_size") if data.get(k) is not None]
        if routed:  # MoE fields without experts: a damaged MoE config, not a dense one
            key = next((k for k in EXPERT_KEYS if k in data), EXPERT_KEYS[0])
            raise SpecbatchError(f"{where}: field {key}: expected an integer >= 1 (the routed "
                                 f"experts {routed[0]} picks from), or no {routed[0]} for a "
                                 f"dense model, got {data.get(key)!r}")
        return {}
    if experts > MAX_EXPERTS or layers > MAX_LAYERS:
        key, value, cap = ((_present(data, EXPERT_KEYS), experts, MAX_EXPERTS)
                           if experts > MAX_EXPERTS else ("num_hidden_layers", layers, MAX_LAYERS))
        raise SpecbatchError(f"{where}: field {key}: expected at most {cap} for a "
                             f"mixture-of-experts model, got {value}")
    top_k = _agreeing(data, TOP_K_KEYS, where, minimum=1)
    if top_k is None:
        raise SpecbatchError(f"{where}: field num_experts_per_tok: expected an integer >= 1 "
                             f"(experts per token of the {experts} routed experts), got none")
    if top_k > experts:
        raise SpecbatchError(f"{where}: field {_present(data, TOP_K_KEYS)}: expected at most "
                             f"the {experts} routed experts, got {top_k}")
    width = _optional_int(data, "moe_intermediate_size", where, minimum=1)
    if width is None:
        if intermediate is None:
            raise SpecbatchError(f"{where}: field moe_intermediate_size: expected an integer "
                                 ">= 1 (or intermediate_size), got none")
        width = intermediate
    shared = _optional_int(data, "shared_expert_intermediate_size", where, minimum=0) or 0
    n_shared = _optional_int(data, "n_shared_experts", where, minimum=0) or 0
    shared += n_shared * width
    return {"experts": experts, "top_k": top_k, "expert_intermediate": width,
            "shared_intermediate": shared, "moe_layers": count_moe_layers(data, layers, where),
            "moe_routing": moe_routing(data)}


#: ``model_type`` or architecture -> whether its experts renormalise the top-k weights where
#: the config has no ``norm_topk_prob`` (vLLM's mixtral.py passes ``renormalize=True``;
#: transformers' ``DeepseekV3Config`` defaults norm_topk_prob to true, the other MoE configs
#: to false).
RENORMALIZE_DEFAULT = {"mixtral": True, "deepseek_v3": True,
                       "MixtralForCausalLM": True, "DeepseekV3ForCausalLM": True}


def moe_routing(data: dict) -> str:
    """The routing method vLLM's router gives a MoE config's experts, as the snake-case name of
    vLLM's ``RoutingMethodType`` (vllm/model_executor/layers/fused_moe/config.py
    ``get_routing_method_type``, which the routers of router/router_factory.py
    ``create_fused_moe_router`` answer): ``scoring_func`` (default softmax), the top-k
    renormalisation (``norm_topk_prob``; :data:`RENORMALIZE_DEFAULT`), a score-correction bias
    (``topk_method`` noaux_tc: deepseek_v2.py passes ``e_score_correction_bias``) and expert
    groups (``n_group``). Softmax: "renormalize" (Qwen3-MoE, Mixtral) or "default"; sigmoid
    with the bias and groups, renormalised: "deepseek_v3"; without groups at a routed scale of
    1: "minimax2"; sigmoid without the bias: "sigmoid_renorm" / "sigmoid"; sqrtsoftplus,
    renormalised: "deepseek_v4"; anything else "unspecified". Llama-4's custom router is
    "llama4" (traces.models.hf_config)."""
    model_type = str(data.get("model_type", "")).lower()
    scoring = str(data.get("scoring_func") or "softmax").lower()
    norm = data.get("norm_topk_prob")
    names = [model_type, *(data.get("architectures") or [])]
    default = any(RENORMALIZE_DEFAULT.get(str(n), False) for n in names)
    renorm = default if norm is None else bool(norm)
    if scoring == "sqrtsoftplus":
        return "deepseek_v4" if renorm else "unspecified"
    if str(data.get("topk_method", "")).lower() == "noaux_tc":
        if scoring != "sigmoid" or not renorm:
            return "unspecified"
        if data.get("n_group"):
            return "deepseek_v3"
        return "minimax2" if data.get("routed_scaling_factor") in (None, 1, 1.0) else "unspecified"
    if scoring == "sigmoid":
        return "sigmoid_renorm" if renorm else "sigmoid"
    if scoring == "softmax":
        return "renormalize" if renorm else "default"
    return "unspecified"


def count_moe_layers(data: dict, layers: int, where: str) -> int:
    """How many of the ``layers`` decoder layers are MoE (vLLM's rules, module docstring)."""
    step = _optional_int(data, "decoder_sparse_step", where, minimum=1) or 1
    first = _optional_int(data, "first_k_dense_replace", where, minimum=0) or 0
    freq = _optional_int(data, "moe_layer_freq", where, minimum=1) or 1
    only = data.get("mlp_only_layers") or []
    if not (isinstance(only, list) and all(_integer(i) and 0 <= i < layers for i in only)):
        raise SpecbatchError(f"{where}: field mlp_only_layers: expected a list of layer indices "
                             f"in [0, {layers}), got {only!r}")
    dense = set(only)
    moe = [i for i in range(layers)
           if i not in dense and (i + 1) % step == 0 and i >= first and i % freq == 0]
    if not moe:
        raise SpecbatchError(f"{where}: field decoder_sparse_step: expected at least one MoE "
                             "layer (mlp_only_layers, decoder_sparse_step, first_k_dense_replace "
                             "and moe_layer_freq leave none)")
    return len(moe)


def _integer(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))


def _optional_int(data: dict, key: str, where: str, minimum: int) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not (_integer(value) and value >= minimum):
        raise SpecbatchError(f"{where}: field {key}: expected an integer >= {minimum}, got "
                             f"{value!r}")
    return int(value)


def _present(data: dict, keys: tuple[str, ...]) -> str:
    return next(k for k in keys if data.get(k) is not None)


def _agreeing(data: dict, keys: tuple[str, ...], where: str, minimum: int) -> int | None:
    """The value of the spellings ``keys`` present (all equal), None when none is."""
    values = {k: _optional_int(data, k, where, minimum) for k in keys if data.get(k) is not None}
    if len(set(values.values())) > 1:
        listed = ", ".join(f"{k} = {v}" for k, v in values.items())
        raise SpecbatchError(f"{where}: field {keys[0]}: expected one value across its "
                             f"spellings, got {listed}")
    return next(iter(values.values()), None)
