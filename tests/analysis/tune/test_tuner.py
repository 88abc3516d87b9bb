"""analysis.tune.tuner: buckets, the emitted settings parsed back by each engine's parser rules
(simulator.policies.schedules re-implements vLLM's, TensorRT-LLM's and SGLang's), the tax, the
verdict, and the tuner's logic on a closed-form runner (no simulation)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from specbatch.analysis.tune.tuner import (
    TuneQuestion,
    buckets,
    engine_ranges,
    merge,
    paste_lines,
    simulate_fields,
    taxed,
    tune,
    verdict,
)
from specbatch.simulator.cost.interface import SumsCostModel
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.policies.engines import AdaptiveSlot, EmaAdaptive
from specbatch.simulator.policies.schedules import (
    parse_sglang_config,
    parse_trt_schedule,
    parse_vllm_table,
    trt_draft_len,
    vllm_lookup,
)
from tests.simulator.helpers import LinearCost

RANGES = [(1, 1, 4), (2, 4, 3), (5, 16, 1), (17, 64, 0)]
LINES = paste_lines({"vllm": RANGES, "tensorrt-llm": RANGES, "sglang": RANGES})
WANT = {n: next(k for lo, hi, k in RANGES if lo <= n <= hi) for n in range(1, 65)}


def test_buckets_are_powers_of_two_up_to_the_cap():
    assert buckets(1) == [(1, 1)]
    assert buckets(20) == [(1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 20)]
    assert merge([(1, 1, 3), (2, 2, 3), (3, 4, 1), (5, 8, 1), (9, 16, 3)]) == [
        (1, 2, 3), (3, 8, 1), (9, 16, 3)]


def flag_value(line: str, flag: str) -> str:
    words = shlex.split(line)
    return words[words.index(flag) + 1]


def test_vllm_setting_parses_back_through_vllms_rules():
    """validate_and_normalize_dynamic_sd_schedule + build_dynamic_sd_schedule_lookup
    (simulator.policies.schedules): the dense table gives every batch size its bucket's K."""
    spec = json.loads(flag_value(LINES["vllm"], "--speculative-config"))
    assert spec["num_speculative_tokens"] == 4
    entries = parse_vllm_table(json.dumps(spec["num_speculative_tokens_per_batch_size"]),
                               "test", "num_speculative_tokens_per_batch_size")
    dense = vllm_lookup(entries, 64, spec["num_speculative_tokens"])
    assert {n: int(dense[n]) for n in range(1, 65)} == WANT


def test_tensorrt_setting_parses_back_through_get_draft_len_for_batch_size():
    line = LINES["tensorrt-llm"]
    spec = json.loads(line.removeprefix("speculative_config: "))
    schedule = parse_trt_schedule(json.dumps(spec["draft_len_schedule"]), "test",
                                  "draft_len_schedule", spec["max_draft_len"])
    assert {n: trt_draft_len(schedule, n) for n in range(1, 65)} == WANT
    # validate_draft_len_schedule_and_sort (tensorrt_llm/llmapi/llm_args.py): the smallest
    # key's draft length is max_draft_len, and none is larger
    assert schedule[min(schedule)] == spec["max_draft_len"] >= max(schedule.values())


def test_tensorrt_ranges_never_exceed_the_first_buckets_k():
    """Batch 1 wants K = 0, larger batches K = 2: vLLM and SGLang take that, TensorRT-LLM's
    rule (smallest key = max_draft_len) caps every bucket at 0: no schedule."""
    chosen = [{"lo": 1, "hi": 1, "k": 0, "throughput": {"0": 5.0, "1": 4.0, "2": 3.0}},
              {"lo": 2, "hi": 4, "k": 2, "throughput": {"0": 5.0, "1": 6.0, "2": 7.0}},
              {"lo": 5, "hi": 8, "k": 1, "throughput": {"0": 5.0, "1": 6.0, "2": 5.5}}]
    ranges = engine_ranges(chosen)
    assert ranges["vllm"] == ranges["sglang"] == [(1, 1, 0), (2, 4, 2), (5, 8, 1)]
    assert ranges["tensorrt-llm"] == [(1, 8, 0)]
    chosen[0]["k"], chosen[0]["throughput"]["1"] = 1, 9.0
    assert engine_ranges(chosen)["tensorrt-llm"] == [(1, 8, 1)]


def test_sglang_setting_is_a_file_whose_slots_route_every_batch_size_to_its_k(tmp_path):
    """EAGLE-3: _load_adaptive_config's slots (read from the file the flags name),
    AdaptiveStepRouter's largest key <= n, each slot's candidates its range's two best K."""
    from specbatch.analysis.engines.sglang import load_adaptive_config
    from specbatch.analysis.tune.tuner import engine_settings

    chosen = [{"lo": lo, "hi": hi, "k": k,
               "throughput": {str(j): 2.0 if j == k else 1.0 if j == k + 1 else 0.5
                              for j in range(6)}} for lo, hi, k in RANGES]
    ranges = engine_ranges(chosen, "eagle3")  # TensorRT-LLM: no 0 for a one-model head
    assert ranges["tensorrt-llm"][-1] == (5, 64, 1) and ranges["sglang"] == RANGES
    setting = engine_settings(ranges, chosen, {"draft": "eagle3"}, tmp_path)["sglang"]
    path = flag_value(setting["setting"], "--speculative-adaptive-config")
    assert path == str(tmp_path / "sglang_adaptive.json") == setting["file"]
    (tmp_path / "sglang_adaptive.json").write_text(json.dumps(setting["config"]))
    slots = load_adaptive_config(path, draft="eagle3")
    policy = EmaAdaptive.__new__(EmaAdaptive)
    policy.keys = list(slots)
    policy.slots = [AdaptiveSlot(4, s) for s in
                    parse_sglang_config(json.dumps(setting["config"]), "t", "c").values()]
    for n in range(1, 65):
        assert policy.route(n).candidates[0] == WANT[n]
        assert len(policy.route(n).candidates) == 2
    # a draft model gets no adaptive line: a reason, and tune falls back to fixed-K flags
    other = engine_settings(ranges, chosen, {"draft": "vicuna-68m"}, tmp_path)["sglang"]
    assert other["setting"] is None and "EAGLE" in other["reason"]


def test_taxed_cost_scales_every_pass_and_the_overhead():
    taxed_cost = taxed(LinearCost(), 0.25)
    q, kv = np.array([2, 3]), np.array([0, 0])
    assert taxed_cost.step_time("target", q, kv) == 1.25 * LinearCost().step_time("target", q, kv)
    assert taxed_cost.overhead == 0.625


def test_taxed_roofline_keeps_and_scales_its_sums_fast_path():
    h100 = build_cost_model()
    cost = taxed(h100, 0.5)
    assert isinstance(cost, SumsCostModel)
    sums = ("target", 4, 8.0, 400.0, 800.0, 16.0)
    assert cost.time_from_sums(*sums) == 1.5 * h100.time_from_sums(*sums)
    assert not isinstance(taxed(LinearCost(), 0.5), SumsCostModel)


def test_a_taxed_run_takes_exactly_one_plus_tax_times_as_long_per_pass():
    fields = {"trace": "synth", "requests": 8, "max_num_seqs": 4, "policy": "fixed",
              "num_speculative_tokens": 2, "arrival": "burst"}
    plain, slow = simulate_fields(fields), simulate_fields(fields, 0.25)
    assert slow["target_time"] == pytest.approx(1.25 * plain["target_time"], rel=1e-12)
    assert slow["tokens"] == plain["tokens"]


def test_verdict_needs_every_load_and_a_better_geometric_mean():
    assert verdict([2.0, 3.0], [2.0, 2.0])
    assert not verdict([2.0, 2.0], [2.0, 2.0])  # a tie is the fixed K's
    assert not verdict([1.9, 9.0], [2.0, 2.0])  # worse at one load


def closed_form(fields_list, taxes=None):
    """Per-request rate of a K at cap n: (1 + 0.6 + ... + 0.6^K) / (1 + 0.1 n K). n = 1:
    K = 1..4 give 1.455, 1.633, 1.674, 1.647 -> 3; n = 2: 1.333, 1.4, 1.36 -> 2; n = 4:
    1.143, 1.089 (K = 0: 1) -> 1; n = 8: 0.889 < 1 -> 0. Throughput = n x rate, e2e latency =
    1 / rate; the tax divides the rate by 1 + tax."""
    taxes = taxes or [0.0] * len(fields_list)
    out = []
    for fields, tax in zip(fields_list, taxes):
        n = fields["max_num_seqs"]
        if fields["policy"] == "ar":
            k = np.zeros(n)
        elif fields["policy"] == "fixed":
            k = np.full(n, fields["num_speculative_tokens"])
        elif fields["policy"] == "batch-schedule":
            table = json.loads(fields["num_speculative_tokens_per_batch_size"]) \
                if fields.get("num_speculative_tokens_per_batch_size") else None
            if table is None:
                schedule = parse_trt_schedule(fields["draft_len_schedule"], "t", "d", 9)
                k = np.full(n, trt_draft_len(schedule, n))
            else:
                k = np.full(n, vllm_lookup([tuple(e) for e in table], n, 9)[n])
        else:
            k = np.full(n, fields["num_speculative_tokens"])
        kk = float(k[0])
        rate = (1 - 0.6 ** (kk + 1)) / 0.4 / (1 + 0.1 * n * kk) / (1 + tax)
        out.append({"throughput": rate * n, "e2e_mean": 1 / rate, "tokens": 100 * n,
                    "requests": n, "peak_batch": min(n, fields["requests"])})
    return out


def test_tune_picks_k_per_bucket_and_keeps_the_schedule_only_when_it_wins():
    q = TuneQuestion(base={"requests": 64, "trace": "default"}, max_num_seqs=16, k_max=4,
                     rates=(1.0,))
    report = tune(q, closed_form)
    assert report["ranges"] == [[1, 1, 3], [2, 2, 2], [3, 4, 1], [5, 16, 0]]
    # validation runs at the cap (n = 16): fixed K = 0 is best there, and so is every schedule
    # (its K at 16 is 0): a tie, so fixed K wins
    assert report["best_fixed_k"] == 0
    for v in report["engines_verdict"].values():
        assert not v["wins"] and v["advice"].startswith("no speculative decoding")
    assert tune(q, closed_form) == report  # deterministic


def test_a_schedule_that_beats_every_fixed_k_is_recommended():
    """Validation runs (64 requests) ramp: half their steps at batch 1, half at batch 2, each
    scored by the mean per-request rate of its K there. Fixed K = 2: (1.633 + 1.4) / 2 =
    1.517, K = 3: (1.674 + 1.36) / 2 = 1.517; the schedule 1:3, 2:2 gets (1.674 + 1.4) / 2 =
    1.537 at every load: it wins. With a 5 % tax: 1.464 < 1.517, it loses."""
    q = TuneQuestion(base={"requests": 64, "trace": "default"}, max_num_seqs=2, k_max=4,
                     rates=(1.0,))

    def ramp(fields_list, taxes=None):
        taxes = taxes or [0.0] * len(fields_list)
        out = []
        for fields, tax in zip(fields_list, taxes):
            if fields["requests"] != 64:  # a bucket run (16 requests): steady batch
                out += closed_form([fields], [tax])
                continue
            parts = closed_form([{**fields, "max_num_seqs": 1}, fields], [tax, tax])
            rate = (1 / parts[0]["e2e_mean"] + 1 / parts[1]["e2e_mean"]) / 2
            out.append({"throughput": rate, "e2e_mean": 1 / rate, "tokens": 100,
                        "requests": 1})
        return out

    report = tune(q, ramp)
    assert report["ranges"] == [[1, 1, 3], [2, 2, 2]]
    assert report["engines_verdict"]["vllm"]["wins"]
    assert report["engines_verdict"]["tensorrt-llm"]["wins"]
    assert report["engines_verdict"]["vllm"]["advice"].startswith("--speculative-config")
    taxed = tune(TuneQuestion(**{**q.__dict__, "tax": 0.05}), ramp)
    assert not taxed["engines_verdict"]["vllm"]["wins"]


@pytest.mark.parametrize("field, value", [("tax", -0.1), ("k_max", 0), ("max_num_seqs", 0),
                                          ("rates", (0.0,))])
def test_a_bad_question_names_its_argument(field, value):
    from specbatch.errors import SpecbatchError

    args = {"base": {"requests": 8}, "max_num_seqs": 4, "k_max": 2, field: value}
    with pytest.raises(SpecbatchError, match=f"TuneQuestion: {field}"):
        TuneQuestion(**args)


def test_buckets_no_burst_reaches_take_the_last_reached_k_and_are_named():
    """Four requests never decode five at once: buckets 5-8 and 9-16 were not measured (their
    runs' peak batch is 4 < 5), so they take the K of bucket 3-4 (1), not one chosen from runs
    that never reached them (closed_form's K = 0 there), and the report names them."""
    q = TuneQuestion(base={"requests": 4, "trace": "default"}, max_num_seqs=16, k_max=4,
                     rates=(1.0,))
    report = tune(q, closed_form)
    assert report["ranges"] == [[1, 1, 3], [2, 2, 2], [3, 16, 1]]
    assert report["unreached"] == [[5, 8], [9, 16]]
    assert [b["reached"] for b in report["buckets"]] == [True, True, True, False, False]
    assert report["notes"] and report["notes"][0].startswith("batch sizes 5-16 were never "
                                                             "reached (at most 4 requests")
    assert report["engines_verdict"]["tensorrt-llm"]["ranges"][-1] == [3, 16, 1]
    full = tune(TuneQuestion(**{**q.__dict__, "base": {"requests": 64, "trace": "default"}}),
                closed_form)
    assert full["unreached"] == [] and full["notes"] == []
