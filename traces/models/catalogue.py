"""The models people serve, addressable by their Hugging Face id, offline.

``--target meta-llama/Llama-3.1-8B-Instruct`` resolves here to a shape without a download:
either a built-in shape of :data:`traces.models.shapes.SHAPES` (whose numbers are the
published config.json fields) or a config.json bundled under traces/data/configs/ (its
provenance in traces/data/configs/provenance.json: repository, how it was written and what it
was judged against). Ids match case-insensitively. Instruct and base checkpoints of one
architecture share a shape (the fields the cost model reads are the same).

Llama-4-Scout (base and Instruct share the text model's fields) is its bundled config.json's
text model (traces.models.hf_llama4: 48 MoE layers of 16 experts, top-1, with a shared expert;
36 of the 48 layers attend in 8192-token chunks, priced as an 8192 window, exact up to 8192
tokens of context and an upper bound beyond); the vision tower is not priced. Its FP8
checkpoint (RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic, compressed-tensors) is not
catalogued: its config.json was not found to bundle; the Instruct id with ``quantization =
"fp8"`` prices the same 1-byte weights (a config.json path of that checkpoint reads its
``quantization_config`` as fp8 too: traces.models.hf_moe).

Not here, on purpose: Gemma-3 4B and larger (multimodal configs with ``text_config``, whose
fields have not been bundled and checked).

:data:`HEADS` names published EAGLE-3 heads (the ids engines' own docs and sources use) so that
tune and plan can write a complete engine line; a target without one gets a marked
placeholder.
"""

from __future__ import annotations

from pathlib import Path

#: Hugging Face id -> built-in shape name, or ``configs/<dir>`` (a bundled config.json).
CATALOGUE: dict[str, str] = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b",
    "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
    "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b",
    "meta-llama/Llama-3.2-3B-Instruct": "configs/llama-3.2-3b-instruct",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.1-70b",  # the same architecture fields
    "meta-llama/Llama-4-Scout-17B-16E": "configs/llama-4-scout-17b-16e-instruct",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "configs/llama-4-scout-17b-16e-instruct",
    "Qwen/Qwen3-8B": "configs/qwen3-8b",
    "Qwen/Qwen3-32B": "configs/qwen3-32b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B": "configs/qwen3-235b-a22b",
    "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.3": "configs/mistral-7b-instruct-v0.3",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-V2-Lite": "deepseek-v2-lite",
    "openai/gpt-oss-20b": "configs/gpt-oss-20b",
    "openai/gpt-oss-120b": "configs/gpt-oss-120b",
    "google/gemma-3-1b-it": "configs/gemma-3-1b-it",
    "google/gemma-3-270m": "gemma-3-270m",
    "lmsys/vicuna-7b-v1.3": "vicuna-7b",
    "lmsys/vicuna-13b-v1.3": "vicuna-13b",
    "lmsys/vicuna-33b-v1.3": "vicuna-33b",
    "JackFram/llama-68m": "vicuna-68m",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m",
}
#: (target id, drafter) -> a published head checkpoint.
HEADS: dict[tuple[str, str], str] = {
    ("meta-llama/Llama-3.1-8B-Instruct", "eagle3"): "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    ("Qwen/Qwen3-8B", "eagle3"): "AngelSlim/Qwen3-8B_eagle3",  # vLLM's speculative.py names it
    ("Qwen/Qwen3-30B-A3B", "eagle3"): "Tengyunw/qwen3_30b_moe_eagle3",
    ("Qwen/Qwen3-235B-A22B", "eagle3"): "lmsys/Qwen3-235B-A22B-EAGLE3",
}
_LOWER = {k.lower(): k for k in CATALOGUE}
#: built-in shape name -> the id written into engine lines (the first id listed for it)
_ID_OF_SHAPE: dict[str, str] = {}
for _id, _where in CATALOGUE.items():
    _ID_OF_SHAPE.setdefault(_where, _id)


def data_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "data"


def canonical(name: str) -> str | None:
    """The catalogue's spelling of ``name``, None when it is not a catalogued id."""
    return _LOWER.get(str(name).lower())


def resolve(name: str) -> str | None:
    """What a catalogued id denotes: a built-in shape name or a bundled config.json path."""
    key = canonical(name)
    if key is None:
        return None
    where = CATALOGUE[key]
    return str(data_dir() / where / "config.json") if where.startswith("configs/") else where


def hf_id(name: str) -> str:
    """The id engines load for ``name`` (a shape name, a catalogued id or a path): the
    catalogued id when there is one, else ``name`` itself."""
    key = canonical(name)
    if key is not None:
        return key
    return _ID_OF_SHAPE.get(str(name).lower(), str(name))


def published_head(target: str, drafter: str) -> str | None:
    """A published ``drafter`` head for ``target`` (a shape name or id), or None."""
    return HEADS.get((hf_id(target), str(drafter).lower()))


def listing() -> list[tuple[str, str]]:
    """(id, what it resolves to) for ``specbatch models`` style listings."""
    return sorted(CATALOGUE.items(), key=lambda kv: kv[0].lower())
