"""The cost models' constants packed into the compiled kernel's arrays (slots named by
simulator.engine.v1.kernel.layout): the roofline's pass constants, vLLM's host terms, the
drafter's (a head's pass constants, the n-gram proposer's). The driver
(simulator.engine.v1.driver) calls them once per run; the kernel prices every pass from them
as the numpy cost models do (parity: tests/simulator/engine/v1/test_compiled*.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost
from specbatch.simulator.engine.v1.compiled import cost_layers, drafter_layer, host_layer

if TYPE_CHECKING:
    from specbatch.simulator.cost.interface import CostModel

#: The RooflineCost pass constants of one role, in kernel.pass_time's slot order.
_PASS_CONSTANTS = ("flops_per_token", "attn_flops", "weight_bytes", "kv_bytes",
                   "act_bytes_per_token", "inv_compute", "inv_memory", "floor", "fixed",
                   "comm_per_token")


def pack_roofline(kn, floats: np.ndarray, model) -> None:
    """A RooflineCost's pass constants of both roles into ``floats`` (kernel.pass_time): the
    10 of each role, the LM head's FLOPs per row, the W8A8 FP8 GEMMs and the uniform-routing
    experts (F_MOE; 1 − k/E computed as theory.moe.uniform_touched computes it)."""
    for off, m, role in ((0, kn.F_MOE, "target"), (10, kn.F_MOE + 5, "draft")):
        c = model.consts[role]
        floats[off:off + 10] = [float(getattr(c, name)) for name in _PASS_CONSTANTS]
        floats[kn.F_HEAD_T if off == 0 else kn.F_HEAD_D] = float(c.head_flops)
        floats[m + kn.M_FP8] = float(c.fp8_flops_per_token)
        floats[m + kn.M_INV_FP8] = float(c.inv_compute_fp8)
        if c.experts:  # uniform routing on one rank (compiled_gap)
            floats[m + kn.M_EXPERT_BYTES] = float(c.expert_bytes)
            floats[m + kn.M_EXPERTS] = float(c.experts)
            floats[m + kn.M_MISS] = 1.0 - c.top_k / c.experts


def pack_host(kn, floats: np.ndarray, host) -> None:
    """The host terms' slots (kernel.host_target, kernel.host_draft) of ``host``, the layer
    compiled.host_layer found (None: none): simulator.cost.features.host's constants as
    HostCost uses them, or async scheduling's floor under ``host = "fixed"``
    (AsyncOverheadCost: max(pass, T_o), the same terms with a = T_o, b = 0, no floor)."""
    if type(host) is AsyncOverheadCost:
        floats[kn.F_HOST] = floats[kn.F_OVERLAP] = 1.0
        floats[kn.F_STEP_S] = host.host_overhead
        return
    if host is None:
        return
    from specbatch.simulator.cost.features import host as hostmod

    floats[kn.F_HOST] = 1.0
    floats[kn.F_OVERLAP] = float(bool(host.overlap))
    floats[kn.F_STEP_S] = hostmod.STEP_S
    floats[kn.F_REQUEST_S] = hostmod.REQUEST_S
    if host.draft_layers:
        floats[kn.F_FLOOR] = 1.0
        floats[kn.F_KERNELS_S] = hostmod.proposer_kernels(host.d2t) * hostmod.SMALL_KERNEL_S
        floats[kn.F_OPS_S] = hostmod.proposer_ops(host.draft_layers, host.d2t) * hostmod.OP_S


def pack_drafter(kn, ints: np.ndarray, floats: np.ndarray, cost: CostModel,
                 speculates: bool) -> None:
    """The drafter's slots (kernel.F_DRAFTER; a head's constants from F_HP, the n-gram
    proposer's from F_NGRAM) and I_DRAFTS_CHUNKS: a head (EAGLE, EAGLE-3, MTP), a draft model
    under vLLM V1's proposer (simulator.cost.features.draft_model_pass) or the n-gram proposer
    under vLLM's host terms has a first pass on the target pass (simulator.engine.core's
    ``head``: a speculating policy and a ``first_pass_time``) and no chunk pass; a free
    drafter without host terms drafts chunks at 0 s."""
    _, _, base = cost_layers(cost)
    kind, head, _ = drafter_layer(base)
    host, _, _ = host_layer(cost)
    if type(host) is AsyncOverheadCost:  # host = fixed: no proposer terms, free drafts 0 s
        host = None
    if speculates and kind == "model-v1":
        ints[kn.I_DRAFTS_CHUNKS] = 0
        floats[kn.F_DRAFTER] = kn.DRAFT_MODEL_V1
    elif speculates and kind != "model":
        ints[kn.I_DRAFTS_CHUNKS] = int(head is None and host is None)
        floats[kn.F_DRAFTER] = (kn.DRAFT_HEAD if head is not None else
                                kn.DRAFT_NGRAM if host is not None else kn.DRAFT_FREE)
    if head is not None:
        pack_head(kn, floats, head.passes)
    if host is not None and host.ngram:
        from specbatch.simulator.cost.features import host as hostmod

        floats[kn.F_NGRAM:kn.F_NGRAM + 4] = (hostmod.NGRAM_CALL_S, hostmod.NGRAM_REQUEST_S,
                                             hostmod.NGRAM_TOKEN_S, hostmod.NGRAM_PAIR_S)


def pack_head(kn, floats: np.ndarray, p) -> None:
    """A head's pass constants (simulator.cost.features.draft_head.HeadPass ``p``) into
    ``floats`` from F_HP (kernel.head_time): the per-token FLOPs and the fixed bytes of pass 1
    and of the later passes summed in HeadPass.seconds's order (x + 0.0 = x: a pass without
    ``fc`` adds 0.0 there), the rest as they are."""
    c = p.layer
    every = bool(p.fc_every_pass)
    hp = np.zeros(16)
    hp[kn.HP_FLOPS1] = c.flops_per_token + p.qkv_flops + p.fc_flops
    hp[kn.HP_FLOPS] = c.flops_per_token + p.qkv_flops + (p.fc_flops if every else 0.0)
    hp[kn.HP_ATTN], hp[kn.HP_LM] = c.attn_flops, p.lm_flops
    hp[kn.HP_BYTES1] = c.weight_bytes + p.qkv_bytes + p.fc_bytes + p.lm_bytes
    hp[kn.HP_BYTES] = c.weight_bytes + p.qkv_bytes + (p.fc_bytes if every else 0.0) + p.lm_bytes
    hp[kn.HP_KV], hp[kn.HP_ACT] = c.kv_bytes, c.act_bytes_per_token
    hp[kn.HP_INV_C], hp[kn.HP_INV_M] = c.inv_compute, c.inv_memory
    hp[kn.HP_FLOOR], hp[kn.HP_FIXED], hp[kn.HP_COMM] = c.floor, c.fixed, c.comm_per_token
    if c.experts:  # an MTP layer's (uniform routing, one rank: compiled_gap)
        hp[kn.HP_EXPERT_BYTES], hp[kn.HP_EXPERTS] = c.expert_bytes, float(c.experts)
        hp[kn.HP_MISS] = 1.0 - c.top_k / c.experts
    floats[kn.F_HP:kn.F_HP + 16] = hp
