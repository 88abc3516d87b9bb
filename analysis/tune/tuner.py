"""``specbatch tune``: dynamic draft-length schedules for vLLM, TensorRT-LLM and SGLang, chosen
by simulated goodput and kept only where they beat the best fixed K end to end.

1. **Choose.** The batch sizes 1..``max_num_seqs`` fall into power-of-two buckets
   (1, 2, 3-4, 5-8, ...). For each bucket, a burst of requests capped at its largest size is
   simulated at every K = 0..``k_max`` (K = 0: ``ar``) on every seed; the bucket takes the K
   of highest mean throughput (ties: the smaller K), except that it keeps the previous
   bucket's K while that K is in its tie set (THEORY.md §14): K changes between buckets only
   where the difference is resolved. Adjacent buckets with the same K merge.
2. **Emit** complete settings, built and parser-checked in each engine's own syntax by
   analysis.tune.engine_lines and analysis.engines (which name the engine code each was
   checked against): vLLM's whole ``--speculative-config`` (``method``, ``model``,
   ``num_speculative_tokens`` = the largest K, ``num_speculative_tokens_per_batch_size`` =
   inclusive ``[lo, hi, K]`` ranges from 1); TensorRT-LLM ``speculative_config`` with
   ``draft_len_schedule`` ``{largest batch size: K}`` (releases after PR #10860) and the
   lower-bound form ``{smallest batch size: K}`` of earlier releases, its K capped at the
   first bucket's (the smallest key's length must be ``max_draft_len``) and, for one-model
   drafters, floored at 1 (TensorRT-LLM #16888); SGLang's adaptive config as a FILE
   (``OUT/sglang_adaptive.json``) the flags point at, one slot per range keyed by its
   smallest batch size with the range's two best K as ``candidate_steps``, only for EAGLE /
   EAGLE-3 (any other draft: a one-line reason and the fixed-K flags).
3. **Validate** each emitted setting the way its engine applies it (``batch-schedule`` with the
   vLLM or TensorRT-LLM table, ``ema-adaptive`` with the SGLang config) against every fixed K
   and the engine's default (vLLM and TensorRT-LLM without a schedule: fixed ``k_max``;
   SGLang: its ``DEFAULT_ADAPTIVE_CONFIG`` from ``k_max`` steps), at several Poisson rates and
   a burst, on every seed. Score: throughput (burst), 1 / mean end-to-end latency (rates). The
   best fixed K maximises the geometric mean of its scores over the loads (mean over seeds);
   the Ks tied with it are named. A setting's gain is its geometric-mean score against the
   best fixed K's, per seed, in percent, with a paired 95 % interval; it is recommended only
   when that interval lies above 0 (with one seed: when it scores at least the best fixed K's
   at every load and more in geometric mean); otherwise the answer is that fixed K, except
   for SGLang, whose default adaptive config is kept when it is never worse than the best
   fixed K. vLLM's schedule runs are read for K switches at its thresholds
   (analysis.engines.graph_switch, vLLM #49548) and a warning is added when the answer sits
   on one.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.analysis.tune.engine_lines import merge  # noqa: F401 - public here too
from specbatch.errors import require

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


def taxed(cost: Any, tax: float) -> Any:
    """``cost`` with every pass and step overhead ``1 + tax`` times as long
    (analysis.sensitivity.ScaledCost: its sums fast path and logit rows kept)."""
    from specbatch.analysis.sensitivity import ScaledCost

    return ScaledCost(cost, 1.0 + tax)


def buckets(max_num_seqs: int) -> list[tuple[int, int]]:
    """Power-of-two batch-size buckets covering 1..max_num_seqs: (1, 1), (2, 2), (3, 4), ..."""
    out, lo = [], 1
    while lo <= max_num_seqs:
        hi = min(max(1, 2 * (lo - 1)), max_num_seqs) if lo > 2 else lo
        out.append((lo, hi))
        lo = hi + 1
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


def engine_ranges(chosen: list[dict], draft: str = "vicuna-68m"
                  ) -> dict[str, list[tuple[int, int, int]]]:
    """Each engine's schedule within its rules (analysis.tune.engine_lines.engine_ranges)."""
    from specbatch.analysis.tune.engine_lines import engine_ranges as within_rules

    return within_rules(chosen, draft)


def engine_settings(ranges: dict[str, list[tuple[int, int, int]]], chosen: list[dict],
                    base: dict, out: Path | None = None) -> dict[str, dict]:
    """Each engine's complete, parser-checked setting (analysis.tune.engine_lines.settings)."""
    from specbatch.analysis.tune.engine_lines import settings

    return settings(ranges, chosen, base, out)


def paste_lines(ranges: dict[str, list[tuple[int, int, int]]], chosen: list[dict] | None = None,
                base: dict | None = None, out: Path | None = None) -> dict[str, str | None]:
    """The ready-to-paste line of each engine (None: the engine takes no such setting)."""
    chosen = chosen or [{"lo": lo, "hi": hi, "k": k, "throughput": {str(k): 1.0}}
                        for lo, hi, k in ranges["vllm"]]
    return {e: v["setting"] for e, v in engine_settings(ranges, chosen, base or {}, out).items()}


def engine_runs(ranges: dict[str, list[tuple[int, int, int]]], k_max: int,
                emitted: dict[str, dict] | None = None) -> dict[str, tuple[dict, dict]]:
    """Each engine's (emitted setting, default) as simulator fields, applied as it applies
    them (module docstring, step 3); a one-range setting of K >= 1 runs as that fixed K (the
    same steps: every batch size drafts K). SGLang runs only where it emits a setting."""
    from specbatch.analysis.tune.engine_lines import sglang_fields

    vllm, trt = ranges["vllm"], ranges["tensorrt-llm"]
    runs = {
        "vllm": ({"policy": "batch-schedule", "num_speculative_tokens": top_k(vllm),
                  "num_speculative_tokens_per_batch_size": json.dumps(vllm_setting(vllm)[
                      "num_speculative_tokens_per_batch_size"])}, fixed_settings(k_max)),
        "tensorrt-llm": ({"policy": "batch-schedule", "num_speculative_tokens": top_k(trt),
                          "draft_len_schedule": json.dumps(trt_setting(trt)["draft_len_schedule"])},
                         fixed_settings(k_max)),
    }
    sglang = (emitted or {}).get("sglang")
    if sglang is None or sglang["setting"] is not None:
        fields = (sglang_fields(sglang) if sglang is not None else
                  {"policy": "ema-adaptive", "num_speculative_tokens": top_k(ranges["sglang"]),
                   "speculative_adaptive_config": json.dumps(sglang_setting(ranges["sglang"]))})
        runs["sglang"] = (fields, {"policy": "ema-adaptive", "num_speculative_tokens": k_max})
    for engine, own in ranges.items():  # one range is one K at every batch size: fixed K
        if engine in runs and len(own) == 1 and own[0][2] > 0:  # (K = 0 under a schedule
            runs[engine] = (fixed_settings(own[0][2]), runs[engine][1])  # still prefills)
    return runs


#: Traces loaded by this process, by the fields that name them (a tune reads one trace; the
#: files do not change while it runs).
_TRACES: dict[tuple, Any] = {}


def simulate_fields(fields: dict, tax: float = 0.0) -> dict:
    """One run's summary (a worker process's job) with ``peak_batch``, the most requests one
    step decoded; ``tax`` > 0 prices it with :func:`taxed`."""
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.run import build_cost, load_trace, simulate

    config = load_config(None, **fields)
    key = (config.trace, config.synth_alpha, config.seed if config.trace == "synth" else None)
    if key not in _TRACES:
        _TRACES[key] = load_trace(config)
    cost = taxed(build_cost(config), tax) if tax else None
    result = simulate(config, _TRACES[key], cost_model=cost)
    batch = result.steps["batch"]
    summary = {**result.summary, "peak_batch": int(batch.max()) if len(batch) else 0}
    table = fields.get("num_speculative_tokens_per_batch_size")
    if fields.get("policy") != "batch-schedule" or table is None:
        return summary
    from specbatch.analysis.engines.graph_switch import assess

    report = assess([tuple(r) for r in json.loads(table)], result.steps)
    return {**summary, "k_switch": {"switch_share": report.switch_share,
                                    "thresholds": list(report.thresholds),
                                    "near": report.near}}


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
    peak: dict[tuple[int, int], int] = {}
    for ((lo, hi, k, _), _), summary in zip(jobs, summaries):
        table.setdefault((lo, hi), {}).setdefault(k, []).append(summary["throughput"])
        peak[(lo, hi)] = max(peak.get((lo, hi), 0), int(summary["peak_batch"]))
    out: list[dict] = []
    current = None
    for (lo, hi), by_k in table.items():
        reached = peak[(lo, hi)] >= lo
        best, ties = tie_set({str(k): v for k, v in by_k.items()})
        ties_k = [int(k) for k in ties]
        if not reached:  # no run decoded lo requests at once: nothing to choose from
            current = current if current is not None else 0
        else:
            current = current if current in ties_k else int(best)
        out.append({"lo": lo, "hi": hi,
                    "throughput": {str(k): sum(v) / len(v) for k, v in by_k.items()},
                    "throughput_by_seed": {str(k): v for k, v in by_k.items()},
                    "best": int(best), "tie_set": ties_k, "k": current, "reached": reached,
                    "peak_batch": peak[(lo, hi)]})
    return out


def unreached_note(chosen: list[dict], requests: int) -> str | None:
    """The note naming the buckets no burst reached (they take the K of the last bucket that
    was reached), or None when every bucket was reached."""
    missed = [b for b in chosen if not b["reached"]]
    if not missed:
        return None
    first, top = missed[0], max(b["peak_batch"] for b in chosen)
    return (f"batch sizes {first['lo']}-{missed[-1]['hi']} were never reached (at most {top} "
            f"requests decoded at once in a burst of up to {requests} requests: the request "
            f"count or the KV cache caps it), so they take the K of the largest reached "
            f"bucket; raise --requests or lower --max-num-seqs to choose them")


def validate(question: TuneQuestion, ranges: dict[str, list[tuple[int, int, int]]],
             run: Callable, emitted: dict[str, dict] | None = None) -> dict:
    """Step 3: fixed K, each engine's setting (taxed) and default at every load, on every
    seed (``emitted``: the engines' settings; an engine that emits none is not run). Scores
    per load are means over the seeds; the best fixed K has the highest mean log-score over
    loads and seeds (ties: the smaller K), its tie set is the Ks whose paired interval against
    it contains 0."""
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
    arms = engine_runs(ranges, question.k_max, emitted)
    jobs = [(engine, role, load, r) for engine in ENGINES if engine in arms
            for role in ("setting", "default")
            for load in loads for r in seeds if not skipped_default(question, engine, role)]
    taxes = [question.tax if role == "setting" else 0.0 for _, role, _, _ in jobs]
    fields = [load_fields({**base, "seed": r, **arms[e][role == "default"]}, load)
              for e, role, load, r in jobs]
    summaries = run(fields, taxes)
    engines: dict[str, dict] = {e: {} for e in ENGINES if e in arms}
    for (engine, role, load, r), summary in zip(jobs, summaries):
        engines[engine].setdefault(f"{role}_by_seed", {}).setdefault(str(r), []).append(
            score(summary, load))
        if role == "setting" and "k_switch" in summary and r == seeds[0]:  # one per load
            engines[engine].setdefault("k_switch", []).append(summary["k_switch"])
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


def tune(question: TuneQuestion, run: Callable, out: Path | None = None) -> dict:
    """The report (module docstring): chosen buckets, emitted settings, validation, verdicts,
    warnings. run(fields_list, taxes=None) -> summaries, in order; ``out``: where the SGLang
    config file will be written (its flags name it by path)."""
    from specbatch.analysis.tune.engine_lines import draft_of, fixed_line

    run = deduplicated(run)
    chosen = choose(question, lambda fields: run(fields, None))
    ranges = engine_ranges(chosen, draft_of(question.base))
    from specbatch.analysis.report.ties import interval

    emitted = engine_settings(ranges, chosen, question.base, out)
    check = validate(question, ranges, run, emitted)
    best_k = check["best_fixed_k"]
    best = check["fixed"][str(best_k)]
    note = unreached_note(chosen, int(question.base["requests"]))
    engines = {}
    for engine in ENGINES:
        own, setting = ranges[engine], emitted[engine]
        fixed = fixed_line(engine, best_k, question.base, question.max_num_seqs)
        entry = {"setting": setting["setting"], "ranges": [list(r) for r in own],
                 "checked_against": setting["checked_against"], "version": setting["version"],
                 **{k: setting[k] for k in ("lower_bound_release", "reason", "file")
                    if k in setting}}
        if engine not in check["engines"]:  # SGLang without its adaptive mode
            engines[engine] = {**entry, "wins": False, "advice": f"{fixed}",
                               "gain": {"mean": None, "ci_low": None, "ci_high": None}}
            continue
        scores = check["engines"][engine]
        gain = interval(schedule_gain(scores["setting_by_seed"], check["fixed_by_seed"], best_k))
        # a one-range schedule is a fixed K; an all-zero one is no speculation; with one
        # seed the per-load rule (verdict), else the interval above 0 (THEORY.md §14)
        resolved = (verdict(scores["setting"], best) if question.seeds == 1
                    else math.isfinite(gain.ci_low) and gain.ci_low > 0)
        wins = bool(any(k for *_, k in own) and len(own) > 1 and resolved)
        default = scores["default"]
        entry.update(wins=wins, gain=gain.as_dict(),
                     vs_best_fixed_pct=[100 * (s / b - 1) for s, b in zip(scores["setting"], best)],
                     default_vs_best_fixed_pct=None if default is None else
                     [100 * (s / b - 1) for s, b in zip(default, best)])
        keep_default = (engine == "sglang" and not wins and default is not None
                        and all(d >= b for d, b in zip(default, best)))
        entry["advice"] = (setting["setting"] if wins else
                           default_adaptive_line(question, best_k) if keep_default else fixed)
        entry["warnings"] = switch_warnings(scores.get("k_switch", []), check["loads"],
                                            question.tax) if engine == "vllm" and wins else []
        engines[engine] = entry
    return {"question": {**question.base, "max_num_seqs": question.max_num_seqs,
                         "k_max": question.k_max, "tax": question.tax,
                         "seeds": question.seeds},
            "buckets": chosen, "ranges": [list(r) for r in ranges["vllm"]], **check,
            "engines_verdict": engines, "sglang_config": emitted["sglang"]["config"],
            "unreached": [[b["lo"], b["hi"]] for b in chosen if not b["reached"]],
            "notes": [note] if note else []}


def default_adaptive_line(question: TuneQuestion, k: int) -> str:
    """SGLang's default adaptive config kept (it was never worse than the best fixed K)."""
    from specbatch.analysis.engines import sglang
    from specbatch.analysis.tune.engine_lines import draft_of, model_id

    flags = sglang.flags(draft=draft_of(question.base), model=model_id(question.base),
                         steps=max(1, k), config_path=None)
    return f"{flags} --speculative-adaptive (SGLang's default adaptive config: never worse " \
           "than the best fixed K here)"


def switch_warnings(stats: list[dict], loads: list[str], tax: float) -> list[str]:
    """vLLM #49548 warnings of a schedule's runs: the loads where K switches on at least
    SWITCH_WARN of the steps, and the PIECEWISE fallback when no tax prices it."""
    from specbatch.analysis.engines.graph_switch import PIECEWISE_TAX, warn

    out = []
    for load, st in zip(loads, stats):
        line = warn(st["switch_share"], st["thresholds"])
        if line:
            out.append(f"at {load}: {line}")
    if stats and tax == 0:
        out.append(f"vLLM's V1 runner serves a schedule with PIECEWISE CUDA graphs (#49548: "
                   f"{1 + PIECEWISE_TAX:.3f}x per step single-stream); --tax "
                   f"{PIECEWISE_TAX:.3f} prices it")
    return out


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
