"""Expert parallelism (vLLM ``--data-parallel-size N --enable-expert-parallel``) under the aic
cost model: one EP rank's target pass from AIConfigurator's own expert-parallel MoE rows.

What an ep > 1 row measures (AIConfigurator collector/vllm/collect_moe.py at 095f58a):
``run_moe_torch`` builds one physical rank's ``FusedMoE`` with ``tp_size`` = the logical
ep (l. 542, 605) and ``enable_expert_parallel = moe_ep_size > 1`` (l. 536), so vLLM's
``determine_expert_map`` gives rank 0 its linear share, E / ep whole experts (l. 538-541: "the
rank-0 expert map exactly as in a multi-rank model"); ``dp_size = 1`` (l. 606): no
dispatch or combine is timed. Each row feeds ``num_tokens`` hidden states (l. 702) with
router logits over all E experts from ``balanced_logits(num_tokens, num_experts, topk)``
(l. 748; collector/helper.py l. 1051-1067: token i picks (i + j·ceil(E/k)) mod E), so the
rank computes its local ~T·k/ep of the T·k (token, expert) pairs and masks the rest. The
``tokens`` column is therefore every token entering the rank's MoE layer: under vLLM's
``allgather_reducescatter`` backend the all-gathered tokens of all N DP ranks, T = Σ_r Q_r
(simulator.cost.analytic.all2all), not T / ep. aic_curves keeps the ``balanced`` rows.

So an EP rank's pass (:func:`aic_ep`) is the aic pass at tp (attention, GEMMs, small ops,
all-reduce, LM head at the rank's own Q) with the routed experts read from the measured MoE
curve of (h, I_e, E, k, tp = 1, ep = N · tp) at T tokens (symmetric load T = N · Q in the
composer; the step's real T in :func:`aic_rank_seconds`, simulator.engine.lockstep), plus
t_a2a of T over the link the other cost models price it over: the anchor's configured PCIe
link (simulator.cost.measured.lss.PCIE_LINK, 16 GB/s, 20 µs per step) on the GPUs of the
measured vLLM runs, as the calibrated path; elsewhere the preset's ``link_bw`` /
``allreduce_latency``, as the roofline. A layout no bundled row times is refused (no
transfer across ep); a sliding-window target is refused (its per-rank repricing is not
modelled, as the roofline's). The tabulated form (AicPricer.pass_table) reads the same curve
at N · Q, so the compiled engine's tables agree; the compiled engine runs one rank only and
refuses data-parallel ranks anyway.
"""

from __future__ import annotations

import dataclasses

from specbatch.errors import SpecbatchError


def ep_link(hardware) -> tuple[float, float]:
    """(bytes/s, s per ring step) the EP dispatch/combine crosses on ``hardware`` (module
    docstring)."""
    from specbatch.simulator.cost.measured.lss import PCIE_LINK, lss_gpu

    if lss_gpu(hardware.name):
        return PCIE_LINK
    return float(hardware.link_bw), float(hardware.allreduce_latency)


def ep_key(shape, tp: int, dp: int) -> tuple:
    """The MoE row key (hidden, inter, experts, topk, tp, ep) that times an EP rank's experts:
    tp = 1 and ep = dp · tp (the collector flattens tp into ep, collect_moe.py l. 353-354)."""
    return (shape.hidden, shape.expert_intermediate, shape.experts, shape.top_k, 1,
            int(dp) * int(tp))


def ep_row_gap(system: str, shape, dtype: str, tp: int, dp: int) -> str | None:
    """None when ``system``'s ``dtype`` MoE rows time an EP rank of ``shape`` at tp x ``dp``
    (the row :func:`ep_key` names), else why not in one line: what :func:`aic_ep` refuses with
    and the ``auto`` resolver passes aic over for (:func:`ep_gap`)."""
    from specbatch.simulator.cost.measured.aic_op_curves import shape_curves

    if not shape.is_moe:
        return (f"enable_expert_parallel: {shape.name} is not a mixture-of-experts model "
                "(expected an MoE target)")
    if shape.sliding_layers:
        return (f"enable_expert_parallel: {shape.name} has sliding-window layers (a pass is "
                "priced from arrays; its per-rank repricing is not modelled)")
    key = ep_key(shape, tp, dp)
    if key not in shape_curves(system, "moe", dtype).points:
        return (f"enable_expert_parallel: cost aic has no {dtype} MoE row on {system} timing "
                f"{shape.name}'s rank layout (hidden, inter, experts, topk, tp, ep) = {key}; "
                "expert-parallel rows are not transferred")
    return None


def ep_gap(hardware: str, target: str, tp: int, dp: int, quantization: str = "none") -> str | None:
    """:func:`ep_row_gap` of ``target`` on ``hardware``, its experts at the table dtype aic
    prices them from (aic_moe_rows.moe_dtype), or why none."""
    from specbatch.simulator.cost.gpus.catalogue import GPUS
    from specbatch.simulator.cost.measured.aic_cost import SYSTEM_OF, curve_coverage
    from specbatch.simulator.cost.measured.aic_moe_rows import moe_dtype
    from specbatch.traces.models.shapes import get_shape

    s = get_shape(target)
    system = SYSTEM_OF[str(hardware).lower()]
    quant = s.quantization if s.quantization != "none" else str(quantization).lower()
    dtype, why = ("", None) if not s.is_moe else moe_dtype(
        curve_coverage(system), s, quant, GPUS[str(hardware).lower()].compute_capability)
    if s.is_moe and not dtype:
        return f"enable_expert_parallel: {why}"
    return ep_row_gap(system, s, dtype, tp, dp)


def aic_ep(cost, dp: int):
    """``cost`` (an AicCost) with its target priced as one of ``dp`` EP ranks (module
    docstring); a one-line refusal where the bundled rows do not time the rank's layout."""
    from specbatch.simulator.cost.measured.aic_op_curves import op_curve

    p = cost.roles["target"]
    s = p.shape
    reason = ep_row_gap(p.system, s, p.experts_dtype, p.tp, dp)
    if reason is not None:
        raise SpecbatchError(reason)
    key = ep_key(s, p.tp, dp)
    new = dataclasses.replace(p, ep_dp=int(dp), ep_link=ep_link(p.hw), curves={}, memo={},
                              head_memo={}, tables={})
    new.curves["experts"] = (s.moe_layers, op_curve(p.system, "moe", p.experts_dtype, key))
    out = dataclasses.replace(cost)
    object.__setattr__(out, "roles", {**cost.roles, "target": new})
    return out


def aic_rank_seconds(pricer, sums: tuple, total: float) -> float:
    """:meth:`AicPricer.total` of an EP rank's pass of batch ``sums`` (n, Σq, Σc, Σq·c, Σq²)
    with the experts' row and t_a2a at the step's ``total`` tokens (every logit row kept, as
    the lockstep does); at total = N · Σq it is the symmetric price bit for bit."""
    n, sq, skv, sqkv, sqq = sums
    if sq <= 0.0:
        return 0.0
    layers, _, comm = pricer.pieces(sq, total)
    attn = pricer.attention_at(n, sq, skv, sqkv, sqq)
    gpu = ((layers + attn) + comm) + pricer.head_at(sq)
    fixed, floor = pricer.launch
    return float(gpu + (fixed + max(0.0, floor - gpu)))
