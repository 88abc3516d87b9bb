"""``specbatch conform``: is an engine's rejection sampler lossless, and how much of the
target's acceptance does it keep (THEORY.md §4)?

Reading order: ``pairs`` (the model pairs drawn, with exact tables), ``vllm_modes`` and
``synthetic`` (vLLM's sampling modes), ``ragged`` (the batched ragged interface, vLLM V1's layout),
``samplers`` (samplers with the engine signature, loading a user's), ``harness`` (drawing samples),
``power`` (calibrated tests with a stated power), ``check`` (the verdict: :func:`conform`),
``engine_samplers`` and ``catalogue`` (other engines' samplers, correct and broken).

``from specbatch.theory.conform import conform`` is the public path (docs/api.md); the name
loads on first use, so importing a submodule does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbatch.lazy import lazy_attributes

if TYPE_CHECKING:
    from specbatch.theory.conform.check import conform

__all__ = ["conform"]

__getattr__ = lazy_attributes(__name__, {"conform": f"{__name__}.check"}, globals())
