"""vLLM V1's draft-model proposer: its first pass runs over the target's whole pass.

vLLM V1 runs a separate draft model (``speculative_config.method = "draft_model"``,
vllm/v1/spec_decode/draft_model.py ``DraftModelProposer``, on ``SpecDecodeBaseProposer.propose``
of vllm/v1/spec_decode/eagle.py) the way it runs an EAGLE head, not the way vLLM V0's draft
worker did. ``set_inputs_first_pass`` (padded batch only: the proposer refuses
``disable_padded_drafter_batch``) merges every token the target's pass computed, the decoding
requests' 1 + s_i (rejected drafts stay in as padding, their KV writes masked) and the prefill
chunks' tokens, with the step's next token of each request (``merge_toks_kernel``,
``extend_all_queries_by_1``), so pass 1 has query q_i + 1 over KV c_i for each of the n
requests of the target pass; its LM head runs on one row per request
(``last_token_indices``). The draft's prompt prefill is this same pass: there is no separate
chunk pass. Then k − 1 passes of one token per request still drafting, over c_i + τ_i + j
cached tokens, as for a head (simulator.engine.decode.Decode.head_later_passes).

With the target pass's sums (n, Σq, Σc, Σq·c, Σq²), pass 1's are exact integers::

    n' = n,  Σq' = Σq + n,  Σc' = Σc,  Σq'·c = Σq·c + Σc,  Σq'² = Σq² + 2Σq + n

:class:`DraftModelPasses` wraps the draft model's cost and offers the engine's head hooks
``first_pass_time`` / ``first_pass_step`` (simulator.cost.interface.HeadCostModel), so the
engine prices it as it prices a head's pass 1; every other pass is the inner model's
(vllm/v1/spec_decode/draft_model.py at vLLM commit 9b849b1, as stored in the code index).
:func:`draft_model_passes_apply` says when: scheduler ``vllm-v1`` (the catalogue's
mixed-step composer), a draft model (not
``ngram``, not a head), a chain rule. Under ``vllm-v0`` the draft worker's k one-token passes
and its separate prompt pass stay (simulator.cost.draft_cost).

CUDA-graph padding (``cuda_graph_sizes``): simulator.cost.features.graph_padding pads inside
this wrapper, so pass 1 is padded to the next captured size as the later passes are
(``propose`` pads ``num_tokens`` with ``pad_for_cudagraph`` up to the largest size). Not
modelled: a pass past the largest captured size runs without a graph in vLLM; it is priced as
any other pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.simulator.cost.interface import WrappedCost, takes_logit_rows

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig


@dataclass(frozen=True)
class DraftModelPasses(WrappedCost):
    """``inner`` (a cost model whose draft role is a separate draft model) with vLLM V1's
    pass 1 (module docstring): :meth:`first_pass_time` / :meth:`first_pass_step`. Its
    ``step_time`` and ``time_from_sums`` are the inner model's (the later passes, the target)."""

    inner: Any  # a CostModel

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **rows) -> float:
        """The inner model's pass; ``query``, ``kv`` # [n]."""
        return float(self.inner.step_time(role, query, kv, **rows))

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float, **rows) -> float:
        """The inner model's pass from the batch sums."""
        return float(self.inner.time_from_sums(role, n, sq, skv, sqkv, sqq, **rows))

    def first_pass_time(self, n: int, sq: float, skv: float, sqkv: float, sqq: float) -> float:
        """The draft model's pass 1 from the target pass's sums: query q_i + 1 over KV c_i,
        the LM head at n rows where the inner model takes logit rows."""
        fn = float(n)
        kw = {"rows": fn} if takes_logit_rows(self.inner) else {}
        return float(self.inner.time_from_sums(
            "draft", n, float(sq) + fn, float(skv), float(sqkv) + float(skv),
            float(sqq) + 2.0 * float(sq) + fn, **kw))

    def first_pass_step(self, query: np.ndarray, kv: np.ndarray) -> float:
        """Pass 1 over the target pass's arrays ``query``, ``kv`` # [n]."""
        query = np.asarray(query)
        kw = {"rows": float(query.shape[0])} if takes_logit_rows(self.inner) else {}
        return float(self.inner.step_time("draft", query + 1, np.asarray(kv), **kw))

    def __getattr__(self, name: str) -> Any:
        """Everything else (memory, ``consts``, ``windowed``, ...) is the inner model's."""
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def draft_model_passes_apply(config: SimConfig) -> bool:
    """Whether ``config`` runs a separate draft model under vLLM V1's proposer: scheduler
    vllm-v1, ``draft`` a model (not ``ngram`` nor an EAGLE / MTP head) and a chain rule (the
    tree rules draft trees, which vLLM's draft-model proposer does not)."""
    from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS
    from specbatch.simulator.replay.rules import rule_entry

    draft = str(config.draft).lower()
    # vLLM V1's engine: the scheduler catalogue's mixed-step composer (vLLM V0's is the draft
    # worker's)
    if not config.scheduler_row.mixed_steps or draft in FREE_DRAFTS or draft in HEAD_DRAFTS:
        return False
    row = rule_entry(config.verify)
    return row is not None and not row.tree


def with_draft_model_passes(model: Any, config: SimConfig) -> Any:
    """``model`` as :class:`DraftModelPasses` where :func:`draft_model_passes_apply`, else
    itself."""
    return DraftModelPasses(model) if draft_model_passes_apply(config) else model
