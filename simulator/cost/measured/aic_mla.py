"""Multi-head latent attention (DeepSeek-V2/V3) from AIConfigurator's measured vLLM MLA tables.

What the rows time (traces.public.aiconfigurator): on H100 / H200 / B200 / GB200 / L40S / RTX
PRO 6000 (vLLM 0.24.0 tables, scope "module") the whole ``DeepseekV2MLAAttention`` forward of
DeepSeek-V3 at H query heads on one GPU; on A100 (0.14.0, scope "kernel") the MLA backend's
``impl.forward`` alone, timed eagerly, which prices nothing (:data:`GRAPHED_SCOPE`). vLLM's
module is, per layer on one GPU (h hidden, r_q / r_kv the query / KV latent ranks, d_n, d_r,
d_v the nope, rope and value widths)::

    projections  fused q_a + kv_a  n = r_q + r_kv + d_r, k = h     (replicated)
                 q_b               n = H (d_n + d_r),    k = r_q
                 (no q latent: q_proj n = H (d_n + d_r), k = h; kv_a n = r_kv + d_r, k = h)
                 o_proj            n = h,                k = H d_v
    core         the q_a / kv_a RMSNorms, rotary, and the backend: prefill tokens through
                 kv_b_proj's up-projection and the prefill kernel, decode tokens through the
                 absorbed W_UK / W_UV bmm around the latent-KV kernel (two launches)

The projections are GEMMs of the model's own widths and the step's token count Q, priced like
every other GEMM from AIConfigurator's GEMM curves (the role pricer's layer ops); the core
depends on H, r_kv, d_r, d_n, d_v (DeepSeek-V2-Lite's equal V3's: :data:`CORE_DIMS`) and on
the batch's composition. So a module row's core is its time less DeepSeek-V3's projections at
the row's Q = B (decode) or B·s (prefill) on the same GPU's bf16 GEMM curves
(:func:`core_rows`; no less than :data:`MIN_CORE`: the GEMM curves, timed alone, exceed a few
module rows by up to 11 %, B200 prefill and L40S decode); a kernel row is its core less the
norms and rotary (A100: the small-op laws price those, as for every model). A module row's core
holds rotary, which the small-op laws also price per layer: a role priced from module rows
leaves it out of its small ops (:func:`core_holds`; the latent norms are not among the
small-op laws' ops, so nothing else is counted twice).

The core is priced by the attention grid law (aic_attention.grid_tables,
simulator.cost.tabulated.grid_attention) over per-head-count cells, as an attention shape of
one KV head of width :data:`WIDTH` (the latent cache's r_kv + d_r numbers per token are two
"K/V" halves of it): decode cells D(B, c), prefill ΔP(B, s), the FLOP rate of the linear law
(aic_attention.fit_attention, fitted on every timed head count of the GPU and KV dtype) for the
cached-prefix term, and vLLM's MLA mixing (``MLACommonImpl.forward``: decode and prefill tokens
in separate launches; :func:`mixed_mode` says which requests are decode). A head count the
tables do not time is carried from the two nearest timed ones by the linear law's ratio
(aic_attention.carried), as an untimed attention shape is; the decode cells are taken as timed
(no cold-KV correction: not analysed for the latent cache).

On the GPUs whose decode rows ran vLLM's Triton MLA kernel (:data:`TRITON_KERNELS`: A100,
L40S, RTX PRO 6000) the core's decode KV term counts head blocks, not one latent head
(:func:`head_blocks`): ``_decode_grouped_att_m_fwd`` (vllm/attention/ops/
triton_decode_attention.py) launches ``(batch, cdiv(H, min(BLOCK_H, H)), NUM_KV_SPLITS)``
programs with ``BLOCK_H = 16``, each reading its requests' whole latent KV, so the KV read grows
as ceil(H / 16) while the FLOPs grow as H; and ``decode_attention_fwd`` sends one head
(``kv_group_num == 1``) to another kernel (``decode_attention_fwd_normal``), so 1 head is no
source for the decode cells of another head count (:func:`carried_cells`). The tables agree:
at batch 256 and 8k cached tokens the RTX PRO 6000 core reads 1.86-2.04 ms at 1-16 heads and
3.7 / 7.1 / 13.8 ms at 32 / 64 / 128. The block size is the kernel's, not fitted.
"""

from __future__ import annotations

import functools

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_cells import attention_rows
from specbatch.simulator.cost.measured.aic_cold import floored, gemm_rate
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.tabulated import DECODE_PATH, TWO_LAUNCHES

#: DeepSeek-V3, the model of the module tables: (h, r_q, r_kv, d_r, d_n, d_v).
V3 = (7168, 1536, 512, 64, 128, 128)
#: The core's widths (r_kv, d_r, d_n, d_v) a model must share with the tables to be priced.
CORE_DIMS = V3[2:]
#: The latent cache as one KV head: 2 · WIDTH = r_kv + d_r numbers per token.
WIDTH = (V3[2] + V3[3]) // 2
#: Smallest core seconds a module row is taken to hold (module docstring).
MIN_CORE = 1e-6
#: Timed head counts an untimed one is carried from.
NEAREST = 2
#: The tables' decode ``kernel`` names of vLLM's Triton MLA backend (triton_mla.py, whose
#: decode is triton_decode_attention.decode_attention_fwd): vLLM 0.22 / 0.24 module rows,
#: vLLM 0.14 kernel rows (A100).
TRITON_KERNELS = frozenset({"TRITON_MLA", "vllm_triton_mla"})
#: Query heads per program of that kernel (``BLOCK_H`` in ``_decode_grouped_att_m_fwd``).
BLOCK_H = 16


def head_blocks(heads: int, triton: bool) -> int:
    """Times the decode kernel reads the latent KV at ``heads`` query heads: ceil(H /
    :data:`BLOCK_H`) head blocks on the Triton kernel, once elsewhere (module docstring)."""
    return -(-int(heads) // BLOCK_H) if triton else 1


@functools.lru_cache(maxsize=32)
def triton_decode(system: str, kv_dtype: str) -> bool:
    """Whether ``system``'s MLA decode rows at ``kv_dtype`` ran the Triton kernel
    (:data:`TRITON_KERNELS`)."""
    kernels = decode_values(system, kv_dtype, "kernel")
    return bool(kernels) and kernels <= TRITON_KERNELS


def decode_values(system: str, kv_dtype: str, column: str) -> set:
    """The values ``column`` takes in ``system``'s MLA decode rows at ``kv_dtype`` (empty where
    none are bundled)."""
    rows = load_curves(system).get("mla_decode")
    return set() if rows is None else set(rows.loc[rows["kv_dtype"] == kv_dtype, column])


def projections(hidden: int, q_lora_rank: int, kv_lora_rank: int, rope: int, nope: int,
                v_head: int, heads: int) -> dict:
    """GEMM name -> (n, k) of vLLM's MLA projections at ``heads`` query heads on one GPU
    (module docstring)."""
    out = {}
    if q_lora_rank:
        out["q_a"] = (q_lora_rank + kv_lora_rank + rope, hidden)
        out["q_b"] = (heads * (nope + rope), q_lora_rank)
    else:
        out["q"] = (heads * (nope + rope), hidden)
        out["kv_a"] = (kv_lora_rank + rope, hidden)
    out["o"] = (hidden, heads * v_head)
    return out


def v3_projection_seconds(gemm, heads: int, q: np.ndarray) -> np.ndarray:
    """Seconds of DeepSeek-V3's projections at ``heads`` heads over token counts ``q`` # [Q];
    ``gemm(n, k)`` -> the bf16 GEMM :class:`~simulator.cost.measured.aic_curve.Curve`."""
    total = np.zeros(len(q))
    for n, k in projections(*V3, heads).values():
        total = total + gemm((n, k)).at_many(np.asarray(q, dtype=np.float64))
    return total


def core_bytes(heads: np.ndarray, tokens: np.ndarray, kv_bytes: float) -> np.ndarray:
    """Bytes the core reads at least once per call # [rows]: the absorbed kv_b weights
    (W_UK / W_UV, bf16 n = H (d_n + d_v), k = r_kv) and the latent KV of ``tokens`` # [rows]
    (r_kv + d_r numbers each, ``kv_bytes`` a number)."""
    heads = np.asarray(heads, dtype=np.float64)
    return (heads * (V3[4] + V3[5]) * V3[2] * 2.0
            + np.asarray(tokens, dtype=np.float64) * 2 * WIDTH * kv_bytes)


def v3_projection_bytes(heads: int) -> float:
    """Weight bytes of DeepSeek-V3's bf16 projections at ``heads`` heads."""
    return float(sum(n * k * 2.0 for n, k in projections(*V3, heads).values()))


def core_rows(system: str, kv_dtype: str, gemm):
    """(decode, prefill) MLA rows of ``system`` at ``kv_dtype`` in the serving range
    (aic_cells' limits) with ``module_s`` (the row's time), ``projections_s`` (V3's
    projections, 0 on a kernel-only row), ``latency_s`` the core and ``cold_s`` the row as
    the core and projections price it (module docstring), as attention rows of width
    :data:`WIDTH` (aic_attention's columns) whose KV heads are the decode kernel's
    :func:`head_blocks` (1 but on the Triton kernel's decode rows: the prefill rows write each
    new token's latent KV once).

    Read cold (aic_cold; the collector replays one module over one KV cache, and a module of
    <= 16 heads, 52-73 MB of bf16 weights, fits a 96-128 MB L2): a row no faster than its
    weights (projections and the core's kv_b) and its latent KV (decode B (c + 1) tokens,
    prefill B s) at the GPU's cold bf16 weight read (aic_cold.gemm_rate), and the core no
    faster than its own bytes (:func:`core_bytes`) at that rate (nor than :data:`MIN_CORE`);
    ``gemm`` gives the projections as the GEMM curves read them (cold)."""
    d, p = attention_rows(system, kv_dtype, "mla")
    triton = triton_decode(system, kv_dtype)
    rate = gemm_rate(system, "bfloat16")
    e = 1.0 if kv_dtype == "fp8" else 2.0
    out = []
    for rows, q, kv in ((d, d["batch"], d["batch"] * (d["context"] + 1)),
                        (p, p["batch"] * p["prompt"], p["batch"] * p["prompt"])):
        blocks = [head_blocks(h, triton and rows is d) for h in rows["heads"]]
        rows = rows.assign(kv_heads=blocks, head_dim=WIDTH, module_s=rows["latency_s"])
        proj = np.zeros(len(rows))
        weights = np.zeros(len(rows))
        module = (rows["scope"] == "module").to_numpy()
        heads = rows["heads"].to_numpy()
        qq = q.to_numpy(dtype=np.float64)
        for h in np.unique(heads[module]):
            at = module & (heads == h)
            proj[at] = v3_projection_seconds(gemm, int(h), qq[at])
            weights[at] = v3_projection_bytes(int(h))
        own = core_bytes(heads, kv.to_numpy(dtype=np.float64), e)
        cold = floored(rows["module_s"].to_numpy(), weights + own, rate)
        core = floored(np.maximum(cold - proj, MIN_CORE), own, rate)
        rows = rows.assign(projections_s=proj, latency_s=core, cold_s=proj + core)
        out.append(rows.reset_index(drop=True))
    return out[0], out[1]


def head_cells(decode, prefill) -> dict:
    """Head count -> its core cells (aic_attention.cells) where both tables span a grid."""
    from specbatch.simulator.cost.measured.aic_attention import cells, has_grid

    out = {}
    for h in sorted(set(decode["heads"]) & set(prefill["heads"])):
        got = cells(decode[decode["heads"] == h], prefill[prefill["heads"] == h])
        if has_grid(got):
            out[int(h)] = got
    return out


def fit(decode, prefill):
    """The linear law (aic_attention.AttnFit) of the core over every timed head count."""
    from specbatch.simulator.cost.measured.aic_attention import fit_attention

    return fit_attention(decode, prefill)


def carried_cells(grids: dict, law, heads: int, kv_bytes: float, exclude: bool = False,
                  triton: bool = False):
    """(cells, how) of the core at ``heads``: its own where timed (not with ``exclude``: the
    held-out check), else carried from the :data:`NEAREST` timed head counts nearest in
    log H by ``law``'s ratio (aic_attention.carried), each an attention shape of
    one KV head. On the Triton kernel (``triton``) the decode cells are carried as shapes of
    :func:`head_blocks` KV heads, those of H >= 2 heads from the nearest of H >= 2 only (1
    head runs another kernel: module docstring); the prefill cells as before."""
    from specbatch.simulator.cost.measured.aic_attention import carried

    if heads in grids and not exclude:
        return grids[heads], "shape"

    def nearest(skip_one: bool) -> list:
        return sorted((h for h in grids if h != heads and not (skip_one and h == 1)),
                      key=lambda h: (abs(np.log(h / heads)), h))[:NEAREST]

    def carry(sources: list, decode: bool) -> tuple:
        def shape(h: int) -> tuple:
            return h, head_blocks(h, triton and decode), WIDTH
        return carried([(shape(h), grids[h]) for h in sources], law, shape(heads), kv_bytes)

    others = nearest(False)
    if not others:
        raise SpecbatchError(f"MLA at {heads} heads: no timed head count to carry from")
    if not triton:
        return carry(others, True), f"transfer from {', '.join(map(str, others))} heads"
    decode_from = nearest(heads > 1) or others
    got = (carry(decode_from, True)[0], carry(others, False)[1])
    how = (f"decode transferred from {', '.join(map(str, decode_from))} heads (Triton MLA: the "
           f"latent KV read once per {BLOCK_H}-head block), prefill from "
           f"{', '.join(map(str, others))}")
    return got, how


#: The small ops (simulator.cost.measured.laws.SMALL_OPS) a module row's core already holds:
#: rotary (``DeepseekV2MLAAttention`` applies it inside the module). The latent RMSNorms
#: (q_a / kv_a) are in the core too, but the small-op laws price only the decoder layer's two
#: hidden-state norms, outside the module, so nothing of theirs is held twice.
MODULE_HOLDS = ("attn_rope",)


#: Decode kernels (the tables' ``kernel`` column) whose vLLM metadata builder declares
#: ``QueryLenSupport.VARLEN`` and a ``reorder_batch_threshold`` above 1, so a request of up to
#: that many query tokens runs in the decode launch beside one-token requests, whatever their
#: lengths (vllm/v1/attention/backends/mla/flashattn_mla.py ``FlashAttnMLAMetadataBuilder``:
#: VARLEN, threshold 512; MLACommonMetadataBuilder.build splits by
#: ``split_decodes_and_prefills(decode_threshold=reorder_batch_threshold)``). Not here:
#: FLASHMLA (flashmla.py ``FlashMLAMetadataBuilder``: UNIFORM, threshold 128: one decode
#: launch only when every request has the same length), FLASHINFER_MLA (UNIFORM, threshold 1,
#: raised to 1 + k under speculative decoding), TRITON_MLA (triton_mla.py keeps the common
#: builder: SINGLE_ONLY, threshold 1: a verification runs the prefill path) and A100's kernel
#: rows (Triton MLA).
VARLEN_DECODE = {"FLASH_ATTN_MLA": 512}


def mixed_mode(system: str, kv_dtype: str) -> tuple[tuple, str]:
    """(pack_grid's ``mixed``, how) of ``system``'s MLA backend at ``kv_dtype``
    (simulator.cost.tabulated.grid_attention).

    A VARLEN decode kernel (:data:`VARLEN_DECODE`) runs every request of q <= T query tokens
    (a verification of k + 1 <= T tokens, a short chunk) in its decode launch: (DECODE_PATH,
    T), T the builder's threshold, which the tables confirm (H100 / H200 bf16: the prefill
    table's prompts of 16-512 tokens were timed through FLASH_ATTN_MLA, 1024 and longer
    through FLASH_ATTN). Such a batch is priced as the decode cell of its requests at their
    mean context, D(n_d, c̄), plus ΔP(B_p, s_p²), the decode kernel's own measured extra for
    s_p query rows per request (those prefill cells ran through it), plus the FLOP-rate term
    of the extra query rows against the cached tokens, in one launch. Not assumed: the
    kernel's folding of q query tokens into q·H query rows per latent head (FlashMLA's
    ``get_mla_metadata(seq_lens, q_len · H, 1)``) read as the decode cell at q·H heads: on
    H100 / H200 bf16 the core of a prefill row timed through the decode kernel exceeds the
    decode cell at q·H heads by a median 18-21 % (p10-p90 2-30 %, 50 rows each, where q·H <=
    128 is timed); it misses the per-token work (the latent cache write, the norms).

    Every other backend: TWO_LAUNCHES (decode and prefill requests in two launches; a
    verification on a SINGLE_ONLY backend runs the prefill path, priced as before: the decode
    cells stand for its cached context, ΔP for the new tokens). A UNIFORM backend (FlashMLA,
    FlashInfer-MLA) runs a uniform verification as one decode launch, which TWO_LAUNCHES
    prices the same (no request stands beside it); a batch of unequal multi-token lengths is
    one launch in the sums either way (they cannot tell its lengths apart)."""
    p = load_curves(system).get("mla_prefill")
    kernels = decode_values(system, kv_dtype, "kernel")
    if len(kernels) == 1 and (kernel := kernels.pop()) in VARLEN_DECODE:
        timed = p[(p["kv_dtype"] == kv_dtype) & (p["kernel"] == kernel)]["prompt"]
        t = float(VARLEN_DECODE[kernel])
        return ((DECODE_PATH, t), f"{kernel}: queries of <= {int(t)} tokens in the decode "
                                  f"launch ({len(timed)} prefill rows of <= "
                                  f"{int(timed.max()) if len(timed) else 0} tokens timed "
                                  f"through it)")
    return (TWO_LAUNCHES,), "decode and prefill requests in two launches"


@functools.lru_cache(maxsize=32)
def core_holds(system: str, kv_dtype: str) -> tuple[str, ...]:
    """The small ops an MLA role on ``system`` at ``kv_dtype`` must not price again:
    :data:`MODULE_HOLDS` where its MLA rows time the whole module, () where they time the
    backend's kernel alone (A100: the small-op laws price rotary, as for every model)."""
    return MODULE_HOLDS if decode_values(system, kv_dtype, "scope") == {"module"} else ()


#: The rows' ``scope`` that times a CUDA-graph forward (traces.public.aiconfigurator: the
#: module tables, ``collect_mla_module.py`` through ``helper.benchmark_with_power``, graph
#: capture on). The other scope, "kernel" (vLLM 0.14 ``{generation,context}_mla_perf``, A100),
#: came from AIConfigurator's legacy ``collector/vllm/collect_mla.py`` (last at 5ef50c9b,
#: ``run_attention_torch``): three warm-up and six timed eager calls of ``impl.forward``
#: between two CUDA events, so a row is the larger of the host's launch time and the GPU's.
#: The host's ~0.3 ms floors every A100 row up to 0.5-2 ms of GPU work (1-128 heads, decode
#: and prefill alike), with isolated rows 2-7x above it (host jitter over six calls); vLLM
#: replays decode in a CUDA graph and pays none of it, and no row below the floor says what
#: the GPU took. Such rows price nothing (:func:`coverage`).
GRAPHED_SCOPE = "module"


@functools.lru_cache(maxsize=16)
def coverage(system: str) -> dict:
    """KV dtype -> the head counts whose decode and prefill rows, timed in a CUDA graph
    (:data:`GRAPHED_SCOPE`), both span a grid (what ``aic_covers`` asks; read from the
    bundled curves, no GEMM curve needed)."""
    from specbatch.simulator.cost.measured.aic_attention import cells, has_grid

    frames = load_curves(system)
    d, p = frames.get("mla_decode"), frames.get("mla_prefill")
    if d is None or p is None:
        return {}
    d, p = d[d["scope"] == GRAPHED_SCOPE], p[p["scope"] == GRAPHED_SCOPE]
    out = {}
    for kv in sorted(set(d["kv_dtype"]) & set(p["kv_dtype"])):
        dk, pk = d[d["kv_dtype"] == kv], p[p["kv_dtype"] == kv]
        heads = [int(h) for h in sorted(set(dk["heads"]) & set(pk["heads"]))
                 if has_grid(cells(dk[dk["heads"] == h], pk[pk["heads"] == h]))]
        if heads:
            out[str(kv)] = heads
    return out


def eager_mla(system: str, kv_dtype: str) -> bool:
    """Whether ``system``'s MLA rows at ``kv_dtype`` exist but were all timed eagerly (no
    :data:`GRAPHED_SCOPE` row): the reason :func:`coverage` leaves them out."""
    scopes = decode_values(system, kv_dtype, "scope")
    return bool(scopes) and GRAPHED_SCOPE not in scopes
