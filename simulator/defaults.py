"""Constants that several folders of the simulator read, kept below all of them.

``max_num_batched_tokens`` when unset under vllm-v1 is what ``vllm serve`` picks on a GPU with
>= 70 GiB that is not an A100 (vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults``,
UsageContext.OPENAI_API_SERVER); vllm-v0 treats unset as unlimited. The config falls back on it
(``SimConfig.token_budget``) and vLLM's adaptive verification profiles its tables up to it.
Drafts named in :data:`FREE_DRAFTS` run no model: the cost models price their passes at 0 s
(simulator.cost.free_draft) and the config accepts them as a ``draft``.
"""

from __future__ import annotations

#: ``max_num_batched_tokens`` when unset under vllm-v1.
V1_DEFAULT_BATCHED_TOKENS = 8192
#: Draft names that are not models (``draft``): their passes cost nothing.
FREE_DRAFTS = ("ngram",)
