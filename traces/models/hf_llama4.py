"""Llama-4's text model read from a Hugging Face ``config.json`` (``model_type`` ``llama4``
with the text model under ``text_config`` (``llama4_text``), or a bare ``llama4_text``
config): its mixture-of-experts layers, shared expert, dense MLP width and chunked local
attention, as the :class:`~specbatch.traces.models.model_shape.ModelShape` fields the cost
models price.

The rules are vLLM's (vllm/model_executor/models/llama4.py, read at commit 0303cbd8), on a
config completed by transformers' ``Llama4TextConfig.__post_init__`` defaults (vLLM loads the
config through it):

=========================  ==============================================================
ModelShape                 config.json field (vLLM)
=========================  ==============================================================
experts E, top_k k         num_local_experts, num_experts_per_tok (``Llama4MoE.__init__``:
                           ``SharedFusedMoE(num_experts=..., top_k=...)``, sigmoid router)
expert_intermediate        intermediate_size (``intermediate_size_moe``)
shared_intermediate        intermediate_size: every MoE layer has one shared expert
                           (``Llama4MoE.__init__``: ``self.shared_expert = LlamaMLP(
                           intermediate_size=intermediate_size_moe)``)
moe_layers                 layer i is MoE iff (i + 1) mod interleave_moe_layer_step = 0
                           (default 1: every layer; ``Llama4DecoderLayer.__init__``);
                           ``moe_layers``, when given, must list exactly those layers (vLLM
                           reads only the step)
intermediate               intermediate_size_mlp (default 16384): the dense layers'
                           ``LlamaMLP`` (``Llama4DecoderLayer.__init__``); the cost models
                           price the L − M non-MoE layers' MLP at this width
sliding_window W           attention_chunk_size (default 8192; null: no chunking)
sliding_layers             the RoPE layers: ``no_rope_layers[i]`` != 0 (empty or absent:
                           every layer but each no_rope_layer_interval-th, default 4, as
                           ``Llama4TextConfig`` fills it). ``Llama4Attention.__init__``: a
                           NoPE layer (``no_rope_layers[i] == 0``) is global ``Attention``,
                           the others ``ChunkedLocalAttention`` of attention_chunk_size
=========================  ==============================================================

Chunked local attention priced as a sliding window: a chunked layer's query at position p
attends to the keys of its own chunk, positions ⌊p / W⌋ W .. p, which is p mod W + 1 ≤
min(p + 1, W) keys; a sliding layer's query sees min(p + 1, W) (simulator.cost.analytic.window).
So a request with c cached tokens is priced exactly while c + q ≤ W (both see every key) and
above what the chunked layer reads beyond (its context c mod W plus the new tokens against
the window's min(c, W − 1) + new ones): an upper bound on the chunked layers' attention and
KV reads, and on the KV their cache groups keep (vLLM's ``ChunkedLocalAttentionSpec`` frees
blocks before the current chunk; a sliding group keeps the last W − 1 tokens). Scout's 36
chunked layers of 48 at W = 8192 are exact for contexts up to 8192 tokens.

Not priced (text-only serving): the vision tower (``vision_config``) and the multimodal
projector; qk-norm (no weights) and the NoPE layers' attention temperature (one scale per
query). Refused, naming the field: a ``moe_layers`` that is not a list of layer indices or
disagrees with the step, a step below 1, a ``no_rope_layers`` entry other than 0/1 or a
list shorter than the layers, ``layer_types`` that disagree with ``no_rope_layers``, a
``sliding_window`` (vLLM's Llama-4 reads none), and the other families' expert spellings
(``moe_intermediate_size``, ``n_shared_experts``, ``decoder_sparse_step``, ...), which vLLM's
llama4.py does not read and :mod:`traces.models.hf_moe` would.
"""

from __future__ import annotations

from specbatch.errors import SpecbatchError

MODEL_TYPES = ("llama4", "llama4_text")
#: Llama-4's own MoE-named fields (traces.models.hf_moe's scan skips them for a Llama-4 config)
LLAMA4_MOE_KEYS = frozenset({"moe_layers", "interleave_moe_layer_step"})
#: The other families' expert spellings, read by traces.models.hf_moe but not by vLLM's llama4.py
FOREIGN_MOE_KEYS = ("num_experts", "n_routed_experts", "experts_per_token",
                    "moe_intermediate_size", "shared_expert_intermediate_size",
                    "n_shared_experts", "decoder_sparse_step", "mlp_only_layers",
                    "first_k_dense_replace", "moe_layer_freq")
#: transformers' Llama4TextConfig defaults for the fields read here
DEFAULT_MLP = 16384
DEFAULT_STEP = 1
DEFAULT_NOPE_INTERVAL = 4
DEFAULT_CHUNK = 8192
CHUNK_TYPES = ("chunked_attention", "full_attention")


def is_llama4(data: dict) -> bool:
    """Whether a (text-model) config is Llama-4's: ``model_type`` llama4 / llama4_text or a
    ``Llama4*`` architecture."""
    archs = data.get("architectures")
    named = isinstance(archs, list) and any(str(a).startswith("Llama4") for a in archs)
    return str(data.get("model_type", "")).lower() in MODEL_TYPES or named


def llama4_fields(data: dict, layers: int, where: str) -> dict:
    """The ModelShape fields of a Llama-4 text config (module docstring table): ``intermediate``
    (the dense MLP), the MoE fields and the chunked layers as ``sliding_window`` /
    ``sliding_layers``; one-line errors name the field."""
    for key in (*FOREIGN_MOE_KEYS, "sliding_window"):
        if data.get(key) is not None:
            raise SpecbatchError(f"{where}: field {key}: expected Llama-4's own fields "
                                 "(num_local_experts, num_experts_per_tok, intermediate_size, "
                                 "interleave_moe_layer_step, attention_chunk_size; vLLM's "
                                 f"llama4.py reads no {key}), got {data[key]!r}")
    experts = _required(data, "num_local_experts", where)
    top_k = _required(data, "num_experts_per_tok", where)
    if top_k > experts:
        raise SpecbatchError(f"{where}: field num_experts_per_tok: expected at most the "
                             f"{experts} routed experts, got {top_k}")
    width = _required(data, "intermediate_size", where)
    out = {"intermediate": _int(data, "intermediate_size_mlp", DEFAULT_MLP, 1, where),
           "experts": experts, "top_k": top_k, "expert_intermediate": width,
           "shared_intermediate": width, "moe_layers": len(moe_layer_indices(data, layers,
                                                                               where))}
    chunked = chunked_layer_count(data, layers, where)
    if chunked:
        out.update(sliding_window=_int(data, "attention_chunk_size", DEFAULT_CHUNK, 1, where),
                   sliding_layers=chunked)
    return out


def moe_layer_indices(data: dict, layers: int, where: str) -> list[int]:
    """The MoE layers: (i + 1) mod interleave_moe_layer_step = 0 (vLLM's
    ``Llama4DecoderLayer.__init__``), checked against ``moe_layers`` when it is given."""
    step = _int(data, "interleave_moe_layer_step", DEFAULT_STEP, 1, where)
    moe = [i for i in range(layers) if (i + 1) % step == 0]
    listed = data.get("moe_layers")
    if listed is None:
        return moe
    if not (isinstance(listed, list) and all(_whole(i) and 0 <= i < layers for i in listed)):
        raise SpecbatchError(f"{where}: field moe_layers: expected a list of layer indices in "
                             f"[0, {layers}), got {str(listed)[:60]!r}")
    if sorted(set(listed)) != moe:
        raise SpecbatchError(f"{where}: field moe_layers: expected the {len(moe)} layers "
                             f"interleave_moe_layer_step {step} makes MoE (vLLM's llama4.py "
                             f"reads only the step), got {str(listed)[:60]!r}")
    return moe


def chunked_layer_count(data: dict, layers: int, where: str) -> int:
    """How many layers attend in chunks: the RoPE layers of ``no_rope_layers`` (module
    docstring), none when ``attention_chunk_size`` is null; ``layer_types`` (transformers >= 5
    writes ``chunked_attention`` there) must agree."""
    rope = rope_layers(data, layers, where)
    chunk = data.get("attention_chunk_size", DEFAULT_CHUNK)
    chunked = [bool(r) and chunk is not None for r in rope]
    types = data.get("layer_types")
    if types is not None:
        expected = [CHUNK_TYPES[0] if c else CHUNK_TYPES[1] for c in chunked]
        if types != expected:
            raise SpecbatchError(f"{where}: field layer_types: expected {sum(chunked)} "
                                 "chunked_attention layers where no_rope_layers marks RoPE "
                                 f"(vLLM's llama4.py reads no_rope_layers), got "
                                 f"{str(types)[:60]!r}")
    return sum(chunked)


def rope_layers(data: dict, layers: int, where: str) -> list[int]:
    """``no_rope_layers`` per layer (1 RoPE, 0 NoPE), filled as ``Llama4TextConfig`` fills an
    absent or empty list: 0 at every no_rope_layer_interval-th layer."""
    given = data.get("no_rope_layers")
    if not given:
        every = _int(data, "no_rope_layer_interval", DEFAULT_NOPE_INTERVAL, 1, where)
        return [int((i + 1) % every != 0) for i in range(layers)]
    if not (isinstance(given, list) and len(given) >= layers
            and all(_whole(v) and v in (0, 1) for v in given)):
        raise SpecbatchError(f"{where}: field no_rope_layers: expected a list of at least "
                             f"{layers} entries 0 (NoPE) or 1 (RoPE), got {str(given)[:60]!r}")
    return [int(v) for v in given[:layers]]


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(data: dict, key: str, default: int, minimum: int, where: str) -> int:
    value = data.get(key, default)
    if value is None:
        value = default
    if not (_whole(value) and value >= minimum):
        raise SpecbatchError(f"{where}: field {key}: expected an integer >= {minimum}, got "
                             f"{str(value)[:40]!r}")
    return value


def _required(data: dict, key: str, where: str) -> int:
    value = data.get(key)
    if not (_whole(value) and value >= 1):
        raise SpecbatchError(f"{where}: field {key}: expected an integer >= 1 (Llama-4's "
                             f"mixture of experts), got {str(value)[:40]!r}")
    return value
