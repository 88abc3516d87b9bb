"""EAGLE, EAGLE-3 and MTP drafters: the head's shape, one pass's seconds, and its memory.

vLLM (``SpeculativeConfig.method``, vllm/config/speculative.py) runs three kinds of drafter
that read the target's hidden states instead of being a model of their own; ``draft =
"eagle"``, ``"eagle3"`` or ``"mtp"`` selects them (:data:`simulator.defaults.HEAD_DRAFTS`).
Their acceptance is the trace's (or the ``acceptance`` knob's): only their cost is modelled
here. The head's shape :class:`HeadShape` is derived from the target's by vLLM's modules:

- ``eagle3`` (vllm/model_executor/models/llama_eagle3.py, ``Eagle3LlamaForCausalLM``): one
  Llama decoder layer of the target's width (hidden h, heads, KV heads, MLP width I) whose
  ``qkv_proj`` reads 2h (the token's embedding next to the hidden state), ``hidden_norm`` and a
  final norm, ``fc`` 3h -> h (a ``ReplicatedLinear``: whole on every tp rank) that
  ``combine_hidden_states`` applies once, to the three target layers' states of the first
  pass; its own LM head of ``draft_vocab_size`` V_d rows (32000 for the reference heads; a
  target with a smaller vocabulary keeps its own size). Embeddings are the target's (shared,
  ``EagleProposer.load_model``).
- ``eagle`` (llama_eagle.py, ``EagleLlamaForCausalLM``): one decoder layer, ``fc`` 2h -> h
  on every pass (the embedding concatenated with the previous hidden state), the target's
  embedding and LM head (shared).
- ``mtp`` (deepseek_mtp.py, ``DeepSeekMultiTokenPredictorLayer``): ``enorm``, ``hnorm``,
  ``eh_proj`` 2h -> h (an ``nn.Linear``, replicated) on every pass, then one full decoder layer
  of the target (its MoE layer, experts included, for a MoE target; MLA for an MLA one) and
  ``shared_head.norm``; embedding and LM head shared. Needs a target with MTP layers
  (``ModelShape.mtp_layers``, config.json's ``num_nextn_predict_layers``); passes beyond
  that count reuse the last layer, as vLLM does.

The passes of one engine step (vllm/v1/spec_decode/eagle.py, ``EagleProposer.propose``; the
default ``disable_padded_drafter_batch = False``, ``prepare_inputs_padded``): pass 1 runs over
*every* token the target's pass computed, the decoding requests' 1 + s_i and the prefill
chunks' tokens alike (rejected drafts stay in as padding), with the LM head over one row per
request (``last_token_indices``); then k − 1 passes of one token per request, whose cached
context is c_i + τ_i + j on pass j (``seq_lens`` less the rejected tokens, + 1 per pass).
Every pass: the head's layer(s) at the target's tp (vLLM's ``draft_tensor_parallel_size``
defaults to the target's, ``_verify_and_get_draft_tp``; two all-reduces per layer at tp > 1),
``fc`` / ``eh_proj`` where the method applies it, and the LM head over one row per request.
Tree drafting (``propose_tree``) is not priced.

One pass on the roofline (simulator.cost.analytic.roofline's terms, the layer's
:class:`PassConstants` built from a vocabulary-free shape of the head's layers), with Q = Σq tokens,
n rows::

    F = F_layer(Q, c) + 2 · P_qkv+ / tp · Q + [fc] 2 · P_fc · Q + 2 · h · V_d / tp · n
    B = B_layer(Q, c) + b · P_qkv+ / tp + [fc] b · P_fc + b · h · V_d / tp
    t = max(F / (peak · eff_c), B / (bw · eff_m), H) + A + comm(Q)

P_qkv+ = h (q_width + 2 d_kv) the EAGLE-3 layer's wider qkv input, P_fc = fc_in · h. The
calibrated model prices the target from its profiles and the head by this formula (no public
profile of a head exists). Memory: the head's weights (its layers, fc, norms, and its own LM
head; the shared embedding and head are not counted twice) and its KV (its layers only: one
layer's K and V per token; MLA's latent replicated on each tp rank) next to the target's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.analytic.precision import held_weight_bytes, kv_element_bytes
from specbatch.simulator.cost.analytic.roofline import PassConstants, pass_constants
from specbatch.simulator.cost.gpus.hardware import Execution, Hardware
from specbatch.simulator.cost.interface import WrappedCost, batch_sums
from specbatch.simulator.defaults import HEAD_DRAFTS
from specbatch.traces.models.model_shape import ModelShape

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import SumsCostModel

#: ``draft_vocab_size`` of the reference EAGLE-3 heads (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B).
EAGLE3_DRAFT_VOCAB = 32000


@dataclass(frozen=True)
class HeadShape:
    """A drafter head (module docstring). ``layer``: its decoder layer(s) as a shape without a
    vocabulary (``layers`` of them; a MoE / MLA layer for MTP on such a target); ``fc_in``: the
    input width of ``fc`` / ``eh_proj`` (output h); ``fc_every_pass``: False for EAGLE-3 (pass
    1 only); ``qkv_extra``: EAGLE-3's extra qkv weights h (q_width + 2 d_kv); ``extra_norms``:
    norm weights outside the layers; ``lm_vocab`` V_d rows of the LM head, ``own_lm_head``
    whether the head holds it (else the target's is shared)."""

    method: str
    layer: ModelShape
    fc_in: int
    fc_every_pass: bool
    qkv_extra: int
    extra_norms: int
    lm_vocab: int
    own_lm_head: bool

    @property
    def hidden(self) -> int:
        return self.layer.hidden

    @property
    def fc_params(self) -> int:
        return self.fc_in * self.hidden

    @property
    def lm_head_params(self) -> int:
        return self.lm_vocab * self.hidden

    @property
    def held_params(self) -> int:
        """Weights the head adds to GPU memory (shared embedding and LM head not counted)."""
        return (self.layer.decoder_params + self.qkv_extra + self.extra_norms + self.fc_params
                + (self.lm_head_params if self.own_lm_head else 0))

    def held_bytes(self, hw: Hardware) -> float:
        """Bytes of :attr:`held_params` in memory: the layers in their format (an MTP layer in
        the target checkpoint's, simulator.cost.analytic.precision), everything else at the preset's
        dtype (eh_proj is a plain ``nn.Linear``; EAGLE heads are 16-bit checkpoints)."""
        layer = (held_weight_bytes(self.layer, hw) - hw.dtype_bytes * self.hidden
                 if self.layer.quantization != "none"
                 else hw.dtype_bytes * self.layer.decoder_params)  # held_weight_bytes adds a norm
        return layer + hw.dtype_bytes * (self.held_params - self.layer.decoder_params)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV bytes one token caches in the head's layers (one GPU's share set by the caller)."""
        return self.layer.kv_bytes_per_token(dtype_bytes)


def head_shape(method: str, target: ModelShape) -> HeadShape:
    """The ``method`` head of ``target`` by vLLM's modules (module docstring); a one-line error
    when the method is unknown or the target has no such head."""
    method = str(method).lower()
    require(method in HEAD_DRAFTS, f"draft {method!r}: expected one of {', '.join(HEAD_DRAFTS)}")
    h = target.hidden
    if method == "mtp":
        require(target.mtp_layers > 0,
                f"draft 'mtp': target {target.name} has no MTP layers (config.json "
                "num_nextn_predict_layers = 0); expected a target with them (e.g. deepseek-v3)")
        layer = replace(bare(target), name=f"{target.name}-mtp", layers=1,
                        moe_layers=1 if target.is_moe else 0, quantization=target.quantization,
                        quant_bits=target.quant_bits, quant_group_size=target.quant_group_size,
                        quant_scheme=target.quant_scheme)
        return HeadShape("mtp", layer, fc_in=2 * h, fc_every_pass=True, qkv_extra=0,
                         extra_norms=3 * h, lm_vocab=target.vocab, own_lm_head=False)
    require(not target.is_moe and not target.is_mla,
            f"draft {method!r}: cannot derive an EAGLE head of {target.name} (a mixture-of-"
            "experts or MLA target; the derivation copies a dense Llama layer); expected a "
            "dense target")
    layer = replace(bare(target), name=f"{target.name}-{method}", layers=1, experts=0,
                    top_k=0, expert_intermediate=0, shared_intermediate=0, moe_layers=0)
    if method == "eagle":
        return HeadShape("eagle", layer, fc_in=2 * h, fc_every_pass=True, qkv_extra=0,
                         extra_norms=0, lm_vocab=target.vocab, own_lm_head=False)
    qkv_extra = h * (layer.q_width + 2 * layer.kv_heads * layer.head_dim)
    vocab = min(EAGLE3_DRAFT_VOCAB, target.vocab)
    return HeadShape("eagle3", layer, fc_in=3 * h, fc_every_pass=False, qkv_extra=qkv_extra,
                     extra_norms=2 * h, lm_vocab=vocab, own_lm_head=True)


#: A head config.json's ``architectures[0]`` -> the method it is (vLLM's model registry names,
#: the EAGLE repository's and SpecForge's spellings).
HEAD_ARCHITECTURES = {"LlamaForCausalLMEagle3": "eagle3", "Eagle3LlamaForCausalLM": "eagle3",
                      "LlamaForCausalLMEagle": "eagle", "EagleLlamaForCausalLM": "eagle"}


def read_head_config(path: str, method: str, target: ModelShape) -> HeadShape:
    """The ``method`` head a config.json describes (vLLM's ``speculative_config.model``): its
    ``architectures`` (:data:`HEAD_ARCHITECTURES`), layer fields as a Llama config
    (traces.models.hf_config: hidden_size, num_hidden_layers, heads, intermediate_size),
    ``draft_vocab_size`` (EAGLE-3: its LM head's rows; default ``vocab_size``),
    ``target_hidden_size`` (EAGLE-3's fc input is 3 of it; default hidden_size) and
    ``eagle_config.use_aux_hidden_state`` (false: no fc, llama_eagle3.py). The embedding is
    taken as the target's (shared, ``EagleProposer.load_model``). One-line errors name the
    file and field."""
    import json

    from specbatch.traces.models.hf_config import config_file, read_hf_config

    layer_shape = read_hf_config(path)
    file = config_file(path)
    where = f"draft_head {file}"
    data = json.loads(file.read_text(encoding="utf-8"))
    archs = data.get("architectures") or [None]
    kind = HEAD_ARCHITECTURES.get(archs[0]) if isinstance(archs, list) else None
    require(kind is not None, f"{where}: field architectures: expected one of "
            f"{', '.join(HEAD_ARCHITECTURES)}, got {archs!r}")
    require(kind == method, f"{where}: field architectures: {archs[0]} is an {kind} head; "
            f"expected draft = {kind!r}, got {method!r}")
    require(method != "mtp", f"{where}: an MTP module is the target's own layer; expected no "
            "draft_head with draft = 'mtp'")
    h = layer_shape.hidden
    require(h == target.hidden or method == "eagle3",
            f"{where}: field hidden_size: expected the target's {target.hidden}, got {h}")
    layer = replace(bare(layer_shape), name=str(path))
    L = layer.layers
    if method == "eagle":
        return HeadShape("eagle", layer, fc_in=2 * h, fc_every_pass=True, qkv_extra=0,
                         extra_norms=0, lm_vocab=target.vocab, own_lm_head=False)
    vocab = data.get("draft_vocab_size")  # absent or null: vocab_size; 0 is not "absent"
    vocab = layer_shape.vocab if vocab is None else vocab
    require(isinstance(vocab, int) and not isinstance(vocab, bool)
            and 1 <= vocab <= target.vocab,
            f"{where}: field draft_vocab_size: expected an integer in [1, {target.vocab}], "
            f"got {vocab!r}")
    aux = (data.get("eagle_config") or {}).get("use_aux_hidden_state", True)
    require(isinstance(aux, bool), f"{where}: field eagle_config.use_aux_hidden_state: "
            f"expected true or false, got {aux!r}")
    # the fc reads 3 of the target's hidden states (llama_eagle3.py): their width is the
    # target's, whatever the head's own hidden_size
    wide = data.get("target_hidden_size")
    wide = target.hidden if wide is None else wide
    require(isinstance(wide, int) and not isinstance(wide, bool) and wide == target.hidden,
            f"{where}: field target_hidden_size: expected the target's hidden size "
            f"{target.hidden} ({target.name}), got {wide!r}")
    fc_in = 3 * wide if aux else 0
    qkv_extra = h * (layer.q_width + 2 * layer.kv_heads * layer.head_dim)
    return HeadShape("eagle3", layer, fc_in=fc_in, fc_every_pass=False, qkv_extra=qkv_extra,
                     extra_norms=(L + 1) * h, lm_vocab=int(vocab), own_lm_head=True)


def bare(target: ModelShape) -> ModelShape:
    """``target``'s layer without vocabulary, sliding window, MTP layers or quantisation (an
    EAGLE head is priced at the preset's dtype, full attention; MTP puts the target's format
    back: its layer is the target checkpoint's)."""
    return replace(target, vocab=0, tie_embeddings=True, sliding_window=0, sliding_layers=0,
                   quantization="none", quant_bits=0, quant_group_size=0, quant_scheme="",
                   mtp_layers=0)


@dataclass(frozen=True)
class HeadPass:
    """Roofline constants of one head pass (module docstring), per GPU."""

    layer: PassConstants  # the head's decoder layer(s), no LM head
    qkv_flops: float  # 2 P_qkv+ / tp per token
    qkv_bytes: float  # b P_qkv+ / tp
    fc_flops: float  # 2 P_fc per token (replicated)
    fc_bytes: float  # b P_fc
    fc_every_pass: bool
    lm_flops: float  # 2 h V_d / tp per sampled row
    lm_bytes: float  # b h V_d / tp

    def seconds(self, n: int, sq: float, skv: float, sqkv: float, sqq: float,
                first: bool) -> float:
        """One pass over n requests' Σq = ``sq`` tokens (Σc, Σq·c, Σq² as the roofline's
        sums); the LM head over n rows; ``fc`` when ``first`` or the method applies it every
        pass. 0 for an empty pass."""
        if sq <= 0.0:
            return 0.0
        c = self.layer
        fc = first or self.fc_every_pass
        flops = ((c.flops_per_token + self.qkv_flops + (self.fc_flops if fc else 0.0)) * sq
                 + c.attn_flops * (sqkv + 0.5 * (sqq + sq)) + self.lm_flops * n)
        nbytes = (c.weight_bytes + self.qkv_bytes + (self.fc_bytes if fc else 0.0)
                  + self.lm_bytes + c.kv_bytes * (skv + 2.0 * sq)
                  + c.act_bytes_per_token * sq)
        if c.experts:
            nbytes += c.expert_bytes * c.experts_touched(sq)
        return (max(flops * c.inv_compute, nbytes * c.inv_memory, c.floor) + c.fixed
                + c.comm_per_token * sq)


def head_pass(head: HeadShape, hw: Hardware, tp: int, execution: Execution,
              routing_skew: float = 0.0, kv_cache_dtype: str = "auto") -> HeadPass:
    """The :class:`HeadPass` of ``head`` on ``tp`` GPUs of ``hw`` (the target's tp)."""
    b = hw.dtype_bytes
    layer = pass_constants(head.layer, hw, tp, execution, "draft", routing_skew=routing_skew,
                           kv_element_bytes=kv_element_bytes(kv_cache_dtype, hw))
    return HeadPass(layer=layer, qkv_flops=2.0 * head.qkv_extra / tp,
                    qkv_bytes=float(b * head.qkv_extra) / tp,
                    fc_flops=2.0 * head.fc_params, fc_bytes=float(b * head.fc_params),
                    fc_every_pass=head.fc_every_pass,
                    lm_flops=2.0 * head.lm_head_params / tp,
                    lm_bytes=float(b * head.lm_head_params) / tp)


def head_kv_tokens(hw: Hardware, target: ModelShape, head: HeadShape, tp: int,
                   gpu_memory_utilization: float, kv_cache_dtype: str = "auto",
                   block_size: int = 16, disable_hybrid_kv_cache_manager: bool = False) -> int:
    """KV-cache tokens per replica next to the target's and the head's weights:
    (tp · M · u − W_target − W_head) / (kv_target + kv_head) per token (an MLA cache
    replicated on every tp rank), as simulator.cost.analytic.memory.memory_kv_tokens counts a draft;
    a target with sliding-window layers under vLLM V1's hybrid KV cache manager: the pool of
    simulator.cost.analytic.kv_groups with the head's full-attention layer(s) as the draft's."""
    from specbatch.simulator.cost.analytic.kv_groups import kv_layout

    b = hw.dtype_bytes
    w_target = (held_weight_bytes(target, hw) if target.quantization != "none"
                else b * target.params)
    free = tp * hw.memory_bytes * gpu_memory_utilization - w_target - head.held_bytes(hw)
    kv_b = kv_element_bytes(kv_cache_dtype, hw)
    if target.is_windowed:
        layout = kv_layout(target, head.layer, kv_b, block_size, disable_hybrid_kv_cache_manager)
        if layout.hybrid:
            return layout.num_blocks(max(free, 0.0)) * int(block_size)
    per_token = (target.kv_bytes_per_token(kv_b) * (tp if target.is_mla else 1)
                 + head.kv_bytes_per_token(kv_b) * (tp if head.layer.is_mla else 1))
    return max(0, int(free // per_token))


@dataclass(frozen=True)
class HeadDraftCost(WrappedCost):
    """``inner``'s target passes and overhead; the draft role is the head's passes after the
    first (:meth:`step_time`, :meth:`time_from_sums`: query 1 per request, no ``fc`` for
    EAGLE-3), and :meth:`first_pass_time` / :meth:`first_pass_step` price pass 1 over the
    target's whole pass (the engine calls them once per step, simulator.engine.decode)."""

    inner: SumsCostModel
    head: HeadShape
    passes: HeadPass
    kv_tokens: Callable[[float], int] | None = None

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **rows) -> float:
        """Seconds of one pass: a later head pass for the draft; ``query``, ``kv`` # [n]."""
        if role == "draft":
            return self.passes.seconds(*batch_sums(query, kv), first=False)
        return float(self.inner.step_time(role, query, kv, **rows))

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float, **rows) -> float:
        """:meth:`step_time` from the batch sums (``rows``: the target's logit rows)."""
        if role == "draft":
            return self.passes.seconds(n, sq, skv, sqkv, sqq, first=False)
        return float(self.inner.time_from_sums(role, n, sq, skv, sqkv, sqq, **rows))

    def first_pass_time(self, n: int, sq: float, skv: float, sqkv: float, sqq: float) -> float:
        """Pass 1 from the target pass's sums (n requests, LM head over n rows)."""
        return self.passes.seconds(n, sq, skv, sqkv, sqq, first=True)

    def first_pass_step(self, query: np.ndarray, kv: np.ndarray) -> float:
        """Pass 1 over the target pass's arrays ``query``, ``kv`` # [n]."""
        return self.first_pass_time(*batch_sums(query, kv))

    def __getattr__(self, name: str) -> Any:
        """Everything else (``hardware``, ``windowed``, ...) is the inner model's;
        ``kv_capacity_tokens`` is the target's and the head's memory."""
        if name == "kv_capacity_tokens":
            if self.kv_tokens is None:
                raise AttributeError(name)
            return self.kv_tokens
        if name in ("inner", "head", "passes", "kv_tokens") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def config_head(config: SimConfig) -> HeadShape | None:
    """The head a run config prices (``draft`` in :data:`HEAD_DRAFTS`; ``draft_head``'s
    config.json, else derived from ``target``), None for any other draft."""
    from specbatch.simulator.cost.analytic.precision import resolve_quantization
    from specbatch.traces.models.shapes import get_shape

    method = str(config.draft).lower()
    if method not in HEAD_DRAFTS:
        return None
    target = resolve_quantization(config.quantization, get_shape(config.target))
    if config.draft_head is not None:
        return read_head_config(config.draft_head, method, target)
    return head_shape(method, target)


def is_head_drafter(draft: str) -> bool:
    """Whether ``draft`` names a head on the target's hidden states (:data:`HEAD_DRAFTS`)."""
    return str(draft).lower() in HEAD_DRAFTS


def refuse_profiled(draft: str) -> SpecbatchError:
    """The one-line error of a head drafter under the profiled model."""
    return SpecbatchError(f"cost 'profiled': draft {draft!r} is a head on the target's hidden "
                          "states, which no latency profile measures; expected cost roofline "
                          "or calibrated")
