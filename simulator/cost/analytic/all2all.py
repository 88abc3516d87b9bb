"""The dispatch/combine traffic of expert parallelism under vLLM's default
``all2all_backend``, ``allgather_reducescatter`` (the derivation and its assumptions:
simulator.cost.features.expert_parallel): per MoE layer each of N data-parallel ranks receives
(N − 1)/N · T · b · (2h + E) bytes over a ring of N − 1 steps each way::

    t_a2a = 2 (N − 1) λ + (N − 1)/N · T · b · (2h + E) / B_link

Both the roofline (over the preset's link) and the measured RTX pricer (over the
anchor's PCIe link, simulator.cost.measured.lss) charge it.
"""

from __future__ import annotations

#: vLLM's default ``all2all_backend`` (vllm/config/parallel.py ``ParallelConfig``).
ALL2ALL_BACKEND = "allgather_reducescatter"


def dispatch_bytes(tokens_total: float, hidden: int, experts: int, dp: int,
                   dtype_bytes: int = 2) -> float:
    """Bytes one rank receives per MoE layer under ``allgather_reducescatter`` (module
    docstring): (N − 1)/N · T · b · (h + E) gathered plus (N − 1)/N · T · b · h scattered."""
    return (dp - 1) / dp * tokens_total * dtype_bytes * (2 * hidden + experts)


def dispatch_seconds(tokens_total: float, hidden: int, experts: int, dp: int, link_bw: float,
                     latency: float, dtype_bytes: int = 2) -> float:
    """t_a2a of one MoE layer (module docstring); 0 for one DP rank (nothing to exchange)."""
    if dp <= 1:
        return 0.0
    return (2 * (dp - 1) * latency
            + dispatch_bytes(tokens_total, hidden, experts, dp, dtype_bytes) / link_bw)
