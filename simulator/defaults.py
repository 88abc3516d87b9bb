"""Constants that several folders of the simulator read, kept below all of them.

``max_num_batched_tokens`` when unset under vllm-v1 is what ``vllm serve`` picks on a GPU with
>= 70 GiB that is not an A100 (vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults``,
UsageContext.OPENAI_API_SERVER); vllm-v0 treats unset as unlimited. The config falls back on it
(``SimConfig.token_budget``) and vLLM's adaptive verification profiles its tables up to it.
Drafts named in :data:`FREE_DRAFTS` run no model: the cost models price their passes at 0 s
(simulator.cost.features.free_draft) and the config accepts them as a ``draft``. Drafts named in
:data:`HEAD_DRAFTS` are vLLM's ``SpeculativeConfig.method`` names of drafters that read the target's
hidden states (EAGLE, EAGLE-3, MTP; simulator.cost.features.draft_head): their first pass runs over
the target's whole pass, and both they and the host-side drafters propose by argmax (one-hot draft
rows for the rejection sampler, :func:`one_hot_drafter`).
"""

from __future__ import annotations

#: ``max_num_batched_tokens`` when unset under vllm-v1.
V1_DEFAULT_BATCHED_TOKENS = 8192
#: Draft names that are not models (``draft``): their passes cost nothing.
FREE_DRAFTS = ("ngram",)
#: vLLM ``SpeculativeConfig.method`` names of heads on the target's hidden states (``draft``).
HEAD_DRAFTS = ("eagle", "eagle3", "mtp")


def one_hot_drafter(draft: str) -> bool:
    """Whether ``draft`` proposes by argmax, so the rejection sampler reads one-hot draft rows:
    a host-side drafter, or vLLM's EAGLE/MTP heads (vllm/v1/spec_decode/eagle.py,
    ``EagleProposer.propose``: ``logits.argmax(dim=-1)``; no draft probabilities kept)."""
    return str(draft).lower() in FREE_DRAFTS + HEAD_DRAFTS


#: Client side of TTFT and e2e: API server, tokenisation, HTTP on localhost (ASSUMED, stated;
#: SimConfig ``client_ttft_s``'s default; simulator.cost.features.host reports it).
CLIENT_TTFT_S = 2e-3
