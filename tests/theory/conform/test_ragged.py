"""theory/conform/ragged.py: vLLM V1's flattened ragged interface, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.theory.conform.check import conform
from specbatch.theory.conform.ragged import call_ragged, vllm_v1_greedy, vllm_v1_random
from specbatch.theory.conform.samplers import Sampler

V = 4


def rows(*argmaxes, tie=None) -> torch.Tensor:
    """Target rows # [T, V]: 0.7 at the argmax, 0.1 elsewhere."""
    out = torch.full((len(argmaxes), V), 0.1, dtype=torch.float64)
    out[torch.arange(len(argmaxes)), torch.tensor(argmaxes)] = 0.7
    return out


# request 0: drafts [1, 2]; request 1: no drafts; request 2: drafts [3, 0, 0]
DRAFTS = torch.tensor([1, 2, 3, 0, 0])
CU = torch.tensor([2, 2, 5])
BONUS = torch.tensor([[0], [2], [1]])
TARGET = rows(1, 3, 3, 0, 0)


def test_greedy_kernel_by_hand():
    out = vllm_v1_greedy(DRAFTS, CU, None, TARGET, BONUS)
    assert out.tolist() == [[1, 3, -1, -1],   # 1 accepted, 2 rejected: argmax 3
                            [2, -1, -1, -1],  # no drafts: the bonus token
                            [3, 0, 0, 1]]     # all accepted, then the bonus


def test_misaligned_offsets_read_another_requests_rows():
    """Request 2 read at 2 · max_spec_len = 6 (clamped to 4): its drafts read as [0, 0, 0]
    (not its [3, 0, 0]) against rows of argmax 0, so it "accepts" tokens it never drafted."""
    out = vllm_v1_greedy(DRAFTS, CU, None, TARGET, BONUS, misaligned=True)
    assert out.tolist()[2] == [0, 0, 0, 1]


def test_tie_accepting_greedy_differs_from_argmax_decoding():
    target = torch.tensor([[0.4, 0.4, 0.2, 0.0]], dtype=torch.float64)
    draft, cu, bonus = torch.tensor([1]), torch.tensor([1]), torch.tensor([[3]])
    assert vllm_v1_greedy(draft, cu, None, target, bonus).tolist() == [[0, -1]]
    assert vllm_v1_greedy(draft, cu, None, target, bonus, tie_accepts=True).tolist() == [[1, 3]]


def test_random_kernel_with_point_mass_rows_is_deterministic():
    """One-hot rows: Mb(x)/Ms(x) is 1 (accept) or 0 (reject, residual = the target's token)."""
    target = torch.nn.functional.one_hot(torch.tensor([1, 0, 3, 0, 0]), V).double()
    draft = torch.nn.functional.one_hot(DRAFTS, V).double()
    gen = torch.Generator().manual_seed(0)
    out = vllm_v1_random(DRAFTS, CU, draft, target, BONUS, gen)
    assert out.tolist() == [[1, 0, -1, -1], [2, -1, -1, -1], [3, 0, 0, 1]]
    out = vllm_v1_random(DRAFTS, CU, None, target, BONUS, gen)  # no draft probabilities
    assert out.tolist() == [[1, 0, -1, -1], [2, -1, -1, -1], [3, 0, 0, 1]]


def test_a_batch_without_drafts_emits_the_bonus_tokens():
    empty = torch.zeros(0, dtype=torch.long)
    out = vllm_v1_random(empty, torch.tensor([0, 0]), None, torch.zeros((0, V)),
                         torch.tensor([[2], [3]]))
    assert out.tolist() == [[2], [3]]


def test_call_ragged_flattens_and_pads():
    seen = {}

    def spy(draft_token_ids, cu, draft_probs, target_probs, bonus, generator):
        seen.update(tokens=draft_token_ids.tolist(), cu=cu.tolist(), rows=target_probs.shape,
                    bonus=bonus.tolist())
        return vllm_v1_greedy(draft_token_ids, cu, draft_probs, target_probs, bonus)

    tokens = torch.tensor([[1, 2, 0], [0, 0, 0], [3, 0, 0]])
    target = torch.stack([torch.cat([rows(1, 3, 2), rows(2)]), torch.cat([rows(1, 1, 1),
                          rows(1)]), torch.cat([rows(3, 0, 0), rows(1)])])  # [3, 4, V]
    out = call_ragged(spy, tokens, None, target, np.array([2, 0, 3]), True, None,
                      np.random.default_rng(0))
    assert seen == {"tokens": [1, 2, 3, 0, 0], "cu": [2, 2, 5], "rows": (5, V),
                    "bonus": [[2], [1], [1]]}
    assert out.tolist() == [[1, 3, -1, -1], [1, -1, -1, -1], [3, 0, 0, 1]]


def test_a_ragged_sampler_of_the_wrong_width_is_bad_input():
    def padded_to_gamma(draft_token_ids, cu, draft_probs, target_probs, bonus, generator):
        return torch.full((len(cu), 5), -1, dtype=torch.long)

    with pytest.raises(SpecbatchError, match=r"max γ_b \+ 1"):
        conform(Sampler("wide", padded_to_gamma, interface="ragged"), samples=50,
                kinds=("paper",))


def greedy_reference(drafts: list, counts: list, target: torch.Tensor, bonus: list) -> list:
    """The greedy rule request by request, in plain Python (the slow twin)."""
    width, out, at = max(counts, default=0) + 1, [], 0
    for b, n in enumerate(counts):
        row = []
        for i in range(n):
            best = int(torch.argmax(target[at + i]))
            row.append(best)
            if drafts[at + i] != best:
                break
        else:
            row.append(bonus[b])
        out.append(row + [-1] * (width - len(row)))
        at += n
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_greedy_kernel_matches_its_per_request_twin(counts, seed):
    rng = np.random.default_rng(seed)
    total = sum(counts)
    drafts = rng.integers(0, V, size=total)
    target = torch.from_numpy(rng.dirichlet(np.ones(V), size=total))
    bonus = rng.integers(0, V, size=len(counts))
    out = vllm_v1_greedy(torch.from_numpy(drafts), torch.from_numpy(np.cumsum(counts)), None,
                         target.reshape(total, V), torch.from_numpy(bonus)[:, None])
    assert out.tolist() == greedy_reference(drafts.tolist(), counts, target, bonus.tolist())
