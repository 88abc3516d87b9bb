"""The calibrated cost on the GPUs of the measured vLLM runs (RTX 4090, RTX PRO 6000), from
LLMServingSim's per-layer kernel profiles of those GPUs (traces.public.llmservingsim_profiles).

One forward pass of a role (L layers, M of them MoE, tp GPUs, n requests, Q = Σq query
tokens, c the cached tokens) is priced, as :mod:`simulator.cost.measured.calibrated` does elsewhere,
as::

    t = layers(Q) + L · attention(n, Σq, Σc, Σqc, Σq²) + allreduce(Q) + lm_head(Q, n) + launch

- ``layers`` (a *cell*: the profile of this GPU, tp and per-layer shape): emb(Q) +
  final_norm(Q) + L · [2 · norm + qkv + qk_norm + rotary + o + gate_up + act + down](Q), each
  module's measured time interpolated linearly in Q between measured token counts (1 ...
  2048), made non-decreasing (running maximum); on a MoE layer the MLP is the measured MoE
  block at (Q, E_touched(Q)) (moe.csv, linear in both; E_touched as the roofline: uniform
  routing or ``routing_skew``'s Zipf law). The block is the one-GPU profile holding every
  expert; under expert parallelism (simulator.cost.features.expert_parallel) it is read at the
  rank's pairs and touched local experts, and ``allreduce`` adds the dispatch/combine traffic.
- ``attention``: L · one layer's :class:`~simulator.cost.measured.lss_attention.AttentionLaw`,
  fitted to the GPU's measured attention table, in two regimes as vLLM's FlashAttention
  backend runs them (:mod:`simulator.cost.measured.lss_attention`).
- ``allreduce`` (tp > 1): 2 L ring all-reduces of b·h·Q bytes over the PCIe link the anchor
  configured for these runs (bench/examples/RTXPRO6000/Qwen3-32B/config.json: ``link_bw``
  16 GB/s, ``link_latency`` 20 µs; a configuration, not a measurement — no public all-reduce
  measurement of these GPUs is known), 2(tp−1) steps of λ + S/(tp·B).
- ``lm_head``: the measured LogitsProcessor at Q rows (per_sequence.csv, linear in rows up to
  its last measured count, then 2 h V / tp FLOPs per further row at the preset's fitted GEMM
  efficiency: logits at every query position, the package's convention), plus the measured
  sampler at n sequences.
- ``launch``: the execution preset's floors, as :mod:`simulator.cost.measured.calibrated_role`
  (the profiles ran eager and time kernels, not launch gaps).

A dense role whose (GPU, tp, shape) has no bundled cell is priced from the GPU's nearest cell
(:mod:`simulator.cost.measured.transfer`); a MoE or MLA role without its own cell, or a quantised
draft, is refused with a one-line error.

A pass's attention is evaluated by simulator.cost.tabulated.regime_attention on the law packed
over the role's layers (:attr:`LssPricer.packed`; the same bits as :meth:`AttentionLaw.seconds`'s
``x @ c`` where numpy's BLAS fuses its dot product, on any CPU), the function the compiled
vllm-v1 loop compiles; simulator.cost.measured.lss_table gives a role's PassTable.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.analytic.all2all import dispatch_seconds
from specbatch.simulator.cost.analytic.window import windowed_sums
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.lss_attention import (
    DTYPE_BYTES,
    AttentionLaw,
    attention_check,
    fitted_attention,
)
from specbatch.simulator.cost.measured.transfer import (
    nearest_profile,
    transfer_curves,
)
from specbatch.simulator.cost.tabulated import regime_attention
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import get_shape
from specbatch.traces.public.llmservingsim_profiles import bundled_profiles, read_profile

#: The anchor's configured PCIe link for its tp 2 run: (bytes/s, seconds per step).
PCIE_LINK = (16e9, 20e-6)
#: Modules of one dense decoder layer (a name absent from a profile is skipped) and their count.
LAYER_MODULES = {"layernorm": 2, "qkv_proj": 1, "qk_norm": 1, "rotary_emb": 1, "o_proj": 1,
                 "gate_up_proj": 1, "act_fn": 1, "down_proj": 1}
MLP_MODULES = ("gate_up_proj", "act_fn", "down_proj")
PASS_MODULES = ("embedding", "final_layernorm")


def same_layer(a: ModelShape, b: ModelShape) -> bool:
    """Whether two shapes have the same decoder layer (the cell's key; layers may differ)."""
    keys = ("hidden", "heads", "kv_heads", "head_dim", "vocab", "experts", "top_k",
            "expert_intermediate", "shared_intermediate", "is_mla")
    dense = not a.is_moe or a.moe_layers < a.layers
    return (all(getattr(a, k) == getattr(b, k) for k in keys)
            and (not dense or a.intermediate == b.intermediate))


def find_profile(gpu: str, shape: ModelShape, tp: int):
    """The bundled ProfileSet pricing ``shape`` on ``tp`` ``gpu`` GPUs, or None."""
    for (g, _, t), ps in bundled_profiles().items():
        if g == gpu and t == tp and "dense" in ps.files and same_layer(
                get_shape(str(ps.config)), shape):
            return ps
    return None


def curve(rows, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(grid [G], seconds [G]) of one module's rows, non-decreasing (running maximum)."""
    grid = rows[key].to_numpy(dtype=np.float64)
    return grid, np.maximum.accumulate(rows["time_us"].to_numpy(dtype=np.float64) * 1e-6)


def interp(c: tuple[np.ndarray, np.ndarray], x: float) -> float:
    """Linear in x, clamped below the grid, extrapolated from the top two points above."""
    grid, secs = c
    if x <= grid[-1] or len(grid) < 2:
        return float(np.interp(x, grid, secs))
    slope = (secs[-1] - secs[-2]) / (grid[-1] - grid[-2])
    return float(secs[-1] + slope * (x - grid[-1]))


@dataclass
class LssPricer:
    """One role's pass on an LLMServingSim-profiled GPU (module docstring)."""

    shape: ModelShape
    tp: int
    hw: object  # simulator.cost.gpus.hardware.Hardware
    profile: object  # traces.public.llmservingsim_profiles.ProfileSet
    law: AttentionLaw
    launch: tuple[float, float]  # (fixed s, host floor s)
    consts: object  # the roofline's PassConstants (experts touched)
    memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        dense = read_profile(self.profile.files["dense"], "dense")
        self.modules = {name: curve(rows, "tokens") for name, rows in dense.groupby("layer")}
        seq = read_profile(self.profile.files["per_sequence"], "per_sequence")
        self.per_seq = {name: curve(rows, "sequences") for name, rows in seq.groupby("layer")}
        src = get_shape(str(self.profile.config))
        self.transferred = not (same_layer(src, self.shape) and self.profile.tp == self.tp)
        if self.transferred:  # a neighbour's cell (simulator.cost.measured.transfer)
            self.modules, self.per_seq = transfer_curves(self.modules, self.per_seq, src,
                                                         self.profile.tp, self.shape, self.tp,
                                                         self.hw)
        self.moe = None
        if self.shape.is_moe:
            if "moe" not in self.profile.files:
                raise SpecbatchError(f"cost 'calibrated': no MoE block profile of "
                                     f"{self.shape.name} on {self.hw.name}")
            moe = read_profile(self.profile.files["moe"], "moe")
            self.moe = {int(e): curve(rows, "tokens")
                        for e, rows in moe.groupby("activated_experts")}
        #: the attention law packed over all layers and over one (sliding windows' share)
        self.packed = self.law.packed(self.shape, self.tp, self.shape.layers)
        self.packed_one = self.law.packed(self.shape, self.tp, 1)

    def moe_block(self, q: float) -> float:
        """The MoE block at (Q, E_touched(Q)): linear in tokens, then in activated experts;
        under expert parallelism at the rank's pairs (consts.moe_tokens: dp · Q / ep_size
        tokens' worth) and its touched local experts (simulator.cost.features.expert_parallel)."""
        return self.block_at(self.consts.moe_tokens(q), self.consts.experts_touched(q))

    def block_at(self, tokens: float, touched: float) -> float:
        """The measured MoE block at ``tokens`` tokens' pairs and ``touched`` experts."""
        es = sorted(self.moe)
        vals = [interp(self.moe[e], tokens) for e in es]
        return float(np.interp(touched, es, vals))

    def layers(self, q: float) -> float:
        s = self.shape
        moe_layers = s.moe_layers if s.is_moe else 0
        block, mlp = 0.0, 0.0
        for name, count in LAYER_MODULES.items():
            if name in self.modules:
                t = count * interp(self.modules[name], q)
                block += t
                mlp += t if name in MLP_MODULES else 0.0
        total = s.layers * block
        if moe_layers:
            total += moe_layers * (self.moe_block(q) - mlp)
        return total + sum(interp(self.modules[m], q) for m in PASS_MODULES if m in self.modules)

    def head(self, q: float, n: float) -> float:
        """The LM head at ``q`` logit rows and the sampler at ``n`` sequences."""
        return self.logits(q) + self.sampler_at(n)

    def logits(self, q: float) -> float:
        """The measured LogitsProcessor at ``q`` rows (clamped below its first row), past its
        last row the preset's fitted GEMM rate (module docstring)."""
        grid, secs = self.per_seq["lm_head"]
        lm = float(np.interp(q, grid, secs))
        if q > grid[-1]:
            per_row = 2 * self.shape.hidden * self.shape.vocab / self.tp
            lm += (q - grid[-1]) * per_row / (self.hw.peak_flops * self.hw.compute_eff)
        return lm

    def sampler_at(self, n: float) -> float:
        """The measured sampler at max(n, 1) sequences (0 where the profile has none)."""
        sampler = self.per_seq.get("sampler")
        return interp(sampler, max(n, 1.0)) if sampler is not None else 0.0

    def allreduce(self, q: float) -> float:
        if self.consts.ep_size > 1:  # + the experts' dispatch/combine (expert_parallel)
            return self.tp_allreduce(q) + self.ep_dispatch(q)
        return self.tp_allreduce(q)

    def ep_dispatch(self, q: float, total: float | None = None) -> float:
        """t_a2a of the M MoE layers over the anchor's PCIe link for ``total`` tokens of all
        DP ranks (None: the other ranks carry Q each too;
        simulator.cost.features.expert_parallel)."""
        s, dp = self.shape, self.consts.ep_dp
        return s.moe_layers * dispatch_seconds(dp * q if total is None else total, s.hidden,
                                               s.experts, dp, *PCIE_LINK, DTYPE_BYTES)

    def tp_allreduce(self, q: float) -> float:
        if self.tp == 1:
            return 0.0
        bw, lat = PCIE_LINK
        nbytes = DTYPE_BYTES * self.shape.hidden * q
        one = 2 * (self.tp - 1) * (lat + nbytes / (self.tp * bw))
        return 2 * self.shape.layers * one

    def parts(self, n: float, sq: float, skv: float, sqkv: float, sqq: float,
              window: tuple[float, float] | None = None, rows: float | None = None) -> dict:
        """Seconds per part of one pass (they sum to :meth:`total`); the LM head at ``rows``
        logit rows (None: Σq; simulator.cost.analytic.roofline's docstring)."""
        names = ("layers", "attention", "allreduce", "lm_head", "launch")
        if sq <= 0.0:
            return dict.fromkeys(names, 0.0)
        cached = self.memo.get(sq)
        if cached is None:
            cached = (self.layers(sq), self.allreduce(sq))
            if len(self.memo) < 65536:
                self.memo[sq] = cached
        layers, comm = cached
        n = max(float(n), 1.0)
        attn = self.attention(n, sq, skv, sqkv, sqq, window)
        head = self.head(sq if rows is None else min(float(rows), sq), n)
        fixed, floor = self.launch
        launch = fixed + max(0.0, floor - (layers + attn + comm + head))
        return dict(zip(names, (layers, attn, comm, head, launch)))

    def attention(self, n: float, sq: float, skv: float, sqkv: float, sqq: float,
                  window: tuple[float, float] | None) -> float:
        """L layers of the fitted per-layer attention law at n ≥ 1 (simulator.cost.tabulated.
        regime_attention on :attr:`packed`: the compiled loop's source too); with
        sliding-window layers, L − L_s at the full sums and L_s at the sums a sliding layer
        presents (simulator.cost.analytic.window .windowed_sums: the law was fitted on full
        attention and is applied per layer)."""
        s = self.shape
        if not s.is_windowed:
            return regime_attention(self.packed, n, sq, skv, sqkv, sqq)
        require(window is not None, f"model {s.name}: has sliding-window layers, so a pass is "
                                    "priced with its window sums (K^W, P^W)")
        full = (s.layers - s.sliding_layers) * regime_attention(self.packed_one, n, sq, skv,
                                                                sqkv, sqq)
        w_sq, w_skv, w_sqkv, w_sqq = windowed_sums(sq, skv, sqkv, sqq, window)
        return full + s.sliding_layers * regime_attention(self.packed_one, n, w_sq, w_skv,
                                                          w_sqkv, w_sqq)

    def total(self, sq: float, skv: float, sqkv: float, sqq: float, n: float = 0.0,
              window: tuple[float, float] | None = None, rows: float | None = None) -> float:
        p = self.parts(n, sq, skv, sqkv, sqq, window, rows)
        return (((p["layers"] + p["attention"]) + p["allreduce"]) + p["lm_head"]) + p["launch"]

    def split(self, sq: float, skv: float, sqkv: float, sqq: float, n: float = 0.0,
              window: tuple[float, float] | None = None, rows: float | None = None) -> dict:
        return self.parts(n, sq, skv, sqkv, sqq, window, rows)

    def cell_check(self) -> dict:
        """Error of the cell's interpolation in tokens: the layers(Q) sum at each interior
        measured token count left out and interpolated from its two neighbours."""
        grid = next(iter(self.modules.values()))[0]
        secs = np.array([self.layers(float(q)) for q in grid])  # [G]
        pred = secs[:-2] + (secs[2:] - secs[:-2]) * (grid[1:-1] - grid[:-2]) / (
            grid[2:] - grid[:-2])
        err = pred / secs[1:-1] - 1  # [G - 2]
        return {"mape": round(float(np.abs(err).mean()), 4),
                "mean_signed": round(float(err.mean()), 4), "rows": int(err.size),
                "check": "each token count left out, interpolated from its neighbours"}

    def source(self) -> dict:
        """The source record of this role (simulator.cost.measured.calibrated's ``sources``)."""
        ps = self.profile
        cell = f"llmservingsim {ps.gpu} {ps.model} tp {ps.tp}"
        layers = {"source": "public per-layer profile cell"
                  + (", MoE block at E_touched(Q)" if self.moe else ""),
                  "cell": cell, "validated": self.cell_check()}
        if self.transferred:
            cell += f" transferred to {self.shape.name} tp {self.tp}"
            layers = {"source": "a profiled neighbour's cell scaled by roofline and byte "
                                "ratios (simulator.cost.measured.transfer)", "cell": cell,
                      "validated": transfer_check(ps.gpu) or None}
        comm = ({"source": "none (tp 1)"} if self.tp == 1 else
                {"source": f"ring all-reduce over the anchor's configured PCIe link "
                           f"({PCIE_LINK[0] / 1e9:g} GB/s, {PCIE_LINK[1] * 1e6:g} µs; not "
                           "measured)"})
        checks = attention_check(ps.gpu)
        held = {k: v for k, v in checks.items() if v["held_out"]}
        return {"model": self.shape.name, "tp": self.tp,
                "layers": layers,
                "attention": {"source": f"attention law fitted on {self.law.fitted_on}"
                                        + (f", {self.shape.sliding_layers} of "
                                           f"{self.shape.layers} layers at a "
                                           f"{self.shape.sliding_window}-token window"
                                           if self.shape.is_windowed else ""),
                              "validated": held or checks},
                "allreduce": comm,
                "lm_head": {"source": "measured LogitsProcessor rows + sampler at n"},
                "summary": cell}


def lss_pricer(shape: ModelShape, tp: int, hw, launch: tuple[float, float], consts,
               weight_bits: int, full_bits: int) -> LssPricer:
    """The :class:`LssPricer` of ``shape`` on ``tp`` ``hw`` GPUs, or the one-line refusal."""
    if weight_bits < full_bits:
        raise SpecbatchError(f"cost 'calibrated': draft_weight_bits {weight_bits} on "
                             f"{hw.name}: its per-layer profiles are bf16; expected 16")
    ps = find_profile(hw.name, shape, int(tp))
    if ps is None and not (shape.is_moe or shape.is_mla):
        ps = nearest_profile(hw.name, shape)
    if ps is None:
        have = ", ".join(f"{m} tp {t}" for g, m, t in bundled_profiles() if g == hw.name)
        raise SpecbatchError(f"cost 'calibrated': no per-layer profile of {shape.name} at tp "
                             f"{tp} on {hw.name} (a MoE or MLA shape needs its own); "
                             f"bundled: {have}")
    return LssPricer(shape, int(tp), hw, ps, fitted_attention(hw.name), launch, consts)


def lss_gpu(gpu: str) -> bool:
    """Whether the bundled LLMServingSim profiles price ``gpu`` (else the Vidur-based path)."""
    return any(g == gpu for g, _, _ in bundled_profiles())


@functools.lru_cache(maxsize=4)
def transfer_check(gpu: str) -> dict:
    """Per other dense cell of ``gpu``: layers(Q) priced from its nearest neighbour against
    its own measured modules, at every measured token count (MAPE, mean signed error)."""
    out = {}
    for (g, model, tp), ps in bundled_profiles().items():
        if g != gpu or "moe" in ps.files:
            continue
        shape = get_shape(str(ps.config))
        src = nearest_profile(gpu, shape, exclude=model)
        if src is None:
            continue
        hw, law = get_hardware(gpu), fitted_attention(gpu)
        own = LssPricer(shape, tp, hw, ps, law, (0.0, 0.0), None)
        moved = LssPricer(shape, tp, hw, src, law, (0.0, 0.0), None)
        grid = next(iter(own.modules.values()))[0]
        want = np.array([own.layers(float(q)) for q in grid])  # [G]
        got = np.array([moved.layers(float(q)) for q in grid])  # [G]
        err = got / want - 1
        out[f"{model}|tp{tp}"] = {"from": f"{src.model} tp {src.tp}",
                                  "mape": round(float(np.abs(err).mean()), 4),
                                  "mean_signed": round(float(err.mean()), 4),
                                  "rows": int(err.size)}
    return out
