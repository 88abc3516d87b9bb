"""The catalogue of engine samplers, correct and broken, that ``specbatch conform`` must judge
right (``specbatch conform catalogue``; docs/prove.md shows the table).

Each row is a built-in sampler of :mod:`specbatch.theory.conform.samplers`, re-typed from the
engine's published code or issue (never copied), with the file and function or issue it comes
from, what it should be (``lossless``, ``lossy by design``, ``broken``) and, for a broken or
lossy one, the deviation conform names. :func:`draws_needed` finds the smallest sample size on
:data:`LADDER` at which conform catches a row for every one of ``seeds`` seeds: the number of
draws per pair an engine developer needs to see that bug at the chosen false-alarm rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbatch.theory.conform.check import conform
from specbatch.theory.conform.samplers import load_sampler

#: Samples per pair tried, in order, by :func:`draws_needed`.
LADDER = (10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)


@dataclass(frozen=True)
class SamplerEntry:
    """One engine sampler: built-in name, engine, source, expectation, what goes wrong."""

    name: str
    engine: str
    source: str
    expected: str  # "lossless", "lossy by design" or "broken"
    deviation: str  # the violation conform reports ("" for a lossless one)
    reproduces: str = ""  # 2026 rows: "engine line" or "symptom" (bugs2026's module doc)
    serve: str = ""  # 2026 rows: the `specbatch live serve` flags that serve it

    @property
    def should_pass(self) -> bool:
        return self.expected == "lossless"


CATALOGUE = (
    SamplerEntry("vllm-standard", "vLLM MRV2", "vllm/v1/worker/gpu/spec_decode/"
        "rejection_sampler_utils.py::_rejection_kernel, _resample_kernel", "lossless", ""),
    SamplerEntry("vllm-v1", "vLLM V1", "vllm/v1/sample/rejection_sampler.py::"
        "rejection_random_sample_kernel, sample_recovered_tokens (ragged, cu_num_draft_tokens)",
        "lossless", ""),
    SamplerEntry("vllm-v1-ngram", "vLLM V1", "same, draft_probs None (n-gram drafter: greedy "
                                             "drafts)",
        "lossless", ""),
    SamplerEntry("vllm-block", "vLLM MRV2", "rejection_sampler_utils.py::"
        "_compute_cumulative_log_p_kernel, _compute_local_residual_mass_kernel (PR #46781, "
        "block verification)", "lossless", ""),
    SamplerEntry("vllm-v1-greedy", "vLLM V1", "vllm/v1/sample/rejection_sampler.py::"
        "rejection_greedy_sample_kernel (temperature 0, ragged)", "lossless", ""),
    SamplerEntry("sglang-chain", "SGLang", "sgl-kernel csrc/speculative/speculative_sampling.cuh::"
        "TreeSpeculativeSamplingTargetOnly on a chain, thresholds 1", "lossless", ""),
    SamplerEntry("sglang-single-0.5", "SGLang", "same, speculative_accept_threshold_single = 0.5 "
        "(server_args.py)", "lossy by design",
        "accepts every draft with Mb(x) >= 0.5: the law of the first m tokens differs"),
    SamplerEntry("sglang-acc-0.5", "SGLang", "same, speculative_accept_threshold_acc = 0.5 "
        "(server_args.py)", "lossy by design",
        "accepts with probability min(1, Mb(x)/0.5): the law of the first m tokens differs"),
    SamplerEntry("vllm-synthetic", "vLLM MRV2", "rejection_sample_method = synthetic "
        "(vllm/v1/spec_decode/utils.py::unconditional_to_conditional_rates)", "lossy by design",
        "fixed acceptance rates: the law differs (its exact TV is printed)"),
    SamplerEntry("ascend-block-unfixed", "vllm-ascend", "issue #7807, fixed by PR #7808 "
        "(sample/rejection_sampler.py::rejection_random_sample_block_verify_pytorch)",
        "broken", "compares Π η with Π min(1, r) and reuses TV's residual: the joint law "
        "differs and E[τ] can exceed LP B"),
    SamplerEntry("ragged-misaligned", "(bug class)", "arXiv 2510.22876: request b read at "
                                                     "b·max_spec_len "
        "instead of cu_num_draft_tokens[b-1] in a ragged batch", "broken",
        "accepted tokens differ from the draft; the law differs"),
    SamplerEntry("greedy-tie-accepts", "(bug class)", "greedy ≠ non-speculative greedy (vLLM "
                                                      "#41758, "
        "mlx-lm #1423): a draft tying the target maximum accepted instead of x == argmax",
        "broken", "output differs from non-speculative greedy decoding token for token"),
    *(SamplerEntry(name, engine, source, expected, deviation, reproduces, serve)
      for name, engine, source, expected, deviation, reproduces, serve in (
        ("bug-1cat-656", "1Cat-vLLM", "issue #656 (probabilistic drafts, max_num_seqs > 2, "
         "T > 0)", "broken", "draft laws read one request off above two rows: the law of "
         "the first m tokens differs", "symptom", "--sampler bug-1cat-656"),
        ("bug-ascend-7839", "vllm-ascend", "PR #7603/#7839 (block verify with draft_probs "
         "None: q = 1 in the cumulative product, pre-#7808 rule)", "broken",
         "the law of the first m tokens differs", "engine line",
         "--sampler bug-ascend-7839 --draft-sample greedy"),
        ("bug-ascend-15673", "vllm-ascend", "PR #15673 (\"block\" silently run token-wise "
         "on NPU)", "lossless", "", "engine line", "--verify block --sampler "
         "bug-ascend-15673"),
        ("bug-vllm-32852", "vLLM/vllm-ascend", "vLLM PR #32852 (rejection_sample takes "
         "logits), vllm-ascend PR #6685 (a caller still passing probabilities)", "broken",
         "the target law becomes softmax(Mb): the law of the first m tokens differs",
         "engine line", "--sampler bug-vllm-32852"),
        ("bug-vllm-27077", "vLLM V1", "PR #27077 (greedy T = 0 vs the sentinel -1: division "
         "by zero in the rejection sampler)", "broken", "greedy output differs from "
         "non-speculative greedy decoding", "symptom", "--sampler bug-vllm-27077"),
        ("bug-dflash-74", "z-lab/dflash", "issue #74 (draft ignores temperature; equality "
         "matching)", "lossless", "", "engine line",
         "--sampler bug-dflash-74 --draft-sample greedy"),
        ("bug-mlx-swift-459", "mlx-swift-lm", "PR #459 (equality matching of sampled drafts "
         "at T > 0)", "lossless", "", "engine line", "--sampler bug-mlx-swift-459"),
        ("bug-openvino-4190", "openvino.genai", "issue #4190 (rejection handled one "
         "iteration late)", "broken", "the correction is dropped and the next row's token "
         "kept: the law of the first m tokens differs", "symptom",
         "--sampler bug-openvino-4190"),
      )),
)


@dataclass(frozen=True)
class RowResult:
    """A row judged at one size: caught for how many seeds; the draws needed (None: not
    caught on the ladder, or a lossless row)."""

    row: SamplerEntry
    samples: int
    caught: int
    seeds: int
    draws_needed: int | None

    @property
    def correct(self) -> bool:
        """The row is judged as it should be at ``samples`` for every seed."""
        return self.caught == 0 if self.row.should_pass else self.caught == self.seeds


def _caught(name: str, samples: int, seed: int, alpha: float, kinds) -> bool:
    return conform(load_sampler(name), samples=samples, seed=seed, alpha=alpha,
                   kinds=kinds).lossy


def judge_row(row: SamplerEntry, samples: int, seeds: int, alpha: float, kinds=None) -> int:
    """How many of seeds 0..seeds-1 flag the row at ``samples`` per pair."""
    return sum(_caught(row.name, samples, s, alpha, kinds) for s in range(seeds))


def draws_needed(row: SamplerEntry, seeds: int, alpha: float, kinds=None,
                 ladder: tuple = LADDER) -> int | None:
    """Smallest size on the ladder at which every seed catches the row (None: none)."""
    for n in ladder:
        if judge_row(row, n, seeds, alpha, kinds) == seeds:
            return n
    return None


def run_catalogue(samples: int, seeds: int, alpha: float, kinds=None,
                  ladder: tuple = LADDER, progress=None) -> list[RowResult]:
    """Judge every row at ``samples`` per pair over ``seeds`` seeds, and find the draws needed
    to catch each broken or lossy row (on ``ladder``, capped at ``samples``)."""
    out = []
    for row in CATALOGUE:
        if progress is not None:
            progress(f"catalogue: {row.name}")
        caught = judge_row(row, samples, seeds, alpha, kinds)
        needed = None
        if not row.should_pass:
            needed = draws_needed(row, seeds, alpha, kinds,
                                  tuple(n for n in ladder if n < samples) + (samples,))
        out.append(RowResult(row, samples, caught, seeds, needed))
    return out
