"""The n-gram (prompt-lookup) proposer (traces/capture/ngram.py): the fast path equals the reference
twin on random small-vocabulary sequences, and the match rule on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.traces.capture.ngram import ngram_bounds, propose_ngram, propose_ngram_reference


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=40), st.integers(0, 6), st.integers(1, 4),
       st.integers(0, 4))
def test_fast_path_equals_the_reference_twin(context, k, n_min, extra):
    n_max = n_min + extra
    fast = propose_ngram(np.array(context, dtype=np.int64), k, n_min, n_max)
    assert fast.tolist() == propose_ngram_reference(context, k, n_min, n_max)
    assert fast.shape[0] <= k


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=12), st.integers(1, 3))
def test_binary_sequences_always_propose_when_n_min_is_one(context, k):
    # with n = 1 any earlier copy of the last token matches
    out = propose_ngram(context, k, 1, 3)
    earlier = context[-1] in context[:-1]
    assert (out.size > 0) == earlier


def test_match_rule_on_hand_made_contexts():
    # vLLM's docstring example: [4,2,3] has no earlier copy, [2,3] does; 3 tokens follow it
    assert propose_ngram([1, 2, 3, 4, 2, 3], 4, 2, 3).tolist() == [4, 2, 3]
    # the longest n wins over an earlier shorter match
    assert propose_ngram([7, 3, 9, 5, 3, 8, 5, 3], 2, 1, 2).tolist() == [8, 5]
    # among matches of the same n the earliest wins
    assert propose_ngram([1, 2, 9, 1, 2, 8, 1, 2], 1, 2, 2).tolist() == [9]
    # an occurrence may overlap the suffix: [1,1,1] occurs at 0 and 1; the earliest is taken
    assert propose_ngram([1, 1, 1, 1, 1], 3, 3, 3).tolist() == [1, 1]
    # too short for n_min, k = 0, or no match: nothing
    assert propose_ngram([1, 2], 3, 2, 2).size == 0
    assert propose_ngram([1, 2, 1, 2], 0, 1, 2).size == 0
    assert propose_ngram([1, 2, 3, 4], 3, 1, 4).size == 0
    assert propose_ngram([], 3, 1, 1).size == 0


def test_bounds_follow_vllm_defaults_and_reject_bad_values():
    assert ngram_bounds(None, None) == (5, 5)
    assert ngram_bounds(2, None) == (2, 2)
    assert ngram_bounds(None, 4) == (4, 4)
    assert ngram_bounds(1, 3) == (1, 3)
    with pytest.raises(SpecbatchError, match="--ngram-min: expected an integer >= 1"):
        ngram_bounds(0, 3)
    with pytest.raises(SpecbatchError, match="--ngram-max: expected >= --ngram-min"):
        ngram_bounds(4, 3)
