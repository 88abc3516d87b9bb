"""Quantised self-drafts: a model's own weights rounded to a few bits, then dequantised.

Speculative decoding needs a draft on the target's vocabulary; one that ships with every model
is the model itself at lower precision (weight-only quantisation, whose kernels read 4-8x
fewer weight bytes per decode step). :func:`derive_quantized` writes such a draft as a
plain Hugging Face folder: every 2-D weight of the decoder layers (attention and
MLP projections) goes through :func:`quantize_groups` and back to the folder's dtype, so
``transformers`` loads it as an ordinary model whose outputs are exactly those of the
quantised network. Embeddings (tied to the LM head in SmolLM2), norms and biases are kept,
as GPTQ and AWQ keep them.

The scheme is **round-to-nearest (RTN) with an asymmetric min/max grid per group**: each row
is cut into groups of ``group_size`` consecutive input weights (a shorter last group when the
row length is not a multiple); with ``b`` bits a group with minimum ``m`` and maximum ``M``
gets the step ``d = (M − m) / (2^b − 1)`` and every weight ``w`` becomes
``m + d · clamp(round((w − m) / d), 0, 2^b − 1)``, so ``|w − ŵ| ≤ d / 2`` and both extremes are
exact. This is llama.cpp's ``Q4_1`` block (a scale and a minimum per block of 32 weights)
for any bit width and group size, and the round-to-nearest baseline that GPTQ (Frantar et
al., ICLR 2023) and AWQ (Lin et al., MLSys 2024) compare against; AWQ reports it with groups
of 128 (INT3-g128, INT4-g128), the default here. No calibration data is used, so the draft
is a pure function of the weights: deterministic, bit for bit.

Note for GGUF-converted targets: a ``Q4_1`` source already lies on a 4-bit min/max grid per
32 input weights, so ``bits = 4, group_size = 32`` returns it unchanged (RTN on this grid is
idempotent); any other grid genuinely re-quantises it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from specbatch.errors import require
from specbatch.inputs import load_json_file
from specbatch.io import check_result_dir, result_dir, write_json
from specbatch.traces.models.weights import TOKENIZER_FILES, load_state, weights_source

__all__ = ["BITS", "DEFAULT_GROUP_SIZE", "check_quantization", "derive_quantized",
           "quantize_groups", "quantize_state"]

#: Bit widths a quantised draft may have: 2-4 are the drafts of practice; 5-8 are near-lossless
#: reference points.
BITS = range(2, 9)
#: Input weights per (scale, minimum) pair: the group size AWQ and GPTQ report most.
DEFAULT_GROUP_SIZE = 128
#: Decoder-layer tensors are the ones quantised (``model.layers.N.…``).
_LAYER_KEY = re.compile(r"(^|\.)layers\.\d+\.")
#: The kind a quantised model folder's result marker records (:func:`specbatch.io.result_dir`).
RESULT_KIND = "quantized model"


def check_quantization(bits, group_size) -> tuple[int, int]:
    """``(bits, group_size)`` as integers, or a one-line error naming the flag."""
    require(isinstance(bits, int) and not isinstance(bits, bool) and bits in BITS,
            f"--quantize {bits}: expected a bit width from {BITS.start} to {BITS.stop - 1}")
    require(isinstance(group_size, int) and not isinstance(group_size, bool) and group_size >= 2,
            f"--group-size {group_size}: expected an integer >= 2 (input weights per group)")
    return bits, group_size


def quantize_groups(weight, bits: int, group_size: int):
    """``weight`` (any shape, groups along the last axis) rounded to ``bits`` bits per group of
    ``group_size`` and dequantised back to its dtype (module docstring for the grid).

    The arithmetic runs in float64, so the only error beyond ``d / 2`` is the final rounding
    to the weight's dtype.
    """
    import torch

    bits, group_size = check_quantization(bits, group_size)
    require(weight.ndim >= 1 and weight.shape[-1] >= 1, "quantize: expected a non-empty tensor")
    levels = 2 ** bits - 1
    x = weight.detach().to(torch.float64)
    n = x.shape[-1]
    full = n - n % group_size
    parts = []
    if full:
        parts.append(_round_groups(x[..., :full].reshape(*x.shape[:-1], -1, group_size),
                                   levels).reshape(*x.shape[:-1], full))
    if full < n:
        parts.append(_round_groups(x[..., full:].unsqueeze(-2), levels).squeeze(-2))
    return torch.cat(parts, dim=-1).to(weight.dtype).contiguous()


def _round_groups(groups, levels: int):
    """RTN of each row of ``groups[..., g]`` onto its own ``levels + 1``-point min/max grid."""
    import torch

    lo = groups.amin(dim=-1, keepdim=True)
    hi = groups.amax(dim=-1, keepdim=True)
    step = (hi - lo) / levels
    safe = torch.where(step > 0, step, torch.ones_like(step))  # a constant group stays as is
    q = torch.clamp(torch.round((groups - lo) / safe), 0, levels)
    return lo + q * step


def quantize_state(state: dict, bits: int, group_size: int) -> tuple[dict, list[str]]:
    """``state`` with every 2-D decoder-layer tensor quantised; also the names quantised."""
    out, names = {}, []
    for key, tensor in state.items():
        if tensor.ndim == 2 and _LAYER_KEY.search(key) and tensor.is_floating_point():
            out[key] = quantize_groups(tensor, bits, group_size)
            names.append(key)
        else:
            out[key] = tensor
    require(bool(names), "quantize: the model has no 2-D decoder-layer weights "
                         "(expected tensors named like model.layers.N.…)")
    return out, sorted(names)


def _identity(source: Path, bits: int, group_size: int, names: list[str], dtype: str) -> dict:
    """``specbatch_derived`` of a quantised draft: what it was made from and how."""
    parent = weights_source(source)
    identity = {"from": parent["name"] if parent else source.name, "folder": source.name,
                "quantized": {"bits": bits, "group_size": group_size,
                              "scheme": "round-to-nearest, asymmetric min/max per group",
                              "tensors": len(names), "dtype": dtype},
                "method": f"decoder-layer weights quantised to {bits} bits (RTN, min/max per "
                          f"group of {group_size}, llama.cpp Q4_1-style), dequantised to "
                          f"{dtype}; embeddings, head and norms kept"}
    if parent is not None:
        identity["source"] = parent
    return identity


def derive_quantized(source: str | os.PathLike, out: str | os.PathLike, bits: int,
                     group_size: int = DEFAULT_GROUP_SIZE, force: bool = False) -> dict:
    """Write a quantised copy of the model folder ``source`` to ``out``; return its identity.

    The folder appears at once, complete (it is written beside ``out`` and swapped in):
    an interrupted run leaves nothing. ``out`` may be new, empty, or an earlier quantised
    draft of the same source and settings (``force``: of any settings); anything else is
    refused. Tokenizer files are copied, so the draft shares the target's tokenizer. A
    ``source`` that is itself a derived draft is refused (its identity would be lost).
    """
    from safetensors.torch import save_file

    bits, group_size = check_quantization(bits, group_size)
    source = Path(source)
    require((source / "config.json").is_file(), f"--from {source}: no config.json")
    config = load_json_file(source / "config.json", "a model config.json")
    require(isinstance(config, dict), f"file {source / 'config.json'}: expected a JSON object")
    require("specbatch_derived" not in config, f"--from {source}: is itself a derived draft "
            "(config.json has specbatch_derived); quantise the converted model it came from")
    key = json.dumps({"from": str(source.resolve()), "bits": bits, "group_size": group_size})
    check_result_dir(out, RESULT_KIND, key, force=force)  # refuse before the long part
    state, names = quantize_state(load_state(source), bits, group_size)
    dtype = str(state[names[0]].dtype).replace("torch.", "")
    config["specbatch_derived"] = _identity(source, bits, group_size, names, dtype)
    with result_dir(out, RESULT_KIND, key, force=force) as tmp:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        write_json(tmp / "config.json", config)
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, tmp / name)
    return {"out": str(out), **config["specbatch_derived"],
            "params": int(sum(t.numel() for t in state.values()))}
