"""vLLM's async scheduling: the per-step CPU overhead overlaps the target pass
(simulator.cost.features.async_overhead)."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.run import build_cost, simulate
from specbatch.traces.models.shapes import get_shape


def roofline() -> RooflineCost:
    return RooflineCost(get_hardware("h100"), get_shape("vicuna-7b"), get_shape("vicuna-68m"))


def test_a_step_takes_the_larger_of_the_target_pass_and_the_host_overhead():
    inner = roofline()
    cost = AsyncOverheadCost(inner)
    assert cost.overhead == 0.0 and cost.host_overhead == inner.overhead == 1e-3
    q, kv = np.ones(2, dtype=np.int64), np.array([10, 20])
    short = inner.step_time("draft", q, kv)
    assert short < 1e-3
    assert cost.step_time("draft", q, kv) == short  # draft passes are GPU time, unchanged
    target = inner.step_time("target", q, kv)
    assert cost.step_time("target", q, kv) == max(target, 1e-3)
    long_q = np.full(2, 512)
    assert cost.step_time("target", long_q, kv) == inner.step_time("target", long_q, kv) > 1e-3
    assert cost.time_from_sums("target", 2, 2.0, 30.0, 30.0, 2.0) == cost.step_time(
        "target", q, kv)
    assert cost.step_time("target", np.zeros(0), np.zeros(0)) == 0.0
    assert cost.kv_capacity_tokens() == inner.kv_capacity_tokens()  # the rest is the inner's


def test_the_knob_wraps_the_cost_model_and_shortens_a_run_by_its_hidden_overhead():
    """Every request arrives at 0 with a slot of its own (max_num_seqs = requests), so the
    scheduling lag (simulator.engine.async_lag) changes no step: only the overhead hides."""
    base = {"policy": "ar", "num_speculative_tokens": 0, "requests": 8, "trace": "synth",
            "max_num_seqs": 8, "seed": 0, "host": "fixed"}  # the preset's flat 1 ms
    serial = make_config({**base, "async_scheduling": False}, "test")
    overlap = make_config({**base, "async_scheduling": True}, "test")
    assert isinstance(build_cost(overlap), AsyncOverheadCost)
    assert not isinstance(build_cost(serial), AsyncOverheadCost)
    a, b = simulate(serial).steps, simulate(overlap).steps
    assert (a["overhead_time"] == 1e-3).all() and (b["overhead_time"] == 0.0).all()
    # every pass of this run is longer than 1 ms: the same steps, each 1 ms shorter
    assert len(a) == len(b)
    assert (b["target_time"].to_numpy() == a["target_time"].to_numpy()).all()
    assert b["end"].iloc[-1] == pytest.approx(a["end"].iloc[-1] - len(a) * 1e-3, rel=1e-9)


def test_with_vllm_host_terms_async_scheduling_hides_a_plus_b_n():
    """host = vllm (simulator.cost.features.host): the serial run's steps carry a = 0.287 ms
    each and b n on the target pass; with async scheduling both hide under passes longer than
    a + b n (every pass of this run), so the target passes are the inner model's. Every
    request has a slot from the start: the scheduling lag changes no step."""
    from specbatch.simulator.cost.features.host import REQUEST_S, STEP_S

    base = {"policy": "ar", "num_speculative_tokens": 0, "requests": 8, "trace": "synth",
            "max_num_seqs": 8, "seed": 0}
    a = simulate(make_config({**base, "async_scheduling": False}, "test")).steps
    b = simulate(make_config({**base, "async_scheduling": True}, "test")).steps
    assert (a["overhead_time"] == STEP_S).all() and (b["overhead_time"] == 0.0).all()
    assert len(a) == len(b)
    # b n per pass: n the pass's requests (prefills included), 1..max_num_seqs
    n = (a["target_time"] - b["target_time"]).to_numpy() / REQUEST_S  # [steps]
    assert np.allclose(n, np.round(n), atol=1e-6) and n.min() > 0.5 and n.max() < 8.5
    assert (np.round(n) >= a["batch"].to_numpy()).all()  # decodes, plus any prefill joining


def test_vllm_overlaps_every_drafter_but_the_cpu_ngram_proposer():
    """vllm/config/vllm.py VllmConfig.__post_init__: EAGLE / EAGLE-3 / MTP and draft models
    may run with async scheduling; the CPU n-gram proposer never (an explicit flag is a
    ValueError, the default turns it off); a deployment with no speculative config always."""
    from specbatch.simulator.cost.features.async_overhead import async_applies

    assert not async_applies("ngram", True) and not async_applies("NGRAM", True)
    assert async_applies("ngram", False)
    for draft in ("eagle3", "eagle", "mtp", "vicuna-68m", "llama-3.2-1b"):
        assert async_applies(draft, True), draft


NGRAM_RUN = {"trace": "synth", "draft": "ngram", "policy": "fixed", "num_speculative_tokens": 2,
             "requests": 8, "max_num_seqs": 4, "seed": 0, "async_scheduling": True}


def test_an_ngram_speculative_run_keeps_the_host_serial_under_async_scheduling():
    """With draft = ngram vLLM runs the speculative steps synchronously: the target pass
    carries b n on top of the inner model's time and the step pays a, as with no flag; the AR
    run of the same deployment (no speculative config in vLLM) overlaps them."""
    from specbatch.simulator.cost.features.host import REQUEST_S, STEP_S, HostCost
    from specbatch.simulator.run import async_overlaps

    spec = make_config(NGRAM_RUN, "test")
    ar = spec.replace(policy="ar")
    assert not async_overlaps(spec) and async_overlaps(ar)
    cost, ar_cost = build_cost(spec), build_cost(ar)
    assert isinstance(cost, HostCost) and cost.ngram and not cost.overlap and ar_cost.overlap
    assert cost.overhead == STEP_S and ar_cost.overhead == 0.0
    q, kv = np.ones(3, dtype=np.int64), np.array([100, 200, 300])
    inner = cost.inner.step_time("target", q, kv)
    assert cost.step_time("target", q, kv) == pytest.approx(inner + 3 * REQUEST_S, rel=1e-12)
    assert ar_cost.step_time("target", q, kv) == max(inner, STEP_S + 3 * REQUEST_S)
    fixed = make_config({**NGRAM_RUN, "host": "fixed"}, "test")
    assert not isinstance(build_cost(fixed), AsyncOverheadCost)  # the preset's 1 ms, serial
    assert isinstance(build_cost(fixed.replace(policy="ar")), AsyncOverheadCost)


def test_the_ngram_speedup_is_against_an_ar_run_with_async_scheduling():
    """speedup_vs_ar = makespan of the AR run as its own config prices it (async on) / the
    n-gram run's (async off), and the run says why."""
    spec = make_config({**NGRAM_RUN, "speedup": True}, "test")
    result = simulate(spec)
    ar = simulate(spec.replace(policy="ar", speedup=False))
    assert result.summary["speedup_vs_ar"] == ar.summary["makespan"] / result.summary["makespan"]
    assert (ar.steps["overhead_time"] == 0.0).all()
    assert (result.steps["overhead_time"] > 0.0).all()
    assert any(n.startswith("async_scheduling: dropped for draft ngram") for n in result.notes)


#: (policy, draft, scheduler, asked) -> whether the host overlaps, and the start of why:
#: vLLM's VllmConfig.__post_init__ for the flag unset (auto), given (true) and
#: --no-async-scheduling (false), written out by hand (module docstring of async_overhead).
RESOLUTION = [
    ("ar", "vicuna-68m", "vllm-v1", "auto", True, "vLLM default without a speculative config"),
    ("ar", "ngram", "vllm-v1", "auto", True, "vLLM default without a speculative config"),
    ("fixed", "vicuna-68m", "vllm-v1", "auto", True, "vLLM default for a draft model"),
    ("fixed", "llama-3.2-1b", "vllm-v1", "auto", True, "vLLM default for a draft model"),
    ("fixed", "eagle3", "vllm-v1", "auto", True, "vLLM default for an EAGLE/MTP head"),
    ("fixed", "eagle", "vllm-v1", "auto", True, "vLLM default for an EAGLE/MTP head"),
    ("fixed", "mtp", "vllm-v1", "auto", True, "vLLM default for an EAGLE/MTP head"),
    ("fixed", "ngram", "vllm-v1", "auto", False, "vLLM default for draft ngram: off"),
    ("ar", "vicuna-68m", "vllm-v0", "auto", False, "vllm-v0"),
    ("fixed", "vicuna-68m", "vllm-v0", "auto", False, "vllm-v0"),
    ("ar", "vicuna-68m", "vllm-v1", True, True, "set true"),
    ("fixed", "vicuna-68m", "vllm-v1", True, True, "set true"),
    ("fixed", "eagle3", "vllm-v1", True, True, "set true"),
    ("fixed", "ngram", "vllm-v1", True, False, "dropped for draft ngram"),
    ("ar", "ngram", "vllm-v1", True, True, "set true"),
    ("fixed", "vicuna-68m", "vllm-v0", True, True, "set true"),  # the flag given: as before
    ("ar", "vicuna-68m", "vllm-v1", False, False, "set false"),
    ("fixed", "vicuna-68m", "vllm-v1", False, False, "set false"),
    ("fixed", "eagle3", "vllm-v1", False, False, "set false"),
    ("fixed", "ngram", "vllm-v1", False, False, "set false"),
]


@pytest.mark.parametrize("policy,draft,scheduler,asked,on,why", RESOLUTION)
def test_async_scheduling_resolves_as_vllm_resolves_its_flag(policy, draft, scheduler, asked,
                                                             on, why):
    from specbatch.simulator.engine.async_lag import lags
    from specbatch.simulator.run import async_overlaps

    values = {"policy": policy, "draft": draft, "scheduler": scheduler,
              "async_scheduling": asked, "trace": "synth"}
    if policy == "ar":
        values["num_speculative_tokens"] = 0
    if draft == "mtp":  # a target with MTP layers
        values["target"] = "deepseek-v3"
    config = make_config(values, "test")
    setting = config.async_setting
    assert setting.on is on and setting.why.startswith(why), setting
    assert setting.asked == {True: "true", False: "false"}.get(asked, asked)
    assert str(setting) == f"{setting.asked} -> {'on' if on else 'off'} ({setting.why})"
    assert async_overlaps(config) is on  # the cost model's overlap and the lag: one rule
    assert lags(config) is (on and scheduler == "vllm-v1")


def test_auto_is_the_default_and_every_draft_free_drafter_has_a_device():
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.features.async_overhead import (
        FREE_DRAFT_DEVICE,
        HOST_DRAFTS,
        resolve_async,
    )
    from specbatch.simulator.defaults import FREE_DRAFTS

    assert SimConfig().async_scheduling == "auto"
    assert set(FREE_DRAFT_DEVICE) == set(FREE_DRAFTS)  # a new one must say where vLLM runs it
    assert HOST_DRAFTS == ("ngram",)
    assert not resolve_async("auto", "NGRAM", True).on  # names are case-insensitive
    with pytest.raises(ValueError, match="expected auto, true or false"):
        resolve_async("on", "ngram", True)


def test_under_auto_the_speedup_arms_resolve_apart_ar_async_and_ngram_synchronous():
    """--speedup with the flag unset: the AR arm is a vLLM deployment without a speculative
    config (async on: host hidden, steps lagged), the n-gram arm one with the CPU proposer
    (synchronous); the summary says how each resolved, and no note is due (nothing asked
    was dropped)."""
    from specbatch.simulator.engine.async_lag import lags

    values = {k: v for k, v in NGRAM_RUN.items() if k != "async_scheduling"}
    spec = make_config({**values, "speedup": True}, "test")
    assert spec.async_scheduling == "auto"
    ar_config = spec.replace(policy="ar", speedup=False)
    assert lags(ar_config) and not lags(spec)
    result = simulate(spec)
    ar = simulate(ar_config)
    assert result.summary["speedup_vs_ar"] == ar.summary["makespan"] / result.summary["makespan"]
    assert (ar.steps["overhead_time"] == 0.0).all()  # a hidden under the pass
    assert (result.steps["overhead_time"] > 0.0).all()  # paid serially
    assert result.summary["async_scheduling"] == (
        "auto -> off (vLLM default for draft ngram: off for the CPU n-gram proposer)")
    assert result.summary["async_scheduling_ar"] == (
        "auto -> on (vLLM default without a speculative config)")
    assert ar.summary["async_scheduling"] == result.summary["async_scheduling_ar"]
    assert not any("async" in n for n in result.notes)
    # an explicit false makes both arms synchronous: the same speculative run, a slower ar
    sync = simulate(spec.replace(async_scheduling=False))
    assert sync.summary["makespan"] == result.summary["makespan"]
    assert sync.summary["speedup_vs_ar"] > result.summary["speedup_vs_ar"]
    assert sync.summary["async_scheduling_ar"] == "false -> off (set false: synchronous steps)"


def test_under_auto_a_draft_model_and_its_ar_arm_both_overlap():
    values = {**{k: v for k, v in NGRAM_RUN.items() if k != "async_scheduling"},
              "draft": "vicuna-68m", "speedup": True}
    result = simulate(make_config(values, "test"))
    assert result.summary["async_scheduling"].startswith("auto -> on (vLLM default for a draft")
    assert result.summary["async_scheduling_ar"].startswith("auto -> on")
    assert (result.steps["overhead_time"] == 0.0).all()
