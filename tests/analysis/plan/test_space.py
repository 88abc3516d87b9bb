"""The planner's search space: speculation settings, deployments by cost, pruning."""

from __future__ import annotations

import pytest

from specbatch.analysis.plan.space import (
    Deployment,
    Space,
    cost_levels,
    deployments,
    parse_prices,
    prune_reason,
    speculations,
)
from specbatch.errors import SpecbatchError


def test_speculations_cover_ar_fixed_tetris_and_dsd_under_both_verifiers():
    space = Space(k=(1, 2), extra=(1,), verify=("token", "block"))
    labels = [s.label for s in speculations(space)]
    assert labels[0] == "ar"  # one ar: it verifies nothing
    assert "fixed k=2 TV" in labels and "tetris k=1 e=1 BV" in labels and "dsd BV" in labels
    assert len(labels) == 1 + 2 * 2 + 2 * 1 * 2 + 2


def test_ar_and_dsd_carry_no_window_of_their_own():
    ar, *_ = speculations(Space(policies=("ar",)))
    assert "num_speculative_tokens" not in ar.fields()
    dsd = speculations(Space(policies=("dsd",), verify=("token",)))[0]
    assert "num_speculative_tokens" not in dsd.fields() and dsd.fields()["policy"] == "dsd"


def test_deployments_are_cheapest_first_and_capped_at_max_gpus():
    found = deployments(Space(tp=(1, 2), max_gpus=4))
    assert [d.gpus for d in found] == sorted(d.gpus for d in found)
    assert max(d.gpus for d in found) == 4
    assert {(d.tp, d.replicas) for d in found} == {(1, 1), (1, 2), (1, 3), (1, 4), (2, 1),
                                                    (2, 2)}


def test_a_price_table_orders_by_money_and_levels_group_equal_costs():
    space = Space(hardware=("h100", "h200"), tp=(1,), max_gpus=2,
                  prices=parse_prices("h100=2,h200=3", ("h100", "h200")))
    found = deployments(space)
    assert [(d.hardware, d.gpus, d.cost) for d in found] == [
        ("h100", 1, 2.0), ("h200", 1, 3.0), ("h100", 2, 4.0), ("h200", 2, 6.0)]
    assert [cost for cost, _ in cost_levels([Deployment("h100", 1, 2), Deployment("h100", 2, 1),
                                             Deployment("h100", 1, 1)])] == [1.0, 2.0]


@pytest.mark.parametrize("text", ["h100", "h100=0", "h100=x", "h100=2,h200=-1"])
def test_bad_prices_are_one_line_errors(text):
    with pytest.raises(SpecbatchError, match="--price"):
        parse_prices(text, ("h100",))


def test_every_searched_preset_needs_a_price():
    with pytest.raises(SpecbatchError, match="no.*h200|none for h200"):
        parse_prices("h100=2", ("h100", "h200"))


def test_weights_over_memory_are_pruned_with_the_numbers():
    # Vicuna-33B + 68M: ~65 GB of bf16 weights; one 48 GB L40S at u = 0.9 holds 43.2 GB.
    why = prune_reason(Deployment("l40s", 1, 1), "vicuna-33b", "vicuna-68m", 0.9, 800, 16)
    assert why.startswith("memory: weights 65.2 GB") and "43.2 GB" in why
    assert prune_reason(Deployment("l40s", 2, 1), "vicuna-33b", "vicuna-68m", 0.9, 800, 16) is None


def test_tp_that_does_not_divide_the_heads_is_pruned():
    assert "52 attention heads" in prune_reason(Deployment("h100", 8, 1), "vicuna-33b",
                                                "vicuna-68m", 0.9, 800, 16)


def test_a_pool_smaller_than_the_largest_request_is_pruned():
    # One H100 leaves 4,244 KV tokens next to Vicuna-33B: a 5,000-token request cannot run.
    why = prune_reason(Deployment("h100", 1, 1), "vicuna-33b", "vicuna-68m", 0.9, 5000, 16)
    assert "4,244 tokens" in why and "5,000" in why


def test_a_host_side_drafter_leaves_the_whole_pool_to_the_target():
    # Next to Vicuna-33B alone one H100 holds 4,345 KV tokens (271 blocks), with the 68M
    # draft's weights and KV 4,244 (265 blocks): a 4,300-token request fits only the first.
    h100 = Deployment("h100", 1, 1)
    assert prune_reason(h100, "vicuna-33b", "ngram", 0.9, 4300, 16) is None
    assert "4,244 tokens" in prune_reason(h100, "vicuna-33b", "vicuna-68m", 0.9, 4300, 16)


def test_the_questions_precision_prices_the_memory_it_prunes_on():
    # Vicuna-33B as fp8 holds its decoder projections at 1 byte (~33 GB with its bf16
    # embeddings and the 68M draft), which one 48 GB L40S holds at u = 0.9; an fp8 KV cache
    # doubles one H100's pool next to bf16 weights (4,244 -> 8,488 tokens)
    l40s, h100 = Deployment("l40s", 1, 1), Deployment("h100", 1, 1)
    assert prune_reason(l40s, "vicuna-33b", "vicuna-68m", 0.9, 800, 16,
                        {"quantization": "fp8"}) is None
    assert "8,488 tokens" in prune_reason(h100, "vicuna-33b", "vicuna-68m", 0.9, 9000, 16,
                                          {"kv_cache_dtype": "fp8"})
