"""Where a run's acceptance came from, and whether it is the asked pair's.

Every speculative answer rests on acceptance, so every answer names its source: a trace (the
pair it was captured on), an acceptance profile (the pair and conditions it was measured on),
or a constant α the user assumed (synthetic: no pair). ``pair_matches`` compares the asked
``target`` and ``draft`` with the source's pair by canonical name (:func:`canonical`:
``meta-llama/Llama-3.1-8B-Instruct`` and the shape ``llama-3.1-8b`` are one model); a head
drafter (``eagle``, ``eagle3``, ``mtp``) or ``ngram`` matches a source of that drafter kind on
the same target. When they differ the answer says the acceptance is borrowed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

#: Suffixes that name a variant of the same weights' family, not another model.
_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base")


def canonical(name: str | None) -> str | None:
    """A model's comparable name: the last path part, lower case, ``_`` as ``-``, without
    ``meta-`` and the instruct/chat suffixes (``meta-llama/Meta-Llama-3.1-8B-Instruct`` ->
    ``llama-3.1-8b``); None stays None."""
    if not name:
        return None
    text = str(name).rstrip("/")
    if text.endswith("config.json"):
        text = str(Path(text).parent)
    text = text.split("/")[-1].lower().replace("_", "-")
    text = re.sub(r"^meta-", "", text)
    for suffix in _SUFFIXES:
        text = text.removesuffix(suffix)
    return text


def pair_matches(asked_target: str, asked_draft: str, target: str | None, draft: str | None,
                 drafter: str) -> bool:
    """Whether the source's pair (``target``, ``draft``, ``drafter`` kind) is the asked one."""
    from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS

    if canonical(asked_target) != canonical(target):
        return False
    kind = str(asked_draft).lower()
    if kind in HEAD_DRAFTS + FREE_DRAFTS:
        return drafter == kind
    return canonical(asked_draft) == canonical(draft)


def trace_pair(trace_name: str) -> tuple[str, str | None, str | None, str]:
    """(path, target, draft, drafter kind) of a trace, from its meta.json alone."""
    from specbatch.traces.format.files import resolve_trace

    path = resolve_trace(trace_name)
    try:
        meta = json.loads((Path(path) / "meta.json").read_text())
    except (OSError, ValueError):
        meta = {}
    models = meta.get("models") or {}
    draft = models.get("draft") or {}
    kind = "ngram" if draft.get("drafter") == "ngram" else ("draft-model" if draft else "unknown")
    return path, (models.get("target") or {}).get("name"), draft.get("name"), kind


def acceptance_source(config: SimConfig) -> dict:
    """``{source, pair, pair_matches, asked}`` of a SimConfig (module docstring)."""
    asked = f"{config.draft} -> {config.target}"
    if config.acceptance_profile is not None:
        from specbatch.traces.acceptance.library import resolve_profile

        p = resolve_profile(config.acceptance_profile)
        return {"source": f"profile {p.source}", "kind": "profile", "pair": p.pair,
                "drafter": p.drafter, "asked": asked,
                "pair_matches": pair_matches(config.target, config.draft, p.target, p.draft,
                                             p.drafter)}
    if config.trace == "synth":
        what = (f"constant alpha {config.synth_alpha:g}" if config.synth_alpha is not None
                else "synthetic Markov pair")
        return {"source": f"{what} (synthetic trace)", "kind": "synthetic", "pair": None,
                "drafter": None, "asked": asked, "pair_matches": None}
    path, target, draft, kind = trace_pair(config.trace)
    model = "" if config.acceptance == "trace" else f", {config.acceptance} model fitted to it"
    return {"source": f"trace {path}{model}", "kind": "trace",
            "pair": f"{draft or kind} -> {target or '?'}", "drafter": kind, "asked": asked,
            "pair_matches": pair_matches(config.target, config.draft, target, draft, kind)}


def source_line(info: dict) -> str:
    """``acceptance: <source>; the asked pair`` or ``...; borrowed from <pair> (asked ...)``."""
    if info["pair_matches"] is None:
        return f"acceptance: {info['source']}; assumed, not measured on any pair"
    if info["pair_matches"]:
        return f"acceptance: {info['source']}; measured on the asked pair ({info['pair']})"
    return (f"acceptance: {info['source']}; borrowed from {info['pair']}, not the asked "
            f"{info['asked']}")
