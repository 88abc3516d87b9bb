"""The planner's decision rules on hand-made entries: the choice, the frontier, the gain over
ar, and the printed config that ``simulate`` accepts."""

from __future__ import annotations

import pytest

from specbatch.analysis.plan.entry import Entry, choose, pareto
from specbatch.analysis.plan.planner import check_band, choice_toml, gain_vs_ar
from specbatch.analysis.plan.slo import Verdict
from specbatch.analysis.plan.space import Deployment, Speculation
from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import check_settings_apply, load_config_given

AR, FIXED = Speculation("ar"), Speculation("fixed", 3, 0, "block")


def entry(gpus: int, spec: Speculation, e2e: float, passed: bool = True, tpot: float = 0.02,
          throughput: float = 100.0) -> Entry:
    latency = {"ttft": 0.1, "tpot": tpot, "e2e": e2e, "goodput": 1.0, "sustained": True}
    return Entry(Deployment("h100", 1, gpus), spec,
                 Verdict(passed, () if passed else ("memory: KV cache ran out (1 preemptions)",),
                         latency), {"preemptions": 0}, {"throughput": throughput}, {})


def test_the_choice_is_the_cheapest_passing_entry_then_the_fastest():
    entries = (entry(1, FIXED, 2.0, passed=False), entry(2, AR, 5.0), entry(2, FIXED, 3.0),
               entry(3, FIXED, 1.0))
    assert choose(entries) is entries[2]
    assert choose(entries[:1]) is None


def test_the_frontier_keeps_only_entries_that_buy_latency_with_cost():
    entries = (entry(2, AR, 5.0), entry(2, FIXED, 3.0), entry(3, FIXED, 4.0),
               entry(4, FIXED, 1.0), entry(1, FIXED, 0.5, passed=False))
    front = pareto(entries)
    assert [(e.deployment.gpus, e.verdict.latency["e2e"]) for e in front] == [(2, 3.0), (4, 1.0)]
    for e in front:  # nothing passing is at most as costly and faster
        assert not any(o.verdict.passed and o.deployment.cost <= e.deployment.cost
                       and o.verdict.latency["e2e"] < e.verdict.latency["e2e"] for o in entries)


def test_the_gain_compares_with_ar_on_the_same_deployment():
    entries = (entry(1, AR, 6.0, passed=False, tpot=0.06, throughput=50.0),
               entry(1, FIXED, 3.0, tpot=0.03, throughput=100.0), entry(2, AR, 4.0))
    gain = gain_vs_ar(entries[1], entries)
    assert gain["tpot_ratio"] == pytest.approx(2.0) and gain["e2e_ratio"] == pytest.approx(2.0)
    assert gain["throughput_ratio"] == pytest.approx(2.0)
    assert gain["ar_limits"] == ["memory: KV cache ran out (1 preemptions)"]
    assert gain["cheapest_ar"] == "2 x h100 (tp 1, 2 replicas)"
    assert gain_vs_ar(entries[0], entries) is None  # ar itself has no gain over ar


BASE = {"trace": "default", "requests": 16, "arrival": "poisson", "rate": 2.0,
        "target": "vicuna-33b", "draft": "vicuna-68m", "max_num_seqs": 64, "kv_mode": "paged",
        "gpu_memory_utilization": 0.9, "seed": 0}


@pytest.mark.parametrize("spec", [AR, FIXED, Speculation("dsd", None, 0, "token"),
                                  Speculation("tetris", 2, 1, "token")])
def test_the_printed_config_is_one_simulate_accepts(tmp_path, spec):
    path = tmp_path / "plan.toml"
    path.write_text(choice_toml(BASE, entry(2, spec, 1.0)))
    config, given = load_config_given(path)
    check_settings_apply(config, given)  # no k for ar/dsd, no verify for ar, e only for tetris
    assert (config.policy, config.replicas, config.kv_mode) == (spec.policy, 2, "paged")
    assert config.extra == spec.extra and config.verify == spec.verify


@pytest.mark.parametrize("text", ["0.9", "0,0.5", "0.9,0.5", "a,b", "0.5,1.5"])
def test_a_bad_acceptance_band_is_refused(text):
    with pytest.raises(SpecbatchError, match="--acceptance-band"):
        check_band(text)
