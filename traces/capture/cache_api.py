"""The installed transformers' name for the KV cache, into and out of a forward pass.

transformers 5 renamed the forward argument ``past_key_values`` to ``cache`` (the old name
still works but warns, and is to be removed in 5.40) and the output field likewise; releases
before the rename know only ``past_key_values``. Every forward call that passes or reads a
cache goes through :func:`cache_kwargs` and :func:`returned_cache`, which pick the name the
model's own ``forward`` declares, so the same code runs warning-free on both sides of the
rename and passes the very same cache object (outputs are bit-identical either way).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

NEW_NAME, OLD_NAME = "cache", "past_key_values"


@functools.cache
def _argument_name(model_class: type) -> str:
    params = inspect.signature(model_class.forward).parameters
    return NEW_NAME if NEW_NAME in params else OLD_NAME


def cache_argument(model) -> str:
    """``"cache"`` or ``"past_key_values"``: what ``model``'s forward calls its KV cache."""
    return _argument_name(type(getattr(model, "_orig_mod", model)))  # unwrap torch.compile


def cache_kwargs(model, cache) -> dict[str, Any]:
    """``{name: cache}`` to pass to ``model(...)`` (``cache`` may be None: a fresh one)."""
    return {cache_argument(model): cache}


@functools.cache
def _output_field(output_class: type) -> str:
    fields = {f.name for f in dataclasses.fields(output_class)} \
        if dataclasses.is_dataclass(output_class) else set()
    return NEW_NAME if NEW_NAME in fields else OLD_NAME


def returned_cache(output):
    """The KV cache a forward pass returned (``use_cache=True``), under either name."""
    return getattr(output, _output_field(type(output)))


@functools.cache
def _keeps_logits(model_class: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def last_logits(model, n: int) -> dict[str, Any]:
    """``{"logits_to_keep": n}`` when ``model``'s forward takes it (the LM head runs over the
    last ``n`` positions only), else {}: a prefill of 4 prompts of 512 tokens otherwise
    computes 4 · 512 · V logits (0.4 GB at SmolLM2's V = 49,152) to read 4 rows of them."""
    return {"logits_to_keep": int(n)} if _keeps_logits(
        type(getattr(model, "_orig_mod", model))) else {}
