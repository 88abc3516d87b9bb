"""What the engines load as the draft, from a run's fields: the drafter name and its checkpoint
(tune and plan write it into every engine line)."""

from __future__ import annotations

DEFAULT_DRAFT = "vicuna-68m"


def draft_of(base: dict) -> str:
    return str(base.get("draft", DEFAULT_DRAFT))


def model_id(base: dict) -> str | None:
    """A head's checkpoint (``draft_head``, else the target's published head from the
    catalogue, else a marked placeholder), a draft model's Hugging Face id (catalogue) or
    path, None for ``mtp`` / ``ngram`` (the engines need none)."""
    from specbatch.traces.models.catalogue import hf_id, published_head

    draft = draft_of(base).lower()
    if draft in ("mtp", "ngram"):
        return None
    if draft in ("eagle", "eagle3"):
        target = str(base.get("target", "vicuna-33b"))
        return (base.get("draft_head") or published_head(target, draft)
                or f"<path to an {draft.upper()} head for {target}>")
    return hf_id(draft_of(base))
