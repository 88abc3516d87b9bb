"""User code and knob strings the fuzz of issue 46 broke: a user's policy or sampler that
never returns stops at ``--user-timeout`` with one line; a policy that cannot be copied for
``--replicas 2`` says so; schedule strings nested 1,000 deep or keyed by "²" are one-line
errors; a built-in sampler keeps its interface. Each in a fresh process (exit code, stderr,
stdout)."""

from __future__ import annotations

import time

import pytest

from tests.cli.oneline import assert_one_line_error, run_cli

USER_CODE = '''
import threading
import time

import numpy as np
from specbatch.simulator.policies.registry import Policy


class Sleeps(Policy):
    def decide(self, view):
        while True:
            try:
                time.sleep(1000)
            except Exception:
                pass


class HoldsLock(Policy):
    def __init__(self, config, trace_k):
        super().__init__(config, trace_k)
        self.lock = threading.Lock()

    def decide(self, view):
        d = np.ones(view.n, dtype=np.int64)
        return d, d


def sleeping_sampler(draft_token_ids, draft_probs, target_probs, generator=None):
    time.sleep(1000)
'''
SIMULATE = ["simulate", "--trace", "synth", "--requests", "4", "--json"]


@pytest.fixture
def user_dir(tmp_path):
    (tmp_path / "user_code.py").write_text(USER_CODE)
    return tmp_path


def test_a_policy_that_never_returns_stops_at_the_user_timeout(user_dir):
    start = time.monotonic()
    out = run_cli(SIMULATE + ["--policy", "user_code:Sleeps", "--user-timeout", "1"], user_dir,
                  timeout=60)
    assert time.monotonic() - start < 30
    assert_one_line_error(out.returncode, out.stderr,
                          "policy user_code:Sleeps (")
    assert "decide did not return within 1 s" in out.stderr and "--user-timeout" in out.stderr
    assert out.stdout == ""


def test_a_sampler_that_never_returns_stops_at_the_user_timeout(user_dir):
    out = run_cli(["conform", "user_code:sleeping_sampler", "--user-timeout", "0.5",
                   "--samples", "100", "--json"], user_dir, timeout=60)
    assert_one_line_error(out.returncode, out.stderr,
                          "VERIFIER user_code:sleeping_sampler: did not return within 0.5 s")
    assert out.stdout == ""


def test_the_user_timeout_is_stated_in_the_help(user_dir):
    for command in ("simulate", "conform"):
        text = " ".join(run_cli([command, "--help"], user_dir).stdout.split())
        assert "--user-timeout SECONDS" in text and "(default 60; 0: no limit;" in text


def test_replicas_of_an_uncopyable_policy_are_refused_by_name(user_dir):
    out = run_cli(SIMULATE + ["--policy", "user_code:HoldsLock", "--replicas", "2"], user_dir)
    assert_one_line_error(out.returncode, out.stderr, "policy user_code:HoldsLock (")
    assert "2 replicas need a copyable (picklable) policy" in out.stderr
    assert "cannot pickle '_thread.lock'" in out.stderr
    single = run_cli(SIMULATE + ["--policy", "user_code:HoldsLock"], user_dir)
    assert single.returncode == 0, single.stderr


@pytest.mark.parametrize("flags, needle", [
    (["--policy", "vllm-adaptive", "--num-speculative-tokens-per-batch-size",
      "[" * 1000 + "]" * 1000], "field num_speculative_tokens_per_batch_size: expected ranges"),
    (["--policy", "batch-schedule", "--draft-len-schedule",
      '{"4":' * 1000 + "1" + "}" * 1000], "field draft_len_schedule: expected pairs"),
    (["--policy", "ema-adaptive", "--speculative-adaptive-config",
      '{"a":' * 1000 + "1" + "}" * 1000], "field speculative_adaptive_config: expected a JSON"),
    (["--policy", "ema-adaptive", "--speculative-adaptive-config",
      '{"²": {"candidate_steps": [1, 3]}}'], "slot keys written with the digits 0-9, got '²'"),
])
def test_knob_strings_that_broke_the_parsers_are_one_line_errors(tmp_path, flags, needle):
    out = run_cli(SIMULATE + flags, tmp_path)
    assert_one_line_error(out.returncode, out.stderr, needle)
    assert len(out.stderr) < 600  # the 2,000-character value is quoted shortened
    assert out.stdout == ""


@pytest.mark.parametrize("builtin, asked, has", [("tv-numpy", "ragged", "padded"),
                                                 ("vllm-v1", "padded", "ragged")])
def test_a_builtin_sampler_keeps_its_interface(tmp_path, builtin, asked, has):
    out = run_cli(["conform", builtin, "--interface", asked], tmp_path)
    assert_one_line_error(out.returncode, out.stderr,
                          f"--interface: the built-in {builtin} has the {has} interface")
