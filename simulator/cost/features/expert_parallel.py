"""vLLM data parallelism with expert parallelism (``--data-parallel-size N
--enable-expert-parallel``): the per-rank price of a mixture-of-experts target's pass.

vLLM (``vllm/config/parallel.py`` ``ParallelConfig``: ``data_parallel_size``,
``enable_expert_parallel``, ``all2all_backend``) runs N data-parallel ranks, each with its own
scheduler, KV cache and attention over its own requests, and shares the routed experts of
every MoE layer over ep_size = N · tp GPUs (``vllm/model_executor/layers/fused_moe/layer.py``
``determine_expert_map``, linear placement: each rank holds E / ep_size whole experts, not a
tp slice of all of them). Per MoE layer the default backend ``allgather_reducescatter``
(``vllm/distributed/device_communicators/all2all.py`` ``AgRsAll2AllManager``:
``dispatch_router_logits`` all-gathers each DP rank's hidden states and router logits over the
DP group with ``all_gatherv``, ``combine`` reduce-scatters the expert outputs back with
``reduce_scatterv``) moves, with T = Σ_ranks Q_r tokens in the step, into each rank::

    dispatch + combine bytes = (N − 1)/N · T · b · (h + E)  +  (N − 1)/N · T · b · h

(a ring of N − 1 steps each way, each step a link latency λ), so per MoE layer::

    t_a2a = 2 (N − 1) λ + (N − 1)/N · T · b · (2h + E) / B_link

and each rank's experts compute T · k / ep_size (token, expert) pairs over the
(E / ep_size) · (1 − (1 − k/E)^T) of its experts that T tokens touch (uniform routing;
theory.moe.ep_pairs / ep_local_touched). A pricer sees one rank's batch (its Q), not the
others': the other ranks are taken to carry the same Q (T = N · Q: **symmetric load**). Under
that assumption the pairs a rank computes, N · Q · k / (N · tp), equal the pairs of the same
pass without expert parallelism (so FLOPs and activations are unchanged) and what changes is
the expert weights read (E / ep_size experts at most, each whole) and the dispatch traffic.

:func:`with_expert_parallel` returns a cost model whose *target* constants carry this layout:
the roofline (expert bytes E_touched_local · b · M · 3 h I_e; t_a2a over the preset's
``link_bw`` / ``allreduce_latency``) and the calibrated cost on the GPUs of the measured vLLM
runs (simulator.cost.measured.lss: the measured MoE block at T / ep_size tokens' pairs and
the rank's touched experts; t_a2a over the anchor's configured PCIe link, as its tp
all-reduce), and the aic cost where AIConfigurator times the rank's layout
(simulator.cost.measured.aic_ep: its MoE row of tp = 1, ep = ep_size at all T tokens).

:func:`rank_pass_seconds` is the same pass with the step's real T (every rank's tokens, known
once all ranks composed: simulator.engine.lockstep) in place of N · Q: the experts touched,
the pairs (FLOPs; the measured block's tokens) and t_a2a at T. At T = N · Q it equals the
symmetric price (a parity test); ``pad_to`` pads the pass to the token count the DP ranks
agreed on. Not modelled: the per-rank activation bytes of the pairs (the roofline keeps the
symmetric ones), an uneven expert split, skewed routing (``routing_skew`` is refused), W8A8
FP8 experts and sliding-window targets (refused).
"""

from __future__ import annotations

import dataclasses

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.analytic.all2all import dispatch_bytes
from specbatch.simulator.cost.analytic.roofline import PassConstants, RooflineCost
from specbatch.theory.moe import ep_local_experts
from specbatch.traces.models.model_shape import ModelShape


def ep_constants(c: PassConstants, shape: ModelShape, dp: int) -> PassConstants:
    """``c`` (a MoE target's roofline constants on tp GPUs) with its experts split over
    ep_size = dp · tp ranks: whole experts (not the tp slice), touched by dp · Q tokens."""
    require(shape.is_moe and c.experts, f"enable_expert_parallel: {shape.name} is not a "
            "mixture-of-experts model (expected an MoE target)")
    require(not c.expert_load, "routing_skew: expected 0 with enable_expert_parallel (skewed "
            "routing over expert-parallel ranks is not priced)")
    require(not c.fp8_flops_per_token, "quantization: expected a weight-only format or none "
            "with enable_expert_parallel (W8A8 FP8 experts over EP ranks are not priced)")
    require(not c.sliding_layers, f"enable_expert_parallel: {shape.name} has sliding-window "
            "layers (a pass is priced from arrays; its per-rank repricing is not modelled)")
    ep = int(dp) * c.tp
    ep_local_experts(c.experts, ep)  # refuses an uneven split
    return dataclasses.replace(c, expert_bytes=c.expert_bytes * c.tp, ep_size=ep, ep_dp=int(dp))


def roofline_ep(cost: RooflineCost, dp: int) -> RooflineCost:
    """A :class:`RooflineCost` whose target is priced per EP rank: its constants from
    :func:`ep_constants`, plus t_a2a over the preset's link on each of its M MoE layers
    (linear in Q: T = dp · Q; the 2(N − 1) latencies join the fixed time)."""
    shape, hw = cost.target, cost.hardware
    c = ep_constants(cost.consts["target"], shape, dp)
    per_token = shape.moe_layers * dispatch_bytes(dp, shape.hidden, shape.experts, dp,
                                                  hw.dtype_bytes) / hw.link_bw
    c = dataclasses.replace(c, comm_per_token=c.comm_per_token + per_token,
                            fixed=c.fixed + shape.moe_layers * 2 * (dp - 1)
                            * hw.allreduce_latency)
    new = dataclasses.replace(cost)
    object.__setattr__(new, "consts", {**new.consts, "target": c})
    return new


def with_expert_parallel(cost, dp: int, tp: int):
    """``cost`` with its target priced as one of ``dp`` data-parallel ranks sharing the experts
    (module docstring); the roofline and the calibrated cost on the measured runs' GPUs, a
    host-side drafter's wrapper passed through; any other model is a one-line refusal."""
    from specbatch.simulator.cost.features.free_draft import FreeDraftCost
    from specbatch.simulator.cost.measured.calibrated import CalibratedCost
    from specbatch.simulator.cost.measured.lss import LssPricer

    require(isinstance(dp, int) and dp >= 1, f"data_parallel_size {dp!r}: expected >= 1")
    if isinstance(cost, FreeDraftCost):
        return dataclasses.replace(cost, inner=with_expert_parallel(cost.inner, dp, tp))
    if isinstance(cost, RooflineCost):
        return roofline_ep(cost, dp)
    from specbatch.simulator.cost.measured.aic_cost import AicCost

    if isinstance(cost, AicCost):  # the MoE rows AIC times at the rank's ep (aic_ep)
        from specbatch.simulator.cost.measured.aic_ep import aic_ep

        return aic_ep(cost, dp)
    if isinstance(cost, CalibratedCost) and isinstance(cost.roles["target"], LssPricer):
        pricer = cost.roles["target"]
        ep = dataclasses.replace(pricer, consts=ep_constants(pricer.consts, cost.target, dp),
                                 memo={})
        new = dataclasses.replace(cost)
        object.__setattr__(new, "roles", {**new.roles, "target": ep})
        return new
    raise SpecbatchError("enable_expert_parallel: priced by cost roofline, by cost aic where "
                         "its MoE rows time the rank's layout, and by cost calibrated on the "
                         "LLMServingSim-profiled GPUs (rtx4090, rtxpro6000) only; got "
                         f"{type(cost).__name__}")


def rank_pass_seconds(cost, sums: tuple, total: float, pad_to: float | None = None) -> float:
    """Seconds of one EP rank's target pass of batch ``sums`` (n, Σq, Σc, Σq·c, Σq²) when
    the step's ranks send ``total`` tokens through each MoE layer (module docstring), through
    the wrappers the engine may hold (CUDA-graph padding, vLLM's async scheduling floor, a
    host-side drafter). ``pad_to``: the token count the DP ranks agreed to pad every pass
    to (simulator.engine.lockstep; Σq itself: no padding), None: the pass's own graph size."""
    from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost
    from specbatch.simulator.cost.features.free_draft import FreeDraftCost
    from specbatch.simulator.cost.features.graph_padding import PaddedCost
    from specbatch.simulator.cost.measured.calibrated import CalibratedCost

    if isinstance(cost, PaddedCost):  # p padding requests of query 1 and no cache
        n, sq, skv, sqkv, sqq = sums
        pad = cost.padding(sq) if pad_to is None else max(0.0, pad_to - sq)
        return rank_pass_seconds(cost.inner, (n + pad, sq + pad, skv, sqkv, sqq + pad), total)
    from specbatch.simulator.cost.features.host import HostCost

    if isinstance(cost, HostCost):  # vLLM's host share: b n on the pass, or its async floor
        return cost.target_seconds(rank_pass_seconds(cost.inner, sums, total, pad_to),
                                   int(sums[0]))
    if isinstance(cost, AsyncOverheadCost):
        t = rank_pass_seconds(cost.inner, sums, total, pad_to)
        return max(t, cost.host_overhead) if t > 0.0 else t
    from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses

    if isinstance(cost, (FreeDraftCost, DraftModelPasses)):  # the target is the inner model's
        return rank_pass_seconds(cost.inner, sums, total, pad_to)
    if isinstance(cost, RooflineCost):
        return roofline_rank_seconds(cost, sums, total)
    if isinstance(cost, CalibratedCost):
        return lss_rank_seconds(cost.roles["target"], sums, total)
    from specbatch.simulator.cost.measured.aic_cost import AicCost

    if isinstance(cost, AicCost):
        from specbatch.simulator.cost.measured.aic_ep import aic_rank_seconds

        return aic_rank_seconds(cost.roles["target"], sums, total)
    raise SpecbatchError(f"enable_expert_parallel: no per-rank price in {type(cost).__name__}")


def roofline_rank_seconds(cost: RooflineCost, sums: tuple, total: float) -> float:
    """:meth:`RooflineCost.time_from_sums` of the target at the step's ``total`` tokens: the
    expert FLOPs of total · k / ep_size pairs (2 · 3 h I_e · M each), the expert bytes of the
    local experts total touches, t_a2a of total; the rest as the symmetric pass."""
    n, sq, skv, sqkv, sqq = sums
    if sq <= 0.0:
        return 0.0
    c, shape, hw = cost.consts["target"], cost.target, cost.hardware
    dp, M = c.ep_dp, shape.moe_layers
    pair_flops = 2.0 * shape.expert_params * M
    flops = (c.flops_per_token * sq + c.attn_flops * (sqkv + 0.5 * (sqq + sq))
             + pair_flops * c.top_k * (total / c.ep_size - sq / c.tp))
    touched = (c.experts / c.ep_size) * (1.0 - (1.0 - c.top_k / c.experts) ** total)
    nbytes = (c.weight_bytes + c.kv_bytes * (skv + 2.0 * sq) + c.act_bytes_per_token * sq
              + c.expert_bytes * touched)
    extra_comm = M * dispatch_bytes(total - dp * sq, shape.hidden, shape.experts, dp,
                                    hw.dtype_bytes) / hw.link_bw
    return (max(flops * c.inv_compute, nbytes * c.inv_memory, c.floor) + c.fixed
            + c.comm_per_token * sq + extra_comm)


def lss_rank_seconds(pricer, sums: tuple, total: float) -> float:
    """:meth:`LssPricer.total` of the target at the step's ``total`` tokens: the measured MoE
    block at total / ep_size tokens' pairs and the local experts total touches, t_a2a of
    total; the rest (attention, LM head, launch) as the symmetric pass."""
    n, sq, skv, sqkv, sqq = sums
    if sq <= 0.0:
        return 0.0
    c, M = pricer.consts, pricer.shape.moe_layers
    p = pricer.parts(n, sq, skv, sqkv, sqq)
    touched = (c.experts / c.ep_size) * (1.0 - (1.0 - c.top_k / c.experts) ** total)
    layers = p["layers"] + M * (pricer.block_at(total / c.ep_size, touched)
                                - pricer.moe_block(sq))
    comm = pricer.tp_allreduce(sq) + pricer.ep_dispatch(sq, total)
    fixed, floor = pricer.launch
    launch = fixed + max(0.0, floor - (layers + p["attention"] + comm + p["lm_head"]))
    return (((layers + p["attention"]) + comm) + p["lm_head"]) + launch


def largest_graph(cost) -> int | None:
    """The largest captured CUDA-graph size of ``cost``'s padding wrapper (None: no graphs)."""
    from specbatch.simulator.cost.features.graph_padding import PaddedCost

    while cost is not None:
        if isinstance(cost, PaddedCost):
            return int(cost.largest)
        cost = cost.__dict__.get("inner")
    return None


def padded_tokens(cost, tokens: float) -> float:
    """The tokens a rank's pass of ``tokens`` sends through the MoE layers: padded to its
    CUDA-graph size when ``cost`` (or a model it wraps) pads
    (simulator.cost.features.graph_padding)."""
    from specbatch.simulator.cost.features.graph_padding import PaddedCost

    while cost is not None:
        if isinstance(cost, PaddedCost):
            tokens += cost.padding(tokens)
        cost = cost.__dict__.get("inner")
    return tokens
