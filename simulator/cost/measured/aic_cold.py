"""Cold reads: measured cells the collector timed over data it kept in the L2, taken as no
faster than reading their bytes from memory at the rate the same table reaches where no L2
holds the data.

AIConfigurator's collectors replay one op over the same buffers (``collector/helper.py``
``benchmark_with_power``: warm-up runs, then CUDA-graph replays of the same ``kernel_func``;
no L2 flush, no buffer rotation beyond what the op builds itself). So a cell whose data fit the
L2 reads them from the L2 after the first replay. In a serving pass every layer's weights and
KV are read once per pass, after the other layers' went through the L2, so they are cold.

**GEMM cells** (:func:`cold_gemm`). ``collector/vllm/collect_gemm.py`` ``run_gemm`` builds
``outside_loop_count`` = 6 ``RowParallelLinear`` layers of one (n, k) for bf16 and per-tensor
fp8 (1 for fp8-block and nvfp4) and times ``kernel_func`` running the 6 in turn, so a cell's
weights stay in the L2 when 6 copies fit (L40S, 96 MB: n k 2 <= 16 MB). The tables show it:
bf16 weight reads at m = 1 above the GPU's memory bandwidth below ~20 MB of weights (L40S up to
2.3 TB/s against its 0.864 datasheet, RTX PRO 6000 2.7 against 1.79) and never above the large
weights' rate past it; H100 / H200 / A100 / B200 / GB200 (L2 40-50 MB or unsourced) never
exceed it.
A GEMM cell is taken as no faster than its weight bytes (n k, 2 bytes bf16, 1 fp8) at the
fastest weight read among the same table's cells of >= :data:`COLD_WEIGHTS` bytes of weights
(:func:`gemm_rate`): twice the largest L2 the catalogue states (RTX PRO 6000's 128 MB), so no
copy of such a weight is L2-resident. Not 1 GiB as for the KV below: H200 bf16 reads its
256 MB - 1 GiB weights at up to 4.34 TB/s against 4.25 past 1 GiB, and no L2 holds those.

**MoE rows** (:func:`cold_moe`). ``collector/vllm/collect_moe.py`` ``run_moe_torch`` (095f58a,
vLLM 0.24; the 0.22 collector of L40S's native rows alike, with ``fused_experts``) builds one
``FusedMoE`` (one copy of the experts, rank 0's shard: I / tp wide, the first E / ep experts),
takes the router logits of ``collector/helper.py`` ``balanced_logits`` once per token count and
times ``moe_module(hidden_states, router_logits)`` by ``benchmark_with_power`` (3 warm-ups, 6
CUDA-graph replays): the same routing every replay, so the experts it touches stay in the L2
where they fit (L40S fp8, Llama-4 Scout at tp 2, 1 token: one 63 MB expert in 29 us, 2.2
TB/s). A row is taken as no faster than the bytes of the experts its routing touches
(:func:`moe_bytes`) at the fastest read among the same table's rows of >= :data:`COLD_WEIGHTS`
(:func:`moe_rate`): the table's own rate, not the GEMMs', since vLLM's MoE kernels stream
weights faster than cuBLAS's best on H100 / H200 / B200 bf16 (3.18 / 4.60 / 7.43 TB/s against
3.10 / 4.34 / 7.16), and a GEMM rate would raise rows read from memory.

**Decode attention cells** (aic_mixed.cold_rate, aic_attention.cold_cells): the KV of one
``kv_cache`` warmed and timed, taken no faster than the KV bytes at the fastest read over
>= :data:`COLD_BYTES` of KV.

The rate of each is :func:`read_rate`, read from the table itself: no constant is fitted.
What it assumes: a pass's weights exceed the L2 (every model the bundled runs price does).
"""

from __future__ import annotations

import functools

import numpy as np

from specbatch.simulator.cost.measured.aic_curves import load_curves

#: KV bytes past which no bundled GPU's L2 (<= 128 MB) holds a decode cell's KV.
COLD_BYTES = 2.0 ** 30
#: Weight bytes past which no bundled GPU's L2 holds a GEMM cell's weight: 2 x 128 MB, the
#: largest L2 the catalogue states (RTX PRO 6000; simulator.cost.gpus.catalogue).
COLD_WEIGHTS = 256e6


def read_rate(nbytes: np.ndarray, seconds: np.ndarray, above: float) -> float | None:
    """Bytes/s: the fastest read ``nbytes / seconds`` # [cells] among the cells of >=
    ``above`` bytes, or None where no cell is that large."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    big = nbytes >= above
    if not big.any():
        return None
    return float(np.max(nbytes[big] / np.asarray(seconds, dtype=np.float64)[big]))


def floored(seconds: np.ndarray, nbytes: np.ndarray, rate: float | None) -> np.ndarray:
    """``seconds`` # [cells] no faster than ``nbytes`` # [cells] at ``rate`` bytes/s (as they
    are where ``rate`` is None)."""
    seconds = np.asarray(seconds, dtype=np.float64)
    if rate is None:
        return seconds
    return np.maximum(seconds, np.asarray(nbytes, dtype=np.float64) / rate)


def weight_bytes(n, k, dtype: str) -> np.ndarray:
    """Weight bytes of GEMMs [n, k] at ``dtype`` (1 byte fp8, 2 bf16): n k e."""
    e = 1.0 if dtype == "fp8" else 2.0
    return np.asarray(n, dtype=np.float64) * np.asarray(k, dtype=np.float64) * e


@functools.lru_cache(maxsize=16)
def gemm_rate(system: str, dtype: str) -> float | None:
    """Bytes/s: :func:`read_rate` of ``system``'s ``dtype`` GEMM cells' weights over >=
    :data:`COLD_WEIGHTS` (all m), or None where the table has no such cell."""
    g = load_curves(system).get("gemm")
    if g is None:
        return None
    g = g[g["dtype"] == dtype]
    return read_rate(weight_bytes(g["n"], g["k"], dtype), g["latency_s"], COLD_WEIGHTS)


def cold_gemm(rows, rate: float | None, dtype: str):
    """GEMM rows (a frame with n, k, latency_s) at ``dtype`` with ``latency_s`` no faster
    than the weights at ``rate`` (:func:`floored`; the frame itself where ``rate`` is None)."""
    if rate is None:
        return rows
    return rows.assign(latency_s=floored(rows["latency_s"].to_numpy(np.float64),
                                         weight_bytes(rows["n"], rows["k"], dtype), rate))


#: Weight bytes per parameter of the MoE table dtypes (block / MXFP4 scales left out: a floor).
MOE_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "fp8_block_modular": 1.0,
             "w4a16_mxfp4": 0.5}
#: (hidden, width, experts, top-k) of the MoE rows whose experts are not gated: an up and a down
#: matrix, not three. AIConfigurator's Nemotron-H cases (collector/cases/models/
#: NemotronHForCausalLM_cases.yaml at 095f58a; its vLLM collector runs ``relu2_no_mul``,
#: collect_moe.py ``_resolve_moe_runtime_config``): Nano, and Super / Ultra at their latent width.
NOT_GATED = frozenset({(2688, 1856, 128, 6), (1024, 2688, 512, 22), (2048, 5120, 512, 22)})
#: (hidden, width, experts, top-k) -> (expert groups, groups a token routes to) of the rows whose
#: vLLM router picks experts within groups (``use_grouped_topk``): DeepSeek-V3 (its config's
#: ``n_group`` 8, ``topk_group`` 4; aic-core model_configs deepseek-ai--DeepSeek-V3 at 095f58a).
GROUPED = {(7168, 2048, 256, 8): (8, 4)}


def _bf16(x) -> np.ndarray:
    """``x`` rounded to bfloat16 (nearest, ties to even), as float32."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def balanced_ids(tokens: int, experts: int, topk: int, bf16: bool) -> np.ndarray:
    """The experts # [tokens, topk] AIConfigurator's ``balanced_logits`` selects: token t's j-th
    ``(t + j s) % E`` at ``tokens`` >= s = ceil(E / k), else ``(t s / T + j s) % E`` truncated,
    in exact arithmetic or (``bf16``) in the bfloat16 the 0.24 collector's default dtype makes
    it (``torch.set_default_dtype(torch.bfloat16)`` before the call)."""
    s = -(-experts // topk)
    t, j = np.arange(tokens)[:, None], np.arange(topk)[None, :]
    if tokens >= s:
        return (t + j * s) % experts
    if not bf16:
        return ((t * s + j * s * tokens) // tokens) % experts
    x = _bf16(_bf16(t * s) * np.float32(1.0 / tokens))
    x = _bf16(np.fmod(_bf16(x + _bf16(j * s)), np.float32(experts)))
    return np.trunc(x).astype(np.int64)


@functools.lru_cache(maxsize=4096)
def touched_experts(tokens: int, experts: int, topk: int, ep: int,
                    groups: tuple = ()) -> int:
    """Experts of rank 0's E / ep (vLLM's linear placement) a balanced row of ``tokens`` reads,
    at the fewer of the exact and the bfloat16 selection (:func:`balanced_ids`). All of them
    from ``tokens`` >= ceil(E / k). Grouped routing (``groups`` = (G, g)) keeps of each token's
    selection its experts in the g groups it routes to, which ties choose: balanced gives each
    token one expert per group (DeepSeek-V3: s = E / G), so of the L = G / ep groups rank 0
    holds at least g - (G - L) are chosen: that share of its selected experts (none at ep >= 2
    for V3), and at ep = 1 never fewer than k."""
    local = experts // ep
    if tokens >= -(-experts // topk):
        n = local
    else:
        n = min(int((np.unique(balanced_ids(tokens, experts, topk, b)) < local).sum())
                for b in (False, True))
    if groups:
        held = max(groups[0] // ep, 1)
        n = -(-n * max(groups[1] - groups[0] + held, 0) // held)
        n = max(n, topk) if ep == 1 else n
    return n


def moe_bytes(rows, dtype: str) -> np.ndarray:
    """Weight bytes # [rows] of the experts each MoE row (a frame with tokens, hidden, inter,
    experts, topk, tp, ep) touches on its rank: :func:`touched_experts` x (3, or 2 where
    :data:`NOT_GATED`) matrices of hidden x inter / tp at :data:`MOE_BYTES`."""
    cols = [rows[c].to_numpy(np.int64) for c in ("tokens", "hidden", "inter", "experts",
                                                   "topk", "tp", "ep")]
    out = np.empty(len(rows))
    for i, (t, h, w, e, k, tp, ep) in enumerate(zip(*cols, strict=True)):
        key = (int(h), int(w), int(e), int(k))
        n = touched_experts(int(t), int(e), int(k), int(ep), GROUPED.get(key, ()))
        out[i] = n * (2 if key in NOT_GATED else 3) * h * (w // tp)
    return out * MOE_BYTES[dtype]


@functools.lru_cache(maxsize=16)
def moe_rate(system: str, dtype: str) -> float | None:
    """Bytes/s: :func:`read_rate` of ``system``'s ``dtype`` MoE rows' touched weights
    (:func:`moe_bytes`) over >= :data:`COLD_WEIGHTS`; None where no row is that large or the
    dtype's bytes are not known."""
    m = load_curves(system).get("moe")
    if m is None or dtype not in MOE_BYTES:
        return None
    m = m[m["dtype"] == dtype]
    return read_rate(moe_bytes(m, dtype), m["latency_s"], COLD_WEIGHTS)


def cold_moe(rows, rate: float | None, dtype: str):
    """MoE rows at ``dtype`` with ``latency_s`` no faster than their touched weights
    (:func:`moe_bytes`) at ``rate``; a row within 1e-12 of it is left as timed (the row that
    sets the rate reads back its own time); the frame itself where ``rate`` is None."""
    if rate is None:
        return rows
    secs = rows["latency_s"].to_numpy(np.float64)
    cold = moe_bytes(rows, dtype) / rate
    return rows.assign(latency_s=np.where(cold > secs * (1.0 + 1e-12), cold, secs))
