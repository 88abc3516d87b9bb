"""The host's share of a vLLM step: scheduling, input preparation, the proposer loop, n-gram.

A cost model prices GPU passes; vLLM's engine core also spends CPU time on every step, and a
speculative step spends it again on every draft pass. :class:`HostCost` adds these terms to a
model (roofline or calibrated), each naming the data it was fitted on (:data:`HOST_TERMS`):

- **Per step and per scheduled request** (scheduler + input preparation), T_host(n) = a + b·n
  with a = :data:`STEP_S`, b = :data:`REQUEST_S`: least squares of ``schedule_median +
  prepare_inputs_e2e_median`` over the 26 tp 1 rows (Llama-2-7B and phi-2, batches 8-128)
  of Vidur's A100 CPU-overhead profile (Sarathi-Serve, Vidur's vLLM v0 fork;
  traces/data/profiles/vidur_cpu/; :func:`fit_step_law`), MAPE 2.1 %. Sarathi's
  ``process_model_outputs`` (detokenisation) is left out: vLLM V1 runs it in the API server's
  process (``AsyncLLM``'s output handler), beside the engine core. Without async scheduling a
  step adds T_host(n) to its passes (the engine's ``overhead`` is a, the target pass carries
  b·n); with it (vLLM PRs 19970, 23569; for the drafters vLLM lets overlap, never the n-gram
  proposer's speculative steps: async_overhead.async_applies) the step takes max(T_gpu,
  T_host(n)) (:mod:`simulator.cost.features.async_overhead`'s rule, n-dependent host). The
  sampler is left to the inner model (the calibrated model's LLMServingSim rows measure it;
  the roofline's ``pass_latency`` holds it).
- **Per draft pass** (vllm/v1/spec_decode/eagle.py ``EagleProposer.propose``, whose loop
  draft_model.py's ``DraftModelProposer`` shares): each pass after the first issues, from
  Python, the input update (``.int()``, positions += 1, the max-length mask and ``where``,
  ``seq_lens`` += 1 and its CPU twin, two ``masked_fill_``, the slot mapping's //, gather,
  *, %, +), ``build_for_drafting``, three buffer copies, the model's piecewise CUDA graphs
  (L + 1 replays around L attention calls of two kernels each), the LM head, EAGLE-3's
  draft-to-target vocabulary scatter (3 ops) and the argmax: :func:`proposer_ops` ops.
  The host issues them asynchronously (no synchronisation inside the loop), so a pass takes
  ``max(GPU, host)``::

      t_pass = max(t_inner + k_small · g, N_ops · t_op)

  with k_small the loop's small kernels outside the graphs (:func:`proposer_kernels`),
  g = :data:`SMALL_KERNEL_S` the median 1-token time of Vidur's H100 elementwise ops
  (``add``, ``emb``; traces/data/profiles/vidur/compute.parquet), and t_op =
  :data:`OP_S` the host time of one Python-issued torch op: the eager floor fitted on this
  repo's H100 profiles (1.07 ms per Hugging Face decoder layer,
  simulator.cost.gpus.hardware) over an ASSUMED 41 torch ops per such layer (two RMSNorms
  of 8, q/k/v, rotary 10, two cache cats, SDPA, a copy, o, add, gate/up/SiLU/mul/down,
  add). The op counts are read off vLLM's code; t_op is not fitted on any vLLM
  measurement. A head's first pass (over the target's tokens) gets the same floor.
- **n-gram proposer** (vllm/v1/spec_decode/ngram_proposer.py ``NgramProposer.propose``:
  once per step, on the host, after the step's sampled tokens reach it, so never hidden by
  async scheduling, which vLLM refuses or turns off for this method:
  :func:`simulator.cost.features.async_overhead.async_applies`). A Python loop keeps the
  requests that sampled a token and are below ``max_model_len``; one ``@njit(parallel=True)``
  call (1 numba thread: below 8192 batch tokens by rule, and always since the thread cap
  ``min(1, cpu_count // 2)``) runs, per kept request, a KMP longest-prefix-suffix scan of
  the reversed context that never stops early (Θ(context) whatever the tokens); a second
  Python loop builds the drafts with ``i in valid_ngram_requests`` on a list (Σ_i i
  comparisons). Priced once per step on the target pass's sums (the head hook
  ``first_pass_time``), its later passes 0 s::

      t_ngram = c₀ + c₁·n + c₂·Σ(c_i + q_i) + c₃·n²

  c₀ = :data:`NGRAM_CALL_S`, c₁ = :data:`NGRAM_REQUEST_S`, c₂ = :data:`NGRAM_TOKEN_S`,
  c₃ = :data:`NGRAM_PAIR_S`: **measured on our numba twin** of those three stages
  (benchmarks/ngram_host_bench.py, which prints them: our own code of the same algorithm and
  complexity, its proposals equal to traces.capture.ngram.propose_ngram's) on this repo's
  CPU (``/proc/cpuinfo``: "AMD EPYC", 2.6 GHz, virtualised), 1 numba thread, k = 4,
  prompt_lookup_min = max = 5, on held-out stdlib code and prose tokenised by a byte-level
  BPE; least squares on relative error over 45 cells (n 1-256, context 128-32k tokens, each
  cell its least CPU time over two runs of 5 repeats: ``--refit``), MAPE 2.7 % (max 6.2 %)
  in sample, -7.6 to +3.2 % on held-out batches of mixed context lengths; random and
  repeated token streams within -10 / +4 % of text. **Not a measurement of vLLM itself**
  (nor of vLLM's host CPU); Σ counts a partial prefill's context, which vLLM skips. The
  thread cap is the stored version of ngram_proposer.py at vLLM commit adce4e9; an earlier
  one (016e8ed) ran the ``prange`` on up to ``cpu_count // 2 // tp`` threads for any batch,
  which would divide the c₂ term by up to that count on large batches.
- **Client side of TTFT** (API server, tokenisation, HTTP): :data:`CLIENT_TTFT_S`, the default
  of SimConfig's ``client_ttft_s`` (vLLM has no such knob), ASSUMED, not fitted: the bundled
  measured runs cannot fit it, their stamps being the engine core's (``queued_ts`` to
  ``first_token_ts``, recorded through an in-process AsyncLLM with pre-tokenised prompts).
  Not a step time: :func:`simulator.metrics.client_view` adds it to each request's first token
  and finish (TTFT and e2e as vLLM's serving benchmark times them from the client; TPOT
  unchanged); ``validate`` (a live run, ``--vllm``) replays with 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.simulator.cost.gpus.hardware import EAGER_LAYER_LATENCY
from specbatch.simulator.cost.interface import takes_logit_rows

#: Per engine step (s): the intercept of the Vidur A100 scheduler + input-preparation law.
STEP_S = 2.8665156e-4
#: Per scheduled request (s): that law's slope.
REQUEST_S = 2.126564e-5
#: Torch ops per Hugging Face eager Llama decoder layer (ASSUMED count, module docstring).
HF_OPS_PER_LAYER = 41
#: Host seconds of one Python-issued torch op: the eager floor over that count.
OP_S = EAGER_LAYER_LATENCY / HF_OPS_PER_LAYER
#: GPU seconds of one tiny kernel: median of Vidur's H100 tp 1 ``add`` and ``emb`` at 1 token.
SMALL_KERNEL_S = 2.0e-6
#: Ops of the proposer loop outside the model: input update 14, metadata build 1, copies 3.
LOOP_OPS = 18
#: Of those, the ones that launch a GPU kernel (the two CPU ``seq_lens`` ops and the
#: metadata build do not).
LOOP_KERNELS = 15
#: EAGLE-3's draft-to-target vocabulary scatter in ``compute_logits`` (ops and kernels).
D2T_OPS = 3
#: n-gram proposer per step, per kept request, per context token and per request pair
#: (n²): measured on our numba twin (benchmarks/ngram_host_bench.py; module docstring).
NGRAM_CALL_S = 1.012e-5
NGRAM_REQUEST_S = 1.306e-6
NGRAM_TOKEN_S = 1.309e-9
NGRAM_PAIR_S = 5.214e-9
#: Where the four n-gram constants come from (HOST_TERMS and the tests pin it).
NGRAM_SOURCE = ("measured on our numba twin of vLLM's NgramProposer "
                "(benchmarks/ngram_host_bench.py) on this repo's AMD EPYC CPU, 1 numba thread; "
                "not a measurement of vLLM itself")
#: Client side of TTFT and e2e: API server, tokenisation, HTTP on localhost (ASSUMED, stated;
#: SimConfig ``client_ttft_s``'s default).
CLIENT_TTFT_S = 2e-3
#: ``host`` knob choices: vLLM's terms (this module) or the preset's fixed step overhead.
HOSTS = ("vllm", "fixed")


def proposer_ops(layers: int, d2t: bool) -> int:
    """N_ops: Python-issued ops of one draft pass of ``layers`` decoder layers (module
    docstring): the loop's 18, L + 1 graph replays, 2 L attention kernels, the LM head and the
    argmax, and EAGLE-3's vocabulary scatter when ``d2t``."""
    return LOOP_OPS + (layers + 1) + 2 * layers + 2 + (D2T_OPS if d2t else 0)


def proposer_kernels(d2t: bool) -> int:
    """k_small: GPU kernels of one draft pass that the inner model does not price (the loop's
    index and copy kernels, the argmax, EAGLE-3's scatter)."""
    return LOOP_KERNELS + 1 + (D2T_OPS if d2t else 0)


def draft_pass_floor(inner_s: float, layers: int, d2t: bool) -> float:
    """t_pass = max(t_inner + k_small · g, N_ops · t_op) of one draft pass (0 stays 0)."""
    if inner_s <= 0.0:
        return inner_s
    return max(inner_s + proposer_kernels(d2t) * SMALL_KERNEL_S,
               proposer_ops(layers, d2t) * OP_S)


def ngram_seconds(n: int, tokens: float) -> float:
    """CPU seconds of vLLM's n-gram proposer over n requests holding ``tokens`` = Σ context:
    c₀ + c₁ n + c₂ Σ + c₃ n² (module docstring)."""
    if n <= 0:
        return 0.0
    return NGRAM_CALL_S + n * NGRAM_REQUEST_S + tokens * NGRAM_TOKEN_S + n * n * NGRAM_PAIR_S


def fit_step_law(path=None) -> tuple[float, float, float]:
    """(a, b, MAPE) of schedule + prepare_inputs_e2e = a + b·n (seconds) over the tp 1 rows of
    Vidur's A100 CPU-overhead profile (the bundled file unless ``path``)."""
    import pandas as pd

    if path is None:
        from importlib.resources import files

        path = files("specbatch.traces") / "data" / "profiles" / "vidur_cpu" / \
            "a100_cpu_overheads.csv"
    d = pd.read_csv(path)
    t = d[d["tensor_parallel_degree"] == 1]
    y = (t["schedule_median"] + t["prepare_inputs_e2e_median"]).to_numpy() * 1e-3  # [rows]
    a = np.stack([np.ones(len(t)), t["batch_size"].to_numpy(float)], axis=1)  # [rows, 2]
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    mape = float(np.mean(np.abs(a @ coef / y - 1.0)))
    return float(coef[0]), float(coef[1]), mape


#: Each term: value, unit, source, and whether it was fitted on measured data.
HOST_TERMS = {
    "step_s": {"value": STEP_S, "per": "engine step", "fitted": True,
               "source": "Vidur A100 cpu_overheads.csv (Sarathi-Serve, vLLM v0 fork), tp 1, "
                         "schedule + prepare_inputs_e2e medians, batches 8-128: intercept"},
    "request_s": {"value": REQUEST_S, "per": "scheduled request", "fitted": True,
                  "source": "the same law's slope (MAPE 2.1 % over its 26 rows)"},
    "draft_op_s": {"value": OP_S, "per": "Python-issued op of the proposer loop",
                   "fitted": False,
                   "source": "eager floor 1.07 ms per HF decoder layer (fitted on "
                             "traces/data/profiles/h100-*.parquet) / 41 ops per layer "
                             "(assumed); op counts from vLLM eagle.py EagleProposer.propose"},
    "draft_kernel_s": {"value": SMALL_KERNEL_S, "per": "small kernel of the proposer loop",
                       "fitted": True,
                       "source": "median 1-token add / emb time, Vidur H100 compute tables"},
    "ngram_call_s": {"value": NGRAM_CALL_S, "per": "step", "fitted": True,
                     "source": NGRAM_SOURCE + ": intercept (thread setting, one numba call)"},
    "ngram_request_s": {"value": NGRAM_REQUEST_S, "per": "request", "fitted": True,
                        "source": NGRAM_SOURCE + ": per request (Python loops, list unboxing)"},
    "ngram_token_s": {"value": NGRAM_TOKEN_S, "per": "context token", "fitted": True,
                      "source": NGRAM_SOURCE + ": per context token (the KMP scan)"},
    "ngram_pair_s": {"value": NGRAM_PAIR_S, "per": "request pair (n²)", "fitted": True,
                     "source": NGRAM_SOURCE + ": per n² (`i in valid_ngram_requests` on a list)"},
    "client_ttft_s": {"value": CLIENT_TTFT_S, "per": "request (TTFT and e2e, not TPOT)",
                      "fitted": False,
                      "source": "assumed: API server, tokenisation and HTTP (no vLLM knob); "
                                "the default of the client_ttft_s knob, added to each "
                                "simulated request's first token and finish; not fitted (the "
                                "bundled vLLM runs' stamps are engine-side: replayed with 0)"},
}


@dataclass(frozen=True)
class HostCost:
    """``inner`` with vLLM's host terms (module docstring). ``overlap``: async scheduling
    (T_host hidden under the target pass) as vLLM applies it (simulator.run.async_overlaps);
    ``draft_layers``: the drafter's decoder layers (0: no model drafter, no pass floor);
    ``d2t``: EAGLE-3's vocabulary scatter; ``ngram``: the drafter is vLLM's n-gram proposer
    (priced once per step through ``first_pass_time``)."""

    inner: Any  # a CostModel
    overlap: bool = False
    draft_layers: int = 0
    d2t: bool = False
    ngram: bool = False

    @property
    def overhead(self) -> float:
        """The engine's per-step addend: a without async scheduling, else 0."""
        return 0.0 if self.overlap else STEP_S

    def host_seconds(self, n: int) -> float:
        """T_host(n) = a + b·n of a step scheduling n requests."""
        return STEP_S + REQUEST_S * n

    def target_seconds(self, t: float, n: int) -> float:
        """A target pass of ``t`` GPU seconds over n requests with the host share."""
        if t <= 0.0 or n <= 0:
            return t
        if self.overlap:
            return max(t, self.host_seconds(n))
        return t + REQUEST_S * n

    def _draft(self, t: float) -> float:
        if self.ngram:
            return 0.0
        return draft_pass_floor(t, self.draft_layers, self.d2t) if self.draft_layers else t

    @property
    def logit_rows(self) -> bool:
        """Whether the engine may name a pass's logit rows: as the inner model
        (simulator.cost.interface.takes_logit_rows); ``rows`` passes through."""
        return takes_logit_rows(self.inner)

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **kw) -> float:
        """Seconds of one pass with its host share; ``query``, ``kv`` # [n]; ``kw`` (the
        logit ``rows``) reach the inner model."""
        t = float(self.inner.step_time(role, query, kv, **kw))
        n = int(np.size(query))
        return self.target_seconds(t, n) if role == "target" else self._draft(t)

    def __getattr__(self, name: str) -> Any:
        """``time_from_sums``, ``first_pass_time`` and ``first_pass_step`` with the host terms;
        everything else is the inner model's."""
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        if self.ngram and name in ("first_pass_time", "first_pass_step"):
            return getattr(self, "_ngram_" + name)
        attr = getattr(self.inner, name)
        if name == "time_from_sums":
            def time_from_sums(role, n, sq, skv, sqkv, sqq, **kw):
                t = float(attr(role, n, sq, skv, sqkv, sqq, **kw))
                return self.target_seconds(t, int(n)) if role == "target" else self._draft(t)
            return time_from_sums
        if name in ("first_pass_time", "first_pass_step"):
            def first(*args):
                return self._draft(float(attr(*args)))
            return first
        return attr

    def _ngram_first_pass_time(self, n, sq, skv, sqkv, sqq) -> float:
        """The n-gram proposer's CPU seconds over the target pass's n requests and Σ(c + q)."""
        return ngram_seconds(int(n), float(skv) + float(sq))

    def _ngram_first_pass_step(self, query: np.ndarray, kv: np.ndarray) -> float:
        return ngram_seconds(int(np.size(query)), float(np.sum(query) + np.sum(kv)))

    def sources(self) -> dict:
        """The host terms as ``cost show --json`` reports them."""
        keep = ["step_s", "request_s", "client_ttft_s"]
        if self.draft_layers:
            keep += ["draft_op_s", "draft_kernel_s"]
        if self.ngram:
            keep += ["ngram_call_s", "ngram_request_s", "ngram_token_s", "ngram_pair_s"]
        out = {k: HOST_TERMS[k] for k in keep}
        out["combine"] = ("max(target pass, a + b n) (async scheduling)" if self.overlap
                          else "passes + a + b n")
        if self.draft_layers:
            out["draft_pass"] = {"ops": proposer_ops(self.draft_layers, self.d2t),
                                 "small_kernels": proposer_kernels(self.d2t),
                                 "combine": "max(inner + k g, ops t_op)"}
        return out


def with_host(model: Any, draft: str, overlap: bool) -> HostCost:
    """``model`` with vLLM's host terms for ``draft`` (a model's registry name, "ngram", or an
    EAGLE / EAGLE-3 / MTP head already inside ``model``); ``overlap``: async scheduling."""
    from specbatch.simulator.defaults import FREE_DRAFTS
    from specbatch.traces.models.shapes import get_shape

    name = str(draft).lower()
    if name in FREE_DRAFTS:
        return HostCost(model, overlap=overlap, ngram=True)
    head = getattr(model, "head", None)
    if head is not None and getattr(model, "first_pass_time", None) is not None:
        target_vocab = getattr(getattr(model, "target", None), "vocab", head.lm_vocab)
        d2t = head.method == "eagle3" and head.lm_vocab < target_vocab
        return HostCost(model, overlap=overlap, draft_layers=int(head.layer.layers), d2t=d2t)
    return HostCost(model, overlap=overlap, draft_layers=int(get_shape(draft).layers))
