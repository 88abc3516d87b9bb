"""Loading a draft/target pair for a live run, and random prompts for models without a
tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specbatch.errors import SpecbatchError, require


def load_live_pair(draft: str, target: str, device: str = "cpu", dtype: str = "float32",
                     seed: int = 0, layers: int | None = None, ngram: tuple[int, int] = (5, 5)):
    """(tokenizer or None, draft, target, identities) from model directories or shape names.

    Two local HF model directories load as in ``specbatch capture`` (their tokenizer included).
    A name from :mod:`traces.models.shapes` (e.g. ``llama-3.1-8b``) builds random weights of that
    architecture on ``device`` (seeded; ``layers`` overrides the layer count for smoke runs):
    step times depend on the shape, not on the weights, and near-uniform random rows still give
    non-trivial acceptance at temperature 1. Such runs have no tokenizer (use random prompts).
    ``draft = "ngram"``: the target alone (draft None), the drafter's identity as capture
    records it (:meth:`traces.capture.ngram.NgramDrafter.identity`, bounds ``ngram``).
    """
    from specbatch.traces.capture.chain import load_pair, load_target, model_identity
    from specbatch.traces.capture.ngram import NGRAM, NgramDrafter

    if draft == NGRAM:
        if Path(target).is_dir() and layers is None:
            tok, model = load_target(target, device, dtype)
            ident = model_identity(model, target)
        else:
            tok, model, ident = None, *_random_model("target", target, device, dtype, seed + 1,
                                                     layers)
        vocab = model.get_output_embeddings().weight.shape[0]
        return tok, None, model, {"draft": NgramDrafter(*ngram, vocab).identity(),
                                  "target": ident}
    if Path(draft).is_dir() and Path(target).is_dir() and layers is None:
        tok, d, t = load_pair(draft, target, device, dtype)
        return tok, d, t, {"draft": model_identity(d, draft), "target": model_identity(t, target)}
    models, ids = {}, {}
    for offset, (role, spec) in enumerate((("draft", draft), ("target", target))):
        models[role], ids[role] = _random_model(role, spec, device, dtype, seed + offset, layers)
    dv = models["draft"].get_output_embeddings().weight.shape[0]
    tv = models["target"].get_output_embeddings().weight.shape[0]
    require(dv == tv, f"models {draft} and {target}: expected the same vocabulary, got {dv} and "
            f"{tv} output logits")
    return None, models["draft"], models["target"], ids


def _random_model(role: str, spec: str, device: str, dtype: str, seed: int,
                  layers: int | None):
    """(model, identity) of a shape name (random weights, torch seed ``seed``) or of a model
    directory with ``layers`` overridden."""
    import torch

    from specbatch.traces.capture.chain import model_identity
    from specbatch.traces.capture.profile import load_profile_model
    from specbatch.traces.models.shapes import SHAPES

    require(Path(spec).is_dir() or spec in SHAPES,
            f"{role} model {spec}: expected a local Hugging Face model directory or a shape "
            f"name ({', '.join(sorted(SHAPES))}), got neither")
    torch.manual_seed(seed)
    model, label = load_profile_model(spec, device, dtype, layers)
    ident = model_identity(model, spec)
    ident.pop("weights_sha256", None)  # random weights: not the folder's files
    ident.update(name=label, path=spec if Path(spec).is_dir() else None,
                 weights="pretrained" if Path(spec).is_dir() and layers is None
                 else f"random (torch seed {seed})")
    return model, ident


def random_prompts(spec: str, vocab: int) -> tuple[list[list[int]], str]:
    """``random:N:LEN[:SEED]``: N prompts of LEN uniform token ids in [0, vocab) (seeded)."""
    parts = spec.split(":")
    try:
        n, length = int(parts[1]), int(parts[2])
        seed = int(parts[3]) if len(parts) > 3 else 0
    except (ValueError, IndexError):
        raise SpecbatchError(f"--prompts {spec}: expected random:N:LEN[:SEED], got a "
                             "non-integer field") from None
    require(n >= 1 and length >= 1, f"--prompts {spec}: expected N >= 1 and LEN >= 1")
    rng = np.random.default_rng([seed, 0x9A0])
    ids = rng.integers(0, vocab, size=(n, length)).tolist()
    return ids, f"{n} prompts of {length} uniform random token ids (seed {seed})"
