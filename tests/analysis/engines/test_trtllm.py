"""analysis.engines.trtllm: both key semantics of draft_len_schedule, pinned by TensorRT-LLM's
documented example (PR #10860: {4: 4, 8: 2, 32: 1}), enumerated equal on every batch size,
and the #16888 refusal of 0 for one-model drafters."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.analysis.engines import trtllm
from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.schedules import parse_trt_schedule, trt_draft_len


def test_the_documented_upper_bound_example():
    """PR #10860: batch 1-4 -> 4, 5-8 -> 2, 9-32 -> 1, 33+ -> 0 (implicit)."""
    schedule = {4: 4, 8: 2, 32: 1}
    got = {n: trtllm.draft_len(schedule, n, "upper") for n in (1, 4, 5, 8, 9, 32, 33, 100)}
    assert got == {1: 4, 4: 4, 5: 2, 8: 2, 9: 1, 32: 1, 33: 0, 100: 0}
    config = {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "m",
              "draft_len_schedule": {"4": 4, "8": 2, "32": 1}}
    assert trtllm.check_speculative_config(config, semantics="upper")["draft_len_schedule"] == \
        schedule


def test_the_lower_bound_release_needs_key_one_and_reads_the_largest_key_below():
    schedule = {1: 4, 5: 2, 9: 1}
    got = {n: trtllm.draft_len(schedule, n, "lower") for n in (1, 4, 5, 8, 9, 1000)}
    assert got == {1: 4, 4: 4, 5: 2, 8: 2, 9: 1, 1000: 1}
    config = {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "m",
              "draft_len_schedule": {"4": 4, "8": 2}}
    with pytest.raises(SpecbatchError, match="key 1"):
        trtllm.check_speculative_config(config, semantics="lower")
    with pytest.raises(SpecbatchError, match=r"schedule\[1\] = max_draft_len"):
        trtllm.check_speculative_config({**config, "draft_len_schedule": {"1": 3, "8": 2}},
                                        semantics="lower")


@pytest.mark.parametrize("schedule, match", [
    ({"4": 3, "8": 2}, r"schedule\[4\] = max_draft_len"),  # smallest key's length != max
    ({"4": 4, "8": 5}, "<= max_draft_len"),
    ({"0": 4}, ">= 1"),
    ({"4": 4, "8": -1}, ">= 0"),
    ({"x": 4}, "integer batch-size keys"),
])
def test_validate_draft_len_schedule_and_sort_refusals(schedule, match):
    config = {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "m",
              "draft_len_schedule": schedule}
    with pytest.raises(SpecbatchError, match=match):
        trtllm.check_speculative_config(config, semantics="upper")


def test_16888_no_zero_entry_for_one_model_drafters():
    zero = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "head",
            "draft_len_schedule": {"4": 3, "64": 0}}
    with pytest.raises(SpecbatchError, match="#16888"):
        trtllm.check_speculative_config(zero, semantics="upper")
    # a two-model drafter keeps its 0 (speculation off is well defined there)
    trtllm.check_speculative_config({**zero, "decoding_type": "Draft_Target"}, semantics="upper")
    # past the largest key the schedule resolves to 0 as well
    short = {**zero, "draft_len_schedule": {"4": 3, "32": 1}}
    with pytest.raises(SpecbatchError, match="max_batch_size"):
        trtllm.check_speculative_config(short, semantics="upper", max_batch_size=64)
    # the emitter floors 0 at each bucket's best K >= 1
    assert trtllm.floor_one_model([(1, 4, 3), (5, 16, 0), (17, 64, 0)],
                                  {(5, 16): 1, (17, 64): 1}) == [(1, 4, 3), (5, 64, 1)]
    with pytest.raises(SpecbatchError, match="one-model"):
        trtllm.speculative_config(draft="mtp", model=None, ranges=[(1, 4, 2), (5, 8, 1)],
                                  semantics="lower")


@st.composite
def capped(draw):
    cuts = sorted(draw(st.sets(st.integers(2, 100), max_size=5)))
    los = [1, *cuts]
    his = [c - 1 for c in cuts] + [draw(st.integers(los[-1], 128))]
    first = draw(st.integers(1, 6))
    return [(lo, hi, first if i == 0 else draw(st.integers(1, first)))
            for i, (lo, hi) in enumerate(zip(los, his))]


@settings(max_examples=80, deadline=None)
@given(capped(), st.sampled_from(["vicuna-68m", "eagle3", "mtp"]))
def test_both_semantics_resolve_every_batch_size_to_the_same_k(ranges, draft):
    upper = trtllm.speculative_config(draft=draft, model="m", ranges=ranges, semantics="upper")
    top = ranges[-1][1]
    want = {n: next(k for lo, hi, k in ranges if lo <= n <= hi) for n in range(1, top + 1)}
    if len(ranges) == 1:
        assert "draft_len_schedule" not in upper and upper["max_draft_len"] == ranges[0][2]
        return
    up = {int(k): v for k, v in upper["draft_len_schedule"].items()}
    assert {n: trtllm.draft_len(up, n, "upper") for n in want} == want
    # the simulator's own reading (simulator.policies.schedules) agrees
    sim = parse_trt_schedule(json.dumps(upper["draft_len_schedule"]), "t", "s", top_k(ranges))
    assert {n: trt_draft_len(sim, n) for n in want} == want
    if draft == "vicuna-68m":
        lower = trtllm.speculative_config(draft=draft, model="m", ranges=ranges,
                                          semantics="lower")
        lo = {int(k): v for k, v in lower["draft_len_schedule"].items()}
        assert {n: trtllm.draft_len(lo, n, "lower") for n in want} == want


def top_k(ranges):
    return max(k for *_, k in ranges)
