"""theory/verify/triton_fused.py: fused TV/BV kernels against theory/ (Triton's CPU interpreter).

Skipped when Triton is not installed (the ``kernels`` extra). Without a GPU the kernels run in
the interpreter, about 500x slower than eager torch, so the shapes are small.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # CPU tensors: Triton's interpreter, set before its import
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from specbatch.theory.conform.check import conform  # noqa: E402
from specbatch.theory.conform.samplers import load_sampler  # noqa: E402
from specbatch.theory.verify.torch_sync_free import accept_and_weights_sync_free  # noqa: E402
from specbatch.theory.verify.triton_fused import verify_triton, verify_triton_padded  # noqa: E402
from tests.theory.verify.test_torch_batched import (  # noqa: E402
    KINDS,
    make_paths,
    packed,
    reference_ragged,
)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # log(0) in the interpreter
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # compiled on a GPU, interpreted on CPU


def on_device(*arrays):
    return [torch.as_tensor(a, device=DEVICE) for a in arrays]


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> np.ndarray:
    """Reference draw: first token whose cumulative weight exceeds u · total."""
    w = weights.double().numpy()
    cdf = np.cumsum(w, axis=1)
    index = (cdf <= (u.numpy() * cdf[:, -1])[:, None]).sum(axis=1)
    last = w.shape[1] - 1 - np.argmax(w[:, ::-1] > 0, axis=1)
    return np.minimum(index, last)


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("kind", KINDS)
def test_padded_kernel_matches_numpy_tau_and_the_extra_token_law(rule, kind):
    rng, tokens, dr, tr, uniforms = make_paths(kind, 7, b=40, k=4, v=37)
    lengths = rng.integers(0, 5, size=len(tokens))
    t = on_device(tokens, dr, tr, uniforms)
    tau, extra = verify_triton_padded(rule, *t, lengths=on_device(lengths)[0],
                                      generator=torch.Generator().manual_seed(3))
    assert np.array_equal(tau.cpu().numpy(), reference_ragged(rule, tokens, dr, tr, uniforms,
                                                              lengths, rng))
    _, weights = accept_and_weights_sync_free(rule, *(torch.as_tensor(a) for a in (
        tokens, dr, tr, uniforms)), lengths=torch.as_tensor(lengths))
    u = torch.rand(len(tokens), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert np.array_equal(extra.cpu().numpy(), inverse_cdf(weights, u))


@pytest.mark.parametrize("rule", ["token", "block"])
def test_packed_layout_matches_padded(rule):
    rng, tokens, dr, tr, uniforms = make_paths("dirichlet", 8, b=24, k=3, v=20)
    lengths = rng.integers(0, 4, size=len(tokens))
    t = on_device(tokens, dr, tr, uniforms)
    a = verify_triton_padded(rule, *t, lengths=on_device(lengths)[0],
                             generator=torch.Generator().manual_seed(1))
    pk = on_device(*packed(tokens, dr, tr, uniforms, lengths))
    b = verify_triton(rule, *pk, max_len=3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_float32_rows_and_vocabularies_spanning_blocks():
    rng, tokens, dr, tr, uniforms = make_paths("peaked", 9, b=6, k=3, v=2500)
    t = [torch.as_tensor(tokens), torch.as_tensor(dr).float(), torch.as_tensor(tr).float(),
         torch.as_tensor(uniforms)]
    for rule in ("token", "block"):
        tau, extra = verify_triton_padded(rule, *(x.to(DEVICE) for x in t),
                                          generator=torch.Generator().manual_seed(0))
        ref, weights = accept_and_weights_sync_free(rule, *t)
        assert torch.equal(tau.cpu(), ref)
        assert bool((weights[torch.arange(6), extra.cpu()] > 0).all())


@pytest.mark.parametrize("name", ["tv-triton", "bv-triton"])
def test_kernels_conform(name):
    """A small conformance run (the interpreter is slow): the paper's pair, 150 samples."""
    report = conform(load_sampler(name), samples=150, kinds=("paper",), batch=150)
    assert report.exit_code == 0, [c.violations for c in report.cases]
