"""2026's shipped speculative-sampling bugs that can be written as samplers, re-typed from
their issue threads (never copied), each with the padded engine signature of ``specbatch
conform`` so ``specbatch live serve --sampler NAME`` can serve it and ``specbatch conform
--endpoint`` can be pointed at it (the catalogue rows are in
:mod:`specbatch.theory.conform.catalogue`; docs/prove.md shows the table).

*Engine line*: the sampler is the engine's faulty code path as the thread describes it.
*Symptom*: the thread reports what users saw but not (or not yet) the line; the sampler is
one faithful mechanism that produces that symptom.

- ``onecat_656`` (1Cat-vLLM #656, symptom): with probabilistic draft sampling, output is
  corrupted only when more than two requests run (``max_num_seqs`` > 2) at T > 0, while the
  acceptance rate looks normal. Here: in a batch of more than two rows every row's draft law
  is read from its neighbour's row (``draft_probs`` rolled by one request) in both the
  acceptance ratio and the residual; batches of one or two rows are right.
- ``ascend_7839`` (vllm-ascend #7603/#7839, engine line): block verification used for
  suffix/n-gram drafters, which have no draft probabilities: the fallback ``q = 1`` in the
  cumulative product, with the pre-#7808 block rule (``τ = max{i : Π η < Π min(1, r)}``,
  :func:`.engine_samplers.ascend_block_unfixed`). Greedy (one-hot) drafts, ``draft_probs = None``.
- ``ascend_15673`` (vllm-ascend #15673, engine line): ``rejection_sample_method = "block"``
  silently run as token-wise verification on NPU. Lossless: the law tests pass (rightly);
  the cost is acceptance, which ``/metrics`` shows beside the verdict.
- ``vllm_32852`` (vLLM #32852 made ``rejection_sample`` take target *logits*; vllm-ascend
  #6685 is the caller that still passed probabilities, engine line): the sampler applies
  softmax to what it was given, so the target law becomes ``softmax(Mb)``, almost uniform.
- ``vllm_27077`` (vLLM #27077, symptom of an engine line): greedy requests carried T = 0
  while the rejection sampler still looked for the old sentinel −1 before dividing by T: the
  logits become NaN and greedy output garbage. Here: rows whose target law is one-hot
  (greedy) are divided by T = 0; the all-NaN law's argmax (token 0) is emitted and nothing
  is accepted.
- ``dflash_74`` (z-lab/dflash #74, engine line): the draft ignores the temperature (argmax
  drafts) and a draft is accepted when it *equals* a token sampled from the target at that
  position; the first mismatch emits the target's sample. Every emitted token is a target
  sample at the right prefix, so the law is the target's (conform passes it); acceptance
  drops to ``Mb(argmax Ms)`` per position, visible in ``/metrics``.
- ``mlx_swift_459`` (mlx-swift-lm #459, engine line): the same equality matching with
  sampled drafts (``X ~ Ms``): acceptance ``Σ Ms·Mb`` instead of ``Σ min(Ms, Mb)``. The PR
  calls the output biased; by the argument above its law is the target's (the survivors
  *given acceptance* are biased, the output is not), and conform agrees.
- ``openvino_4190`` (openvino.genai #4190, symptom): the non-greedy path handles a rejection
  one iteration late: "a word gets dropped and its predicted continuation kept in its
  place". Here: at the first rejection the correction is not emitted; the token drawn from
  the target row after the rejected draft, ``Mb(·|X^{τ+1})``, takes its place.

DeepSpec #31 (bf16 draft sampling against fp32 rejection) is not written: its deviation is
the rounding of the draft law, well below the power of a black-box run at practical sizes.

Threads read (GitHub): 1CatAI/1Cat-vLLM issue 656; vllm-project/vllm-ascend PRs 7603, 7839
(the v0.18.0 backport), 7808 (the block-rule fix of issue 7807), 15673 and 6685;
vllm-project/vllm PRs 32852 and 27077; z-lab/dflash issue 74 (fix PR 77);
ml-explore/mlx-swift-lm PR 459; openvinotoolkit/openvino.genai issue 4190 (fix PR 4490);
deepseek-ai/DeepSpec issue 31.
"""

from __future__ import annotations

import torch

from specbatch.theory.conform.engine_samplers import ascend_block_unfixed
from specbatch.theory.conform.samplers import emit_tokens
from specbatch.theory.conform.vllm_modes import drafted, race, vllm_standard


def _standard_with(draft_token_ids, draft_probs, target_probs, generator):
    """vLLM's standard rule on the given laws (a helper for the faults below)."""
    return vllm_standard(draft_token_ids, draft_probs, target_probs, generator)


def onecat_656(draft_token_ids, draft_probs, target_probs, generator=None):
    """1Cat-vLLM #656 (module doc): draft laws read one request off above two rows."""
    if draft_probs is not None and draft_token_ids.shape[0] > 2:
        draft_probs = draft_probs.roll(1, dims=0)
    return _standard_with(draft_token_ids, draft_probs, target_probs, generator)


def ascend_7839(draft_token_ids, draft_probs, target_probs, generator=None):
    """vllm-ascend #7839 (module doc): the pre-fix block rule with ``q = 1``."""
    return ascend_block_unfixed(draft_token_ids, None, target_probs, generator)


def ascend_15673(draft_token_ids, draft_probs, target_probs, generator=None):
    """vllm-ascend #15673 (module doc): "block" run as token-wise verification."""
    return _standard_with(draft_token_ids, draft_probs, target_probs, generator)


def vllm_32852(draft_token_ids, draft_probs, target_probs, generator=None):
    """Probabilities passed where logits are expected (module doc): softmax(Mb)."""
    return _standard_with(draft_token_ids, draft_probs,
                          torch.softmax(target_probs.double(), dim=-1), generator)


def vllm_27077(draft_token_ids, draft_probs, target_probs, generator=None):
    """vLLM #27077 (module doc): greedy rows divided by T = 0."""
    out = _standard_with(draft_token_ids, draft_probs, target_probs, generator)
    greedy = (target_probs.double().amax(dim=-1) == 1.0).all(dim=1)  # [B] one-hot rows
    if greedy.any():
        with torch.no_grad():
            scaled = torch.log(target_probs[greedy, 0].double()) / 0.0  # [g, V] NaN / -inf
            first = torch.argmax(torch.softmax(scaled, dim=-1), dim=-1)  # all NaN: index 0
        garbage = torch.full((int(greedy.sum()), out.shape[1]), -1, dtype=out.dtype)
        garbage[:, 0] = first
        out[greedy] = garbage
    return out


def _equality(draft_token_ids, target_probs, generator):
    """Accept while the draft equals a target sample at its position; the first mismatch (or
    the bonus) emits the target's own sample there."""
    b, gamma = draft_token_ids.shape
    y = torch.stack([race(target_probs[:, i].double(), generator) for i in range(gamma + 1)],
                    dim=1)  # [B, γ+1] y_i ~ Mb(·|X^i)
    tau = torch.cumprod((draft_token_ids == y[:, :gamma]).long(), dim=1).sum(dim=1)
    return emit_tokens(draft_token_ids, tau, y[torch.arange(b), tau])


def dflash_74(draft_token_ids, draft_probs, target_probs, generator=None):
    """z-lab/dflash #74 (module doc): argmax drafts, equality matching."""
    return _equality(draft_token_ids, target_probs, generator)


def mlx_swift_459(draft_token_ids, draft_probs, target_probs, generator=None):
    """mlx-swift-lm #459 (module doc): sampled drafts, equality matching."""
    return _equality(draft_token_ids, target_probs, generator)


def openvino_4190(draft_token_ids, draft_probs, target_probs, generator=None):
    """openvino.genai #4190 (module doc): the correction dropped, the continuation kept."""
    b, gamma = draft_token_ids.shape
    u = torch.rand((b, gamma), generator=generator, dtype=torch.float64)
    pt = drafted(target_probs, draft_token_ids)
    q = torch.ones_like(pt) if draft_probs is None else drafted(draft_probs, draft_token_ids)
    tau = torch.cumprod((u * q < pt).long(), dim=1).sum(dim=1)  # [B] TV's decisions
    late = torch.clamp(tau + 1, max=gamma)  # the row after the rejected draft
    rows = torch.arange(b)
    return emit_tokens(draft_token_ids, tau, race(target_probs[rows, late].double(), generator))
