"""Samplers with the engine signature that ``specbatch conform`` checks, and how to load one.

The engine signature (vLLM's placeholder convention)::

    fn(draft_token_ids,  # [B, γ]      int64, X_1..X_γ
       draft_probs,      # [B, γ, V]   float, Ms(·|X^i) for i = 0..γ-1; None for one-hot drafts
       target_probs,     # [B, γ+1, V] float, Mb(·|X^i) for i = 0..γ
       generator,        # torch.Generator, the only source of randomness
    ) -> output_token_ids  # [B, γ+1] int64: X^τ, the extra token, then -1

Built-ins (:data:`BUILTINS`): the project's token (TV) and block (BV) verifiers in numpy
(:mod:`specbatch.theory.verify.reference`), torch (:mod:`specbatch.theory.verify.torch_batched`) and
Triton (:mod:`specbatch.theory.verify.triton_fused`, needs the ``kernels`` extra and a GPU, or
``TRITON_INTERPRET=1``), vLLM's modes (:mod:`specbatch.theory.conform.vllm_modes`; V1's ragged
samplers in :mod:`specbatch.theory.conform.ragged`) and the engine catalogue's samplers, correct and
broken (:mod:`specbatch.theory.conform.engine_samplers`, :mod:`specbatch.theory.conform.catalogue`).
Each built-in states the draft law it expects: ``probabilistic`` (``X_i ~ Ms``) or ``greedy`` (``X_i
= argmax Ms``, passed as ``draft_probs = None``); its interface (``padded``, the signature above, or
``ragged``, vLLM V1's flattened batch); and its target (``sample``, or ``greedy`` for temperature 0,
where the output must be greedy decoding token for token). ``synthetic`` and SGLang's thresholds
below 1 are lossy by design.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from specbatch.errors import SpecbatchError

#: The draft laws a sampler can be checked under.
DRAFT_LAWS = ("probabilistic", "greedy")

#: Sampler interfaces: the padded ``[B, γ]`` signature above, or vLLM V1's flattened ragged
#: batch (:mod:`specbatch.theory.conform.ragged`).
INTERFACES = ("padded", "ragged")

#: Target laws: ``sample`` (temperature > 0: the law of the output must be ``Mb``'s) or
#: ``greedy`` (temperature 0: the output must equal greedy decoding of ``Mb`` token for token).
TARGETS = ("sample", "greedy")


@dataclass(frozen=True)
class Sampler:
    """A sampler to check: the callable, its name, the draft law, whether lossy by design.

    ``exact_law(case, tables, greedy)``, when known, is the exact law of the first γ+1 tokens
    (one iteration, then target sampling) of a sampler that is lossy by design, so the report
    can state its exact distance from the target's law. ``interface`` is one of
    :data:`INTERFACES`, ``target`` one of :data:`TARGETS`.
    """

    name: str
    fn: Callable
    draft: str = "probabilistic"
    lossy_by_design: bool = False
    exact_law: Callable | None = None
    interface: str = "padded"
    target: str = "sample"


def one_hot_rows(draft_token_ids: torch.Tensor, vocab: int, dtype) -> torch.Tensor:
    """Greedy drafts as probability rows: 1 at the drafted token.  # [B, γ, V]"""
    return torch.nn.functional.one_hot(draft_token_ids, vocab).to(dtype)


def emit_tokens(draft_token_ids: torch.Tensor, tau: torch.Tensor, extra: torch.Tensor):
    """``X^τ``, the extra token, then -1.  # [B, γ+1] int64 (the engine output)"""
    b, gamma = draft_token_ids.shape
    position = torch.arange(gamma + 1, device=draft_token_ids.device)[None, :]
    padded = torch.cat([draft_token_ids, draft_token_ids[:, :1]], dim=1)
    out = torch.where(position < tau[:, None], padded, -1)
    return torch.where(position == tau[:, None], extra[:, None], out).long()


def _rows(draft_token_ids, draft_probs, target_probs):
    if draft_probs is None:
        draft_probs = one_hot_rows(draft_token_ids, target_probs.shape[-1], target_probs.dtype)
    return draft_probs


def _numpy(rule: str):
    def sample(draft_token_ids, draft_probs, target_probs, generator=None):
        from specbatch.theory.verify.reference import verify_block, verify_token

        draft_probs = _rows(draft_token_ids, draft_probs, target_probs)
        uniforms = torch.rand(draft_token_ids.shape, generator=generator, dtype=torch.float64)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        verify = verify_token if rule == "token" else verify_block
        tau, extra = verify(draft_token_ids.cpu().numpy(), draft_probs.cpu().numpy(),
                            target_probs.cpu().numpy(), uniforms.numpy(),
                            np.random.default_rng(seed))
        return emit_tokens(draft_token_ids, torch.from_numpy(tau), torch.from_numpy(extra))

    sample.__doc__ = f"theory.verify.reference (numpy) rule {rule!r} with the engine signature."
    return sample


def _torch(rule: str, sync_free: bool | None = None):
    def sample(draft_token_ids, draft_probs, target_probs, generator=None):
        from specbatch.theory.verify.torch_batched import verify_torch

        draft_probs = _rows(draft_token_ids, draft_probs, target_probs)
        uniforms = torch.rand(draft_token_ids.shape, generator=generator, dtype=torch.float64,
                              device=draft_token_ids.device)
        tau, extra = verify_torch(rule, draft_token_ids, draft_probs, target_probs, uniforms,
                                  generator=generator, sync_free=sync_free)
        return emit_tokens(draft_token_ids, tau, extra)

    sample.__doc__ = f"theory.verify.torch_batched rule {rule!r} with the engine signature."
    return sample


def _triton(rule: str):
    def sample(draft_token_ids, draft_probs, target_probs, generator=None):
        from specbatch.theory.verify.triton_fused import verify_triton_padded

        draft_probs = _rows(draft_token_ids, draft_probs, target_probs)
        device = "cuda" if torch.cuda.is_available() else "cpu"  # else Triton's interpreter
        tau, extra = verify_triton_padded(rule, draft_token_ids.to(device),
                                          draft_probs.to(device), target_probs.to(device),
                                          generator=generator)
        return emit_tokens(draft_token_ids, tau.cpu(), extra.cpu())

    sample.__doc__ = (
        f"theory.verify.triton_fused rule {rule!r} (fused kernel) with the engine signature."
    )
    return sample


def _synthetic_law(case, tables, greedy):
    from specbatch.theory.conform.synthetic import synthetic_law

    return synthetic_law(case, tables, greedy)


def _lazy(module: str, name: str, **fixed):
    """``module.name`` imported at the first call (keeps ``--help`` fast)."""
    def sample(*args, **kwargs):
        found = getattr(importlib.import_module(f"specbatch.theory.conform.{module}"), name)
        return found(*args, **fixed, **kwargs)

    sample.__name__ = name
    return sample


def _vllm(name: str):
    return _lazy("vllm_modes", name)


#: Built-in samplers by name.
BUILTINS = {
    "tv-numpy": Sampler("tv-numpy", _numpy("token")),
    "bv-numpy": Sampler("bv-numpy", _numpy("block")),
    "tv-torch": Sampler("tv-torch", _torch("token")),
    "bv-torch": Sampler("bv-torch", _torch("block")),
    "tv-torch-sync-free": Sampler("tv-torch-sync-free", _torch("token", True)),
    "bv-torch-sync-free": Sampler("bv-torch-sync-free", _torch("block", True)),
    "tv-triton": Sampler("tv-triton", _triton("token")),
    "bv-triton": Sampler("bv-triton", _triton("block")),
    "vllm-standard": Sampler("vllm-standard", _vllm("vllm_standard")),
    "vllm-block": Sampler("vllm-block", _vllm("vllm_block")),
    "vllm-greedy": Sampler("vllm-greedy", _vllm("vllm_standard"), draft="greedy"),
    "vllm-block-greedy": Sampler("vllm-block-greedy", _vllm("vllm_block"), draft="greedy"),
    "vllm-synthetic": Sampler("vllm-synthetic", _vllm("vllm_synthetic"), lossy_by_design=True,
                              exact_law=_synthetic_law),
    "vllm-v1": Sampler("vllm-v1", _lazy("ragged", "vllm_v1_random"),
                       interface="ragged"),
    "vllm-v1-ngram": Sampler("vllm-v1-ngram", _lazy("ragged", "vllm_v1_random"),
                             draft="greedy", interface="ragged"),
    "vllm-v1-greedy": Sampler("vllm-v1-greedy", _lazy("ragged", "vllm_v1_greedy"),
                              interface="ragged", target="greedy"),
    "sglang-chain": Sampler("sglang-chain", _lazy("engine_samplers", "sglang_chain"),
                            draft="greedy"),
    "sglang-single-0.5": Sampler("sglang-single-0.5",
                                 _lazy("engine_samplers", "sglang_single_half"),
                                 draft="greedy", lossy_by_design=True),
    "sglang-acc-0.5": Sampler("sglang-acc-0.5", _lazy("engine_samplers", "sglang_acc_half"),
                              draft="greedy", lossy_by_design=True),
    "ascend-block-unfixed": Sampler("ascend-block-unfixed",
                                    _lazy("engine_samplers", "ascend_block_unfixed")),
    "ragged-misaligned": Sampler("ragged-misaligned",
                                 _lazy("ragged", "vllm_v1_random", misaligned=True),
                                 interface="ragged"),
    # 2026's shipped bugs (:mod:`specbatch.theory.conform.bugs2026`)
    "bug-1cat-656": Sampler("bug-1cat-656", _lazy("bugs2026", "onecat_656")),
    "bug-ascend-7839": Sampler("bug-ascend-7839", _lazy("bugs2026", "ascend_7839"),
                               draft="greedy"),
    "bug-ascend-15673": Sampler("bug-ascend-15673", _lazy("bugs2026", "ascend_15673")),
    "bug-vllm-32852": Sampler("bug-vllm-32852", _lazy("bugs2026", "vllm_32852")),
    "bug-vllm-27077": Sampler("bug-vllm-27077", _lazy("bugs2026", "vllm_27077"),
                              target="greedy"),
    "bug-dflash-74": Sampler("bug-dflash-74", _lazy("bugs2026", "dflash_74"), draft="greedy"),
    "bug-mlx-swift-459": Sampler("bug-mlx-swift-459", _lazy("bugs2026", "mlx_swift_459")),
    "bug-openvino-4190": Sampler("bug-openvino-4190", _lazy("bugs2026", "openvino_4190")),
    "greedy-tie-accepts": Sampler("greedy-tie-accepts",
                                  _lazy("ragged", "vllm_v1_greedy", tie_accepts=True),
                                  interface="ragged", target="greedy"),
}


def _check_triton(name: str) -> None:
    if name.endswith("-triton"):
        if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
            raise SpecbatchError(
                f"VERIFIER {name}: needs a CUDA GPU; on CPU Triton's interpreter took over 60 "
                "s for 200 samples of every pair: set TRITON_INTERPRET=1 to run it anyway, with "
                "--samples 200 --only paper")
        try:  # the module sets TRITON_INTERPRET before importing Triton when there is no GPU
            import specbatch.theory.verify.triton_fused  # noqa: F401
        except ImportError:
            raise SpecbatchError(
                f"VERIFIER {name}: needs Triton (pip install 'specbatch[kernels]')") from None


def _override(found: Sampler, draft, interface, target) -> Sampler:
    return dataclasses.replace(found, draft=draft or found.draft,
                               interface=interface or found.interface,
                               target=target or found.target)


def load_sampler(spec: str, draft: str | None = None, interface: str | None = None,
                 target: str | None = None) -> Sampler:
    """A built-in name or ``package.module:callable`` -> :class:`Sampler`.

    ``draft``, ``interface`` and ``target`` override the built-in's (defaults for a user's
    callable: ``probabilistic``, ``padded``, ``sample``). The working directory is importable,
    as with ``python -m``. Errors are one line.
    """
    for flag, value, allowed in (("--draft", draft, DRAFT_LAWS),
                                 ("--interface", interface, INTERFACES),
                                 ("--target", target, TARGETS)):
        if value is not None and value not in allowed:
            raise SpecbatchError(f"{flag}: expected one of {list(allowed)}, got {value!r}")
    if spec in BUILTINS:
        found = BUILTINS[spec]
        if interface is not None and interface != found.interface:  # fixed by its code
            raise SpecbatchError(f"--interface: the built-in {spec} has the {found.interface} "
                                 f"interface, got {interface!r} (--interface is for a user's "
                                 "package.module:callable)")
        _check_triton(spec)
        return _override(found, draft, interface, target)
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise SpecbatchError(f"VERIFIER: expected a built-in ({', '.join(BUILTINS)}) or "
                             f"package.module:callable, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any import failure (sys.exit too) is bad input
        raise SpecbatchError(f"VERIFIER {spec}: cannot import {module_name!r}: "
                             f"{type(exc).__name__}: {exc}") from None
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise SpecbatchError(f"VERIFIER {spec}: {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise SpecbatchError(f"VERIFIER {spec}: {attr!r} is not callable")
    return _override(Sampler(spec, fn), draft, interface, target)
