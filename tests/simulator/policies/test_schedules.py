"""The engines' tables read as the engines read them: vLLM's batch-size ranges, TensorRT-LLM's
draft_len_schedule, SGLang's adaptive config; every bad table is a one-line config error."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.schedules import (
    SGLANG_DEFAULT,
    parse_sglang_config,
    parse_trt_schedule,
    parse_vllm_table,
    trt_draft_len,
    vllm_lookup,
)


def test_vllm_lookup_matches_vllms_own_test_of_the_schedule():
    """vLLM's tests/v1 test_dynamic_sd_uses_batch_size_schedule: gaps inherit the previous K."""
    table = parse_vllm_table("1-16:3,32-128:2,256-2048:0", "config", "t")
    dense = vllm_lookup(table, 300, 4)
    expected = {1: 3, 16: 3, 17: 3, 31: 3, 32: 2, 128: 2, 129: 2, 255: 2, 256: 0, 300: 0}
    assert {b: int(dense[b]) for b in expected} == expected


def test_vllm_lookup_clamps_k_and_extends_the_last_range():
    dense = vllm_lookup(parse_vllm_table("1-4:5", "config", "t"), 10, 3)
    assert dense[1:].tolist() == [3] * 10


def test_the_json_list_form_reads_like_the_range_form():
    assert (parse_vllm_table("[[1, 16, 3], [32, 128, 2]]", "c", "t")
            == parse_vllm_table("1-16:3, 32-128:2", "c", "t") == [(1, 16, 3), (32, 128, 2)])


@pytest.mark.parametrize("text", ["2-16:3", "1-16:3,10-20:2", "1-0:3", "1-4", "", "[[1, 4]]",
                                  "1-4:-1", "[[1, 4, 2.5]]", "[[1, 1e400, 3]]",
                                  "[[1, 4, NaN]]", "[[1, true, 2]]"])
def test_a_bad_vllm_table_is_a_one_line_error(text):
    with pytest.raises(SpecbatchError, match="config: field t: expected ranges") as err:
        parse_vllm_table(text, "config", "t")
    assert "\n" not in str(err.value)


def test_trt_schedule_keys_are_the_largest_batch_size_of_their_length():
    """TensorRT-LLM's docstring example {4: 4, 8: 2, 32: 1}: 1-4 -> 4, 5-8 -> 2, 9-32 -> 1,
    33+ -> 0 (speculation off)."""
    schedule = parse_trt_schedule("8:2, 4:4, 32:1", "config", "s", 4)
    assert list(schedule) == [4, 8, 32]
    got = [trt_draft_len(schedule, b) for b in (1, 4, 5, 8, 9, 32, 33, 1000)]
    assert got == [4, 4, 2, 2, 1, 1, 0, 0]
    assert parse_trt_schedule('{"4": 4, "8": 2}', "config", "s", 4) == {4: 4, 8: 2}


@pytest.mark.parametrize("text", ["{4: 4, 8: 2, 32: 1}", "{4:4,8:2,32:1}", " { 4: 4 } "])
def test_trt_schedule_reads_tensorrt_llms_own_dict_spelling(text):
    """TensorRT-LLM writes the schedule as a dict with integer keys (llm_args.py's
    ``draft_len_schedule: dict[int, int]``, its YAML options ``{4: 4, 8: 2}``): that spelling
    was refused because it is not JSON (keys unquoted)."""
    expected = {4: 4, 8: 2, 32: 1} if "8" in text else {4: 4}
    assert parse_trt_schedule(text, "config", "s", 4) == expected


@pytest.mark.parametrize("text", ["4:5", "0:1", "4:1,4:2", "4", "{\"4\": \"x\"}", "[1]",
                                  '{"4": 1e400}', '{"4": NaN}', '{"4": true}', "{4: 5}", "{}",
                                  "{4: 2, 4: 1}"])
def test_a_bad_trt_schedule_is_a_one_line_error(text):
    with pytest.raises(SpecbatchError, match="config: field s: expected pairs"):
        parse_trt_schedule(text, "config", "s", 4)


def test_sglang_config_defaults_and_overlays_like_adaptive_spec_params():
    slots = parse_sglang_config(None, "config", "a")
    assert list(slots) == [1, 8, 32, 64]
    assert slots[1]["candidate_steps"] == SGLANG_DEFAULT["1"]["candidate_steps"]
    assert slots[1]["ema_alpha"] == 0.2 and slots[1]["warmup_batches"] == 10
    text = ('{"ema_alpha": 0.5, "1": {"candidate_steps": [1, 3]}, '
            '"8": {"candidate_steps": [0, 1], "ema_alpha": 0.1}}')
    slots = parse_sglang_config(text, "config", "a")
    assert slots[1]["ema_alpha"] == 0.5 and slots[8]["ema_alpha"] == 0.1


@pytest.mark.parametrize("text", ["nope", "[1]", '{"1": {"candidate_steps": []}}',
                                  '{"1": {"candidate_steps": [-1]}}', '{"x": 1}',
                                  '{"1": {"candidate_steps": [1], "update_interval": 0}}',
                                  '{"ema_alpha": NaN, "1": {"candidate_steps": [1]}}',
                                  '{"ema_alpha": -5, "1": {"candidate_steps": [1]}}',
                                  '{"ema_alpha": 1e300, "1": {"candidate_steps": [1]}}',
                                  '{"ema_alpha": 0, "1": {"candidate_steps": [1]}}',
                                  '{"ceiling_coeff": 1e400, "1": {"candidate_steps": [1]}}',
                                  '{"ceiling_coeff": -1, "1": {"candidate_steps": [1]}}',
                                  '{"1": {"candidate_steps": [1], "down_hysteresis": Infinity}}'])
def test_a_bad_sglang_config_is_a_one_line_error(text):
    with pytest.raises(SpecbatchError, match="config: field a: expected"):
        parse_sglang_config(text, "config", "a")


def test_bad_knobs_are_refused_when_the_config_is_built():
    with pytest.raises(SpecbatchError, match="field num_speculative_tokens_per_batch_size"):
        load_config(None, policy="batch-schedule", num_speculative_tokens_per_batch_size="5-9:1")
    with pytest.raises(SpecbatchError, match="field draft_len_schedule: expected pairs"):
        load_config(None, policy="batch-schedule", k=2, draft_len_schedule="1:3")
    with pytest.raises(SpecbatchError, match="reads one table"):
        load_config(None, policy="batch-schedule", num_speculative_tokens_per_batch_size="1-9:1",
                    draft_len_schedule="4:1")
    with pytest.raises(SpecbatchError, match="field speculative_adaptive_config"):
        load_config(None, policy="ema-adaptive", speculative_adaptive_config="{}")
    assert np.isclose(load_config(None, policy="fixed").calibration_split, 0.0)
