"""analysis.engines.vllm: the twin of vLLM's SpeculativeConfig (@002e77c1) accepts vLLM's
documented examples, refuses what vLLM refuses, and every emitted config resolves each batch
size to the K of its range."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.analysis.engines import vllm
from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.schedules import vllm_lookup

DOCUMENTED = [
    # docs "Configuration Reference" (--speculative-config usage)
    {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4},
    # EAGLE-3 head id named in SpeculativeConfig.__post_init__'s examples
    {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
     "num_speculative_tokens": 3},
    # vLLM #49548's schedule (MTP, K = 2 up to batch 4, off from 5)
    {"method": "mtp", "num_speculative_tokens": 2,
     "num_speculative_tokens_per_batch_size": [[1, 4, 2], [5, 512, 0]]},
    # block verification
    {"model": "JackFram/llama-68m", "num_speculative_tokens": 4,
     "rejection_sample_method": "block"},
]


@pytest.mark.parametrize("config", DOCUMENTED)
def test_documented_examples_are_accepted(config):
    out = vllm.check_speculative_config(json.dumps(config))
    assert out["num_speculative_tokens"] == config["num_speculative_tokens"]


def test_the_resolved_method_and_defaults_follow_post_init():
    assert vllm.check_speculative_config(
        {"model": "JackFram/llama-68m", "num_speculative_tokens": 2})["method"] == "draft_model"
    ngram = vllm.check_speculative_config({"method": "ngram", "num_speculative_tokens": 3})
    assert (ngram["prompt_lookup_min"], ngram["prompt_lookup_max"]) == (5, 5)
    # legacy MTP names become mtp (and need no model)
    assert vllm.check_speculative_config(
        {"method": "deepseek_mtp", "num_speculative_tokens": 1})["method"] == "mtp"


@pytest.mark.parametrize("config, field", [
    ({"method": "eagle3", "num_speculative_tokens": 3}, "model"),
    ({"num_speculative_tokens": 3}, "model"),  # method None -> draft_model: needs a model
    ({"method": "mtp", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "mtp"}, "num_speculative_tokens"),
    ({"method": "mtp", "num_speculative_tokens": 2, "tensor_parallel_size": 2},
     "tensor_parallel_size"),
    ({"method": "medusa2", "model": "x", "num_speculative_tokens": 2}, "method"),
    ({"method": "mtp", "num_speculative_tokens": 2, "rejection_sample_method": "tree"},
     "rejection_sample_method"),
    ({"method": "mtp", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic"},
     "rejection_sample_method"),
    ({"method": "mtp", "num_speculative_tokens": 2, "synthetic_acceptance_length": 1.5},
     "synthetic_acceptance_rates"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
      "prompt_lookup_max": 2}, "prompt_lookup_min"),
    ({"method": "mtp", "num_speculative_tokens": 2, "num_spec_tokens": 2}, "num_spec_tokens"),
    ({"method": "mtp", "num_speculative_tokens": True}, "num_speculative_tokens"),
    # validate_and_normalize_dynamic_sd_schedule
    ({"method": "mtp", "num_speculative_tokens": 2,
      "num_speculative_tokens_per_batch_size": [[2, 4, 2]]}, "per_batch_size"),
    ({"method": "mtp", "num_speculative_tokens": 2,
      "num_speculative_tokens_per_batch_size": [[1, 4, 2], [4, 8, 1]]}, "per_batch_size"),
    ({"method": "mtp", "num_speculative_tokens": 2,
      "num_speculative_tokens_per_batch_size": [[1, 4, -1]]}, "per_batch_size"),
    ({"method": "mtp", "num_speculative_tokens": 2,
      "num_speculative_tokens_per_batch_size": [[3, 1, 2]]}, "per_batch_size"),
    # the 5-item per-(batch, context) table is a proposal, not the merged field
    ({"method": "mtp", "num_speculative_tokens": 2,
      "num_speculative_tokens_per_batch_size": [[1, 4, 1, 1024, 2]]}, "per_batch_size"),
])
def test_what_vllm_refuses_is_refused_naming_the_field(config, field):
    with pytest.raises(SpecbatchError, match=f"vllm --speculative-config: field .*{field}"):
        vllm.check_speculative_config(config)


def test_the_unmerged_proposal_table_follows_its_own_five_item_rules():
    table = [[1, 8, 1, 2048, 3], [1, 8, 2049, 8192, 1], [9, 64, 1, 2048, 1],
             [9, 64, 2049, 8192, 0]]
    out = vllm.check_proposal_table(table)
    assert out[-1] == (9, 64, 2049, 2**31 - 1, 0)  # the last context range is open
    with pytest.raises(SpecbatchError, match="rectangular"):
        vllm.check_proposal_table(table[:3])
    with pytest.raises(SpecbatchError, match="contiguous"):
        vllm.check_proposal_table([[1, 8, 1, 100, 1], [1, 8, 200, 300, 1]])


@st.composite
def schedules(draw):
    cuts = sorted(draw(st.sets(st.integers(2, 200), max_size=5)))
    los = [1, *cuts]
    his = [c - 1 for c in cuts] + [draw(st.integers(los[-1], 300))]
    return [(lo, hi, draw(st.integers(0, 6))) for lo, hi in zip(los, his)]


@settings(max_examples=60, deadline=None)
@given(schedules(), st.sampled_from(["eagle3", "mtp", "vicuna-68m", "ngram"]),
       st.sampled_from(["token", "block"]))
def test_every_emitted_config_is_accepted_and_gives_each_batch_its_ranges_k(ranges, draft,
                                                                            verify):
    config = vllm.speculative_config(draft=draft, model="some/model", ranges=ranges,
                                     verify=verify)
    out = vllm.check_speculative_config(vllm.flag(config).split(" ", 1)[1].strip("'"))
    assert out["rejection_sample_method"] == ("block" if verify == "block" else "standard")
    top = out["num_speculative_tokens"]
    table = out.get("num_speculative_tokens_per_batch_size") or [(1, 1, top)]
    dense = vllm_lookup([tuple(e) for e in table], 300, top)
    for n in range(1, ranges[-1][1] + 1):
        want = next(k for lo, hi, k in ranges if lo <= n <= hi)
        assert dense[n] == (want if len(ranges) > 1 else max(1, want))
