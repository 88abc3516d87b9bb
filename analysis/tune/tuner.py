"""``specbatch tune``: dynamic draft-length schedules for vLLM, TensorRT-LLM and SGLang, chosen
by simulated goodput and kept only where they beat the best fixed K end to end.

1. **Choose.** The batch sizes 1..``max_num_seqs`` fall into power-of-two buckets
   (1, 2, 3-4, 5-8, ...). For each bucket, a burst of requests capped at its largest size is
   simulated at every K = 0..``k_max`` (K = 0: ``ar``) on every seed; the bucket takes the K
   of highest mean throughput (ties: the smaller K), except that it keeps the previous
   bucket's K while that K is in its tie set (THEORY.md §14): K changes between buckets only
   where the difference is resolved. Adjacent buckets with the same K merge.
2. **Emit**, in each engine's own syntax and limits (parsed back in the tests by
   simulator.policies.schedules, the re-implementation of each engine's parser):
   vLLM ``--speculative-config`` with ``num_speculative_tokens`` = the largest K and
   ``num_speculative_tokens_per_batch_size`` = inclusive ``[lo, hi, K]`` ranges from 1
   (``vllm/v1/spec_decode/dynamic/utils.py``, ``validate_and_normalize_dynamic_sd_schedule``);
   TensorRT-LLM ``draft_len_schedule`` ``{largest batch size: K}`` with ``max_draft_len``
   (``tensorrt_llm/llmapi/llm_args.py`` ``DecodingBaseConfig``; lookup
   ``tensorrt_llm/_torch/speculative/utils.py`` ``get_draft_len_for_batch_size``: the first
   key >= the batch size, 0 past the last key), its K capped at the first bucket's
   (:func:`engine_ranges`: the smallest key's length must be ``max_draft_len``);
   SGLang ``--speculative-adaptive-config``, one slot per range keyed by its smallest batch
   size (``AdaptiveStepRouter``: the largest key <= the batch size) with ``candidate_steps =
   [K]`` (one candidate: the EMA has nothing to move, so the slot applies K as chosen).
3. **Validate** each emitted setting the way its engine applies it (``batch-schedule`` with the
   vLLM or TensorRT-LLM table, ``ema-adaptive`` with the SGLang config) against every fixed K
   and the engine's default (vLLM and TensorRT-LLM without a schedule: fixed ``k_max``;
   SGLang: its ``DEFAULT_ADAPTIVE_CONFIG`` from ``k_max`` steps), at several Poisson rates and
   a burst, on every seed. Score: throughput (burst), 1 / mean end-to-end latency (rates). The
   best fixed K maximises the geometric mean of its scores over the loads (mean over seeds);
   the Ks tied with it are named. A setting's gain is its geometric-mean score against the
   best fixed K's, per seed, in percent, with a paired 95 % interval; it is recommended only
   when that interval lies above 0 (with one seed: when it scores at least the best fixed K's
   at every load and more in geometric mean); otherwise the answer is that fixed K.

Seeds: every run is repeated on R seeds (``TuneQuestion.seeds``; ``specbatch tune`` asks 3),
common random numbers across settings (the same arrivals and verifier uniforms per seed).

``tax``: the dynamic path's per-step cost, a fraction added to every step time of the
schedule runs (default 0). vLLM issue vllm-project/vllm#49548 measured 6.56 % (concurrency 2)
to 21.58 % (concurrency 189) TPOT at a K = 0 schedule on an H100 NVL (vLLM 0.27.1, V1 runner):
the cost of having dynamic SD enabled. A tax shows where a schedule stops paying.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.errors import require
from specbatch.io import atomic_write, dumps

#: The file that marks a directory as tune's output.
MARKER = "tune.json"
#: What a tune output directory holds (anything else there is someone else's).
TUNE_FILES = (MARKER, "settings.txt", "workload.csv")
#: Default validation rates, as fractions of the best fixed K's burst request throughput.
RATE_FRACTIONS = (0.25, 0.5, 0.75)
ENGINES = ("vllm", "tensorrt-llm", "sglang")


@dataclass(frozen=True)
class TuneQuestion:
    """base: the SimConfig fields every run shares (trace or constant acceptance, models,
    hardware, tp, workload, seed, requests); max_num_seqs: the engine's batch cap; k_max: the
    largest K considered; rates: validation rates in requests/s (None: RATE_FRACTIONS of the
    best fixed K's capacity); tax: the dynamic path's per-step fraction; seeds: R, every run
    repeated on seeds ``base["seed"]`` .. + R − 1 (common random numbers; module docstring);
    depth: the deepest draft the acceptance knows (an acceptance profile's K; None: the
    trace's), below SGLang's default config's 7 steps that default is not compared."""

    base: dict
    max_num_seqs: int
    k_max: int
    rates: tuple[float, ...] | None = None
    tax: float = 0.0
    seeds: int = 1
    depth: int | None = None

    def __post_init__(self) -> None:
        require(int(self.max_num_seqs) >= 1, f"TuneQuestion: max_num_seqs: expected an integer "
                f">= 1, got {self.max_num_seqs!r}")
        require(int(self.k_max) >= 1, f"TuneQuestion: k_max: expected an integer >= 1, got "
                f"{self.k_max!r}")
        require(0 <= self.tax < math.inf, f"TuneQuestion: tax: expected a fraction >= 0, got "
                f"{self.tax!r}")
        require(self.rates is None or (len(self.rates) > 0 and all(
            0 < r < math.inf for r in self.rates)), f"TuneQuestion: rates: expected requests/s "
            f"> 0, got {self.rates!r}")
        require("requests" in self.base, "TuneQuestion: base: expected a 'requests' field")
        require(int(self.seeds) >= 1, f"TuneQuestion: seeds: expected an integer >= 1, got "
                f"{self.seeds!r}")

    @property
    def seed_list(self) -> list[int]:
        first = int(self.base.get("seed", 0))
        return list(range(first, first + int(self.seeds)))


class TaxedCost:
    """A cost model whose every pass and step overhead take ``1 + tax`` times as long."""

    def __init__(self, inner: Any, tax: float) -> None:
        self.inner, self.factor = inner, 1.0 + tax
        self.overhead = inner.overhead * self.factor

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "time_from_sums"):  # no unscaled fast path through the wrapper
            raise AttributeError(name)
        return getattr(self.inner, name)

    def step_time(self, role: str, query: Any, kv: Any) -> float:
        return self.factor * self.inner.step_time(role, query, kv)


class TaxedSumsCost(TaxedCost):
    """:class:`TaxedCost` of a model with the batch-sums fast path, kept and scaled."""

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float) -> float:
        return self.factor * self.inner.time_from_sums(role, n, sq, skv, sqkv, sqq)


def taxed(cost: Any, tax: float) -> TaxedCost:
    """``cost`` with every step ``1 + tax`` times as long (keeping its sums fast path)."""
    from specbatch.simulator.cost.interface import SumsCostModel

    return (TaxedSumsCost if isinstance(cost, SumsCostModel) else TaxedCost)(cost, tax)


def buckets(max_num_seqs: int) -> list[tuple[int, int]]:
    """Power-of-two batch-size buckets covering 1..max_num_seqs: (1, 1), (2, 2), (3, 4), ..."""
    out, lo = [], 1
    while lo <= max_num_seqs:
        hi = min(max(1, 2 * (lo - 1)), max_num_seqs) if lo > 2 else lo
        out.append((lo, hi))
        lo = hi + 1
    return out


def merge(ranges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Adjacent (lo, hi, K) ranges with the same K joined."""
    out: list[tuple[int, int, int]] = []
    for lo, hi, k in ranges:
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], hi, k)
        else:
            out.append((lo, hi, k))
    return out


def fixed_settings(k: int) -> dict:
    """A fixed window K (0: no speculation)."""
    return {"policy": "ar"} if k == 0 else {"policy": "fixed", "num_speculative_tokens": k}


def top_k(ranges: list[tuple[int, int, int]]) -> int:
    """The largest K of a schedule, at least 1 (every engine's K knob needs a window: vLLM's
    ``num_speculative_tokens``, TensorRT-LLM's ``max_draft_len``, SGLang's starting
    ``speculative_num_steps``, which one-candidate slots never apply)."""
    return max(1, max(k for *_, k in ranges))


def vllm_setting(ranges: list[tuple[int, int, int]]) -> dict:
    return {"num_speculative_tokens": top_k(ranges),
            "num_speculative_tokens_per_batch_size": [list(r) for r in ranges]}


def trt_setting(ranges: list[tuple[int, int, int]]) -> dict:
    return {"max_draft_len": top_k(ranges),
            "draft_len_schedule": {str(hi): k for _, hi, k in ranges}}


def sglang_setting(ranges: list[tuple[int, int, int]]) -> dict:
    return {str(lo): {"candidate_steps": [k]} for lo, _, k in ranges}


def engine_ranges(chosen: list[dict]) -> dict[str, list[tuple[int, int, int]]]:
    """Each engine's schedule from the per-bucket choices, within its rules. vLLM and SGLang
    take any K per range. TensorRT-LLM requires the smallest key's draft length to equal
    ``max_draft_len`` and every other to be at most that (``validate_draft_len_schedule_and_sort``
    in ``tensorrt_llm/llmapi/llm_args.py``), so its first bucket keeps its K and every later
    bucket takes its best K at most that one."""
    free = merge((b["lo"], b["hi"], b["k"]) for b in chosen)
    first = chosen[0]["k"]
    capped = []
    for b in chosen:
        by_k = {int(k): v for k, v in b["throughput"].items() if int(k) <= first}
        capped.append((b["lo"], b["hi"], max(by_k, key=lambda k: (by_k[k], -k))))
    return {"vllm": free, "tensorrt-llm": merge(capped), "sglang": free}


def paste_lines(ranges: dict[str, list[tuple[int, int, int]]]) -> dict[str, str]:
    """The ready-to-paste settings of each engine, from its ranges."""
    sglang = ranges["sglang"]
    return {
        "vllm": f"--speculative-config '{json.dumps(vllm_setting(ranges['vllm']))}'",
        "tensorrt-llm": "speculative_config: " + json.dumps(trt_setting(ranges["tensorrt-llm"])),
        "sglang": (f"--speculative-adaptive --speculative-num-steps {top_k(sglang)} "
                   f"--speculative-adaptive-config '{json.dumps(sglang_setting(sglang))}'"),
    }


def engine_runs(ranges: dict[str, list[tuple[int, int, int]]], k_max: int
                ) -> dict[str, tuple[dict, dict]]:
    """Each engine's (emitted setting, default) as simulator fields, applied as it applies
    them (module docstring, step 3); a one-range setting of K >= 1 runs as that fixed K (the
    same steps: every batch size drafts K)."""
    vllm, trt, sglang = ranges["vllm"], ranges["tensorrt-llm"], ranges["sglang"]
    table = json.dumps(vllm_setting(vllm)["num_speculative_tokens_per_batch_size"])
    runs = {
        "vllm": ({"policy": "batch-schedule", "num_speculative_tokens": top_k(vllm),
                  "num_speculative_tokens_per_batch_size": table}, fixed_settings(k_max)),
        "tensorrt-llm": ({"policy": "batch-schedule", "num_speculative_tokens": top_k(trt),
                          "draft_len_schedule": json.dumps(trt_setting(trt)["draft_len_schedule"])},
                         fixed_settings(k_max)),
        "sglang": ({"policy": "ema-adaptive", "num_speculative_tokens": top_k(sglang),
                    "speculative_adaptive_config": json.dumps(sglang_setting(sglang))},
                   {"policy": "ema-adaptive", "num_speculative_tokens": k_max}),
    }
    for engine, own in ranges.items():  # one range is one K at every batch size: fixed K
        if len(own) == 1 and own[0][2] > 0:  # (K = 0 under a schedule still prefills the draft)
            runs[engine] = (fixed_settings(own[0][2]), runs[engine][1])
    return runs


#: Traces loaded by this process, by the fields that name them (a tune reads one trace; the
#: files do not change while it runs).
_TRACES: dict[tuple, Any] = {}


def simulate_fields(fields: dict, tax: float = 0.0) -> dict:
    """One run's summary (a worker process's job); ``tax`` > 0 prices it with TaxedCost."""
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.run import build_cost, load_trace, simulate

    config = load_config(None, **fields)
    key = (config.trace, config.synth_alpha, config.seed if config.trace == "synth" else None)
    if key not in _TRACES:
        _TRACES[key] = load_trace(config)
    cost = taxed(build_cost(config), tax) if tax else None
    return simulate(config, _TRACES[key], cost_model=cost).summary


def score(summary: dict, load: Any) -> float:
    """Higher is better: throughput at a burst, 1 / mean e2e latency at a rate."""
    return summary["throughput"] if load == "burst" else 1.0 / summary["e2e_mean"]


def load_fields(base: dict, load: Any) -> dict:
    return {**base, "arrival": "burst"} if load == "burst" else \
        {**base, "arrival": "poisson", "rate": float(load)}


def choose(question: TuneQuestion, run: Callable) -> list[dict]:
    """Step 1: per bucket, every K's burst throughput on every seed and the chosen K: the
    best mean, kept from the previous bucket while that K is in this bucket's tie set (a
    change between buckets only where the difference is resolved, analysis.report.ties)."""
    from specbatch.analysis.report.ties import tie_set

    seeds = question.seed_list
    jobs = []
    for lo, hi in buckets(question.max_num_seqs):
        requests = min(int(question.base["requests"]), max(16, 4 * hi))
        for k in range(question.k_max + 1):
            for seed in seeds:
                jobs.append(((lo, hi, k, seed), {**question.base, "seed": seed,
                                                 "max_num_seqs": hi, "requests": requests,
                                                 "arrival": "burst", **fixed_settings(k)}))
    summaries = run([fields for _, fields in jobs])
    table: dict[tuple[int, int], dict[int, list[float]]] = {}
    for ((lo, hi, k, _), _), summary in zip(jobs, summaries):
        table.setdefault((lo, hi), {}).setdefault(k, []).append(summary["throughput"])
    out, current = [], None
    for (lo, hi), by_k in table.items():
        best, ties = tie_set({str(k): v for k, v in by_k.items()})
        ties_k = [int(k) for k in ties]
        current = current if current in ties_k else int(best)
        out.append({"lo": lo, "hi": hi,
                    "throughput": {str(k): sum(v) / len(v) for k, v in by_k.items()},
                    "throughput_by_seed": {str(k): v for k, v in by_k.items()},
                    "best": int(best), "tie_set": ties_k, "k": current})
    return out


def validate(question: TuneQuestion, ranges: dict[str, list[tuple[int, int, int]]],
             run: Callable) -> dict:
    """Step 3: fixed K, each engine's setting (taxed) and default at every load, on every
    seed. Scores per load are means over the seeds; the best fixed K has the highest mean
    log-score over loads and seeds (ties: the smaller K), its tie set is the Ks whose paired
    interval against it contains 0."""
    from specbatch.analysis.report.ties import tie_set

    base = {**question.base, "max_num_seqs": question.max_num_seqs}
    ks = range(question.k_max + 1)
    seeds = question.seed_list
    burst = run([load_fields({**base, "seed": r, **fixed_settings(k)}, "burst")
                 for k in ks for r in seeds])  # [k][seed]
    burst_at = {(k, r): burst[i * len(seeds) + j] for i, k in enumerate(ks)
                for j, r in enumerate(seeds)}
    if question.rates is None:
        first = seeds[0]
        best = max(ks, key=lambda k: burst_at[(k, first)]["throughput"])
        per_request = burst_at[(best, first)]["tokens"] / burst_at[(best, first)]["requests"]
        capacity = burst_at[(best, first)]["throughput"] / per_request
        rates = tuple(round(f * capacity, 4) for f in RATE_FRACTIONS)
    else:
        rates = question.rates
    loads: list[Any] = [*rates, "burst"]
    grid = [(k, r, x) for k in ks for r in seeds for x in rates]
    rated = run([load_fields({**base, "seed": r, **fixed_settings(k)}, x) for k, r, x in grid])
    rated_at = dict(zip(grid, rated))
    by_seed = {r: {k: [score(rated_at[(k, r, x)], x) for x in rates]
                   + [score(burst_at[(k, r)], "burst")] for k in ks} for r in seeds}
    logs = {str(k): [100.0 * sum(map(math.log, by_seed[r][k])) / len(loads) for r in seeds]
            for k in ks}
    best_k, fixed_ties = tie_set(logs)
    best_k = int(best_k)
    arms = engine_runs(ranges, question.k_max)
    jobs = [(engine, role, load, r) for engine in ENGINES for role in ("setting", "default")
            for load in loads for r in seeds if not skipped_default(question, engine, role)]
    taxes = [question.tax if role == "setting" else 0.0 for _, role, _, _ in jobs]
    fields = [load_fields({**base, "seed": r, **arms[e][role == "default"]}, load)
              for e, role, load, r in jobs]
    summaries = run(fields, taxes)
    engines: dict[str, dict] = {e: {} for e in ENGINES}
    for (engine, role, load, r), summary in zip(jobs, summaries):
        engines[engine].setdefault(f"{role}_by_seed", {}).setdefault(str(r), []).append(
            score(summary, load))
    for e in engines.values():
        for role in ("setting", "default"):
            per = e.get(f"{role}_by_seed")
            if per is None:  # not compared (skipped_default)
                e[role] = None
                continue
            e[role] = [sum(per[str(r)][i] for r in seeds) / len(seeds)
                       for i in range(len(loads))]
    fixed = {str(k): [sum(by_seed[r][k][i] for r in seeds) / len(seeds)
                      for i in range(len(loads))] for k in ks}
    return {"loads": [str(x) for x in loads], "rates": list(rates), "seeds": seeds,
            "fixed": fixed, "fixed_by_seed": {str(r): {str(k): v for k, v in by_seed[r].items()}
                                              for r in seeds},
            "best_fixed_k": best_k, "fixed_tie_set": [int(k) for k in fixed_ties],
            "engines": engines}


def skipped_default(question: TuneQuestion, engine: str, role: str) -> bool:
    """SGLang's default adaptive config drafts up to 7 tokens: not run when the acceptance
    knows fewer positions (``question.depth``)."""
    from specbatch.simulator.policies.schedules import SGLANG_DEFAULT

    deepest = max(max(slot["candidate_steps"]) for slot in SGLANG_DEFAULT.values())
    return (engine == "sglang" and role == "default" and question.depth is not None
            and question.depth < deepest)


def schedule_gain(setting_by_seed: dict, fixed_by_seed: dict, best_k: int) -> list[float]:
    """Per seed, the setting's geometric-mean score over the loads against the best fixed
    K's, in percent: ``100 (exp(mean_loads log(s / b)) − 1)``.  # [R]"""
    out = []
    for r, setting in setting_by_seed.items():  # keys: the seeds as strings (JSON)
        best = fixed_by_seed[str(r)][str(best_k)]
        logs = [math.log(a / b) for a, b in zip(setting, best)]
        out.append(100.0 * (math.exp(sum(logs) / len(logs)) - 1.0))
    return out


def verdict(setting: list[float], best: list[float]) -> bool:
    """The setting wins: at least the best fixed K's score at every load, more in geometric
    mean."""
    return (all(s >= b for s, b in zip(setting, best))
            and sum(map(math.log, setting)) > sum(map(math.log, best)))


def tune(question: TuneQuestion, run: Callable) -> dict:
    """The report (module docstring): chosen buckets, emitted settings, validation, verdicts.
    run(fields_list, taxes=None) -> summaries, in order."""
    run = deduplicated(run)
    chosen = choose(question, lambda fields: run(fields, None))
    ranges = engine_ranges(chosen)
    from specbatch.analysis.report.ties import interval

    check = validate(question, ranges, run)
    best = check["fixed"][str(check["best_fixed_k"])]
    lines = paste_lines(ranges)
    engines = {}
    for engine in ENGINES:
        scores, own = check["engines"][engine], ranges[engine]
        gain = interval(schedule_gain(scores["setting_by_seed"], check["fixed_by_seed"],
                                      check["best_fixed_k"]))
        # a one-range schedule is a fixed K; an all-zero one is no speculation; with one
        # seed the per-load rule (verdict), else the interval above 0 (THEORY.md §14)
        resolved = (verdict(scores["setting"], best) if question.seeds == 1
                    else math.isfinite(gain.ci_low) and gain.ci_low > 0)
        wins = any(k for *_, k in own) and len(own) > 1 and resolved
        engines[engine] = {
            "setting": lines[engine], "ranges": [list(r) for r in own], "wins": bool(wins),
            "gain": gain.as_dict(),
            "vs_best_fixed_pct": [100 * (s / b - 1) for s, b in zip(scores["setting"], best)],
            "default_vs_best_fixed_pct": None if scores["default"] is None else
            [100 * (s / b - 1) for s, b in zip(scores["default"], best)],
            "advice": lines[engine] if wins else fixed_advice(engine, check["best_fixed_k"])}
    return {"question": {**question.base, "max_num_seqs": question.max_num_seqs,
                         "k_max": question.k_max, "tax": question.tax,
                         "seeds": question.seeds},
            "buckets": chosen, "ranges": [list(r) for r in ranges["vllm"]], **check,
            "engines_verdict": engines}


def deduplicated(run: Callable) -> Callable:
    """``run`` computing each distinct (fields, tax) once per tune (vLLM's and TensorRT-LLM's
    defaults are the fixed ``k_max`` run; runs are deterministic, so a repeat is a copy)."""
    done: dict[str, dict] = {}

    def once(fields_list: list[dict], taxes: list[float] | None = None) -> list[dict]:
        taxes = taxes or [0.0] * len(fields_list)
        keys = [json.dumps([f, t], sort_keys=True) for f, t in zip(fields_list, taxes)]
        todo = {k: (f, t) for k, f, t in zip(keys, fields_list, taxes) if k not in done}
        if todo:
            fresh = run([f for f, _ in todo.values()], [t for _, t in todo.values()])
            done.update(zip(todo, fresh))
        return [done[k] for k in keys]

    return once


def fixed_advice(engine: str, k: int) -> str:
    """What to set instead of a schedule: fixed K (K = 0: speculation off)."""
    if k == 0:
        return "no speculative decoding (a fixed K = 0 wins)"
    return {"vllm": f"--speculative-config '{{\"num_speculative_tokens\": {k}}}'",
            "tensorrt-llm": f"speculative_config: {{\"max_draft_len\": {k}}}",
            "sglang": f"--speculative-num-steps {k} (no --speculative-adaptive)"}[engine]


def claim_tune_dir(out: Path) -> None:
    """Refuse an existing directory holding anything but tune's files (one line)."""
    if out.is_dir():
        other = sorted(p.name for p in out.iterdir() if p.name not in TUNE_FILES
                       and not p.name.startswith("."))
        require(not other, f"--out {out}: holds files that are not tune's ({', '.join(other[:3])}"
                "); choose an empty or new directory")


def write_tune(report: dict, out: Path) -> None:
    """OUT/tune.json (the report) and OUT/settings.txt (one advice line per engine), atomic."""
    atomic_write(out / "settings.txt", "".join(
        f"{engine}: {v['advice']}\n" for engine, v in report["engines_verdict"].items()))
    atomic_write(out / MARKER, dumps(report, indent=1))
