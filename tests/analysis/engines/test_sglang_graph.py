"""analysis.engines.sglang (the adaptive config file, read by path as _load_adaptive_config
reads it; EAGLE/EAGLE-3 only) and analysis.engines.graph_switch (vLLM #49548's threshold,
counted by hand)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specbatch.analysis.engines import graph_switch, sglang
from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.schedules import SGLANG_DEFAULT


def test_sglangs_own_default_config_is_accepted(tmp_path):
    path = tmp_path / "default.json"
    path.write_text(json.dumps(SGLANG_DEFAULT))
    slots = sglang.load_adaptive_config(path, draft="eagle3")
    assert list(slots) == [1, 8, 32, 64] and slots[64]["candidate_steps"] == [0]


def test_adaptive_mode_only_for_eagle_at_topk_one(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [2, 3]}}))
    assert sglang.load_adaptive_config(path, draft="eagle")[1]["candidate_steps"] == [2, 3]
    for draft, topk in (("vicuna-68m", 1), ("ngram", 1), ("mtp", 1), ("eagle3", 4)):
        with pytest.raises(SpecbatchError, match="EAGLE|topk"):
            sglang.load_adaptive_config(path, draft=draft, topk=topk)


@pytest.mark.parametrize("cfg, match", [
    ({"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [3]}}, "at least 2"),
    ({"1": {"candidate_steps": []}}, "non-negative ints"),
    ({"1": {"candidate_steps": [1, -1]}}, "non-negative ints"),
    ({"ema_alpha": 0.3}, "batch-size key"),
])
def test_refusals_name_the_field(tmp_path, cfg, match):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecbatchError, match=match):
        sglang.load_adaptive_config(path, draft="eagle3")


def test_slots_take_each_ranges_two_best_k_and_the_flags_name_the_file(tmp_path):
    buckets = [{"lo": 1, "hi": 1, "throughput": {"0": 1.0, "1": 3.0, "2": 2.0}},
               {"lo": 2, "hi": 2, "throughput": {"0": 1.0, "1": 2.0, "2": 3.0}},
               {"lo": 3, "hi": 4, "throughput": {"0": 5.0, "1": 4.0, "2": 1.0}}]
    cfg = sglang.slots(buckets, [(1, 2, 1), (3, 4, 0)])
    # range 1-2 sums: K0 2, K1 5, K2 5 -> the two best are 1 and 2 (ties: smaller K first)
    assert cfg == {"1": {"candidate_steps": [1, 2]}, "3": {"candidate_steps": [0, 1]}}
    line = sglang.flags(draft="eagle3", model="head", steps=2, config_path=tmp_path / "c.json")
    assert f"--speculative-adaptive-config {tmp_path / 'c.json'}" in line
    assert "--speculative-algorithm EAGLE3" in line and "--speculative-eagle-topk 1" in line


def test_a_switch_is_counted_where_the_scheduled_count_crosses_a_threshold():
    """#49548's schedule [[1,4,2],[5,512,0]]: counts 4, 4+prefill (5), 4, 5, 5 -> K 2, 0, 2,
    0, 0: three switches in five steps; a second replica's first step is no switch."""
    steps = pd.DataFrame({"replica": [0, 0, 0, 0, 0, 1],
                          "decode_requests": [4, 4, 4, 5, 5, 5],
                          "prefill_tokens": [0, 100, 0, 0, 0, 0]})
    report = graph_switch.assess([(1, 4, 2), (5, 512, 0)], steps)
    assert report.thresholds == (5,)
    assert (report.steps, report.switches) == (6, 3)
    assert report.near == 1.0 and report.on_threshold
    assert "#49548" in report.warning()
    calm = graph_switch.assess([(1, 4, 2), (5, 512, 0)], steps.assign(decode_requests=40))
    assert calm.switches == 0 and calm.warning() is None
    assert graph_switch.PIECEWISE_TAX == pytest.approx(59.6 / 50.0 - 1)
