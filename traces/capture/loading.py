"""Load a draft/target pair (or a target alone) of Hugging Face causal LMs for capture.

Local model directories only (no network): a path that is not a model directory, a damaged
one, or a draft whose vocabulary differs from the target's is a one-line
:class:`~specbatch.errors.SpecbatchError`. Re-exported by :mod:`specbatch.traces.capture.chain`.
"""

from __future__ import annotations

import os
from pathlib import Path

from specbatch.errors import SpecbatchError, require


def load_pair(draft_path: str, target_path: str, device: str = "cpu", dtype: str = "float32"):
    """Load tokenizer, draft and target from local HF model directories (no network).

    Raises a one-line :class:`SpecbatchError` for a path that is not a model directory, or a
    draft and target whose vocabularies differ.
    """
    loaded = load_models((("draft", draft_path), ("target", target_path)), device, dtype)
    (draft, dtok), (target, ttok) = loaded["draft"], loaded["target"]
    dv, tv = (
        draft.get_output_embeddings().weight.shape[0],
        target.get_output_embeddings().weight.shape[0],
    )
    require(dv == tv, f"models {draft_path} and {target_path}: expected the same vocabulary, "
            f"got {dv} and {tv} output logits")
    require(dtok.get_vocab() == ttok.get_vocab(),
            f"models {draft_path} and {target_path}: expected the same tokenizer vocabulary, "
            f"got {len(dtok)} and {len(ttok)} different tokens")
    return dtok, draft, target


def load_target(target_path: str, device: str = "cpu", dtype: str = "float32"):
    """Load tokenizer and target alone (a drafter without a model); errors as :func:`load_pair`."""
    model, tok = load_models((("target", target_path),), device, dtype)["target"]
    return tok, model


def load_models(roles: tuple, device: str, dtype: str) -> dict:
    """``{role: (model, tokenizer)}`` for the ``(role, path)`` pairs ``roles``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoTokenizer

    from specbatch.traces.models.weights import load_pretrained

    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    require(dtype in dtypes, f"--dtype: expected one of {', '.join(dtypes)}, got {dtype!r}")
    if device.startswith("cuda"):
        require(torch.cuda.is_available(), f"--device {device}: expected a CUDA device, got none")
    loaded = {}
    for role, path in roles:
        p = Path(path)
        require(p.is_dir() and (p / "config.json").is_file(),
                f"{role} model {path}: expected a local Hugging Face model directory "
                "(with config.json), got " + ("a directory without config.json" if p.is_dir()
                                              else "no such directory"))
        model = load_pretrained(p, f"{role} model {path}", dtypes[dtype])
        try:
            tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
        except Exception as exc:  # any reader failure on a damaged folder is bad input
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SpecbatchError(f"{role} model {path}: expected a loadable causal LM with a "
                                 f"tokenizer, got {first[:160]}") from None
        loaded[role] = (model.to(device).eval(), tok)
    return loaded
