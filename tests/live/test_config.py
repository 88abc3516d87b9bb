"""Live settings: the draft depth is the policy class's, and bad settings name their flag."""

from __future__ import annotations

import pytest

from specbatch.errors import SpecbatchError
from specbatch.live.config import LiveConfig
from specbatch.simulator.config.sim_config import policy_depth


@pytest.mark.parametrize("policy,k,extra,depth", [("fixed", 3, 5, 3), ("tetris", 2, 2, 4)])
def test_depth_is_the_policy_class_required_depth(policy, k, extra, depth):
    cfg = LiveConfig(policy=policy, k=k, extra=extra)
    assert cfg.depth == depth == policy_depth(cfg.sim_config(4))


@pytest.mark.parametrize("changes,flag", [
    ({"policy": "oracle"}, "--policy"), ({"verify": "tree"}, "--verify"), ({"k": 0}, "--k"),
    ({"extra": -1}, "--extra"), ({"temperature": -1.0}, "--temperature"),
    ({"seed": -1}, "--seed"), ({"policy": "tetris", "k": 40, "extra": 40}, "--k/--extra"),
    ({"device": "tpu"}, "--device"), ({"device": "cuda:x"}, "--device"),
    ({"scheduler": "vllm-v2"}, "--scheduler"),
    ({"scheduler": "vllm-v0", "max_num_batched_tokens": 64}, "--max-num-batched-tokens"),
    ({"max_num_batched_tokens": 0}, "--max-num-batched-tokens"),
])
def test_bad_settings_are_one_line_errors_naming_the_flag(changes, flag):
    with pytest.raises(SpecbatchError, match=flag):
        LiveConfig(**changes).check()


def test_the_live_policies_are_the_catalogue_rows_marked_live():
    from specbatch.live.config import LIVE_POLICIES
    from specbatch.simulator.policies.catalogue import names

    assert LIVE_POLICIES == names(live=True) == ("fixed", "tetris")


def test_depth_is_computed_once_per_config():
    cfg = LiveConfig(policy="tetris", k=2, extra=1)
    assert cfg.depth == 3 and "depth" in vars(cfg)  # cached on the instance


@pytest.mark.parametrize("scheduler,budget,expected", [("vllm-v1", None, 8192),
                                                       ("vllm-v1", 96, 96),
                                                       ("vllm-v0", None, None)])
def test_the_simulator_gets_the_same_composer_and_budget(scheduler, budget, expected):
    """sim_values hands validate's simulator the live loop's rule: the scheduler, its token
    budget and whole prompts (no chunked prefill)."""
    cfg = LiveConfig(scheduler=scheduler, max_num_batched_tokens=budget)
    assert cfg.token_budget == expected
    values = cfg.sim_values(4)
    sim = cfg.sim_config(4)
    assert (values["scheduler"], sim.scheduler) == (scheduler, scheduler)
    assert sim.chunked is False and sim.token_budget == expected
    assert sim.client_ttft_s == 0.0  # the loop stamps tokens in process: no client side
    assert sim.async_scheduling is False  # nor schedules a step before the last one's output
