"""The slot cache gives every row exactly its own sequence: packed or batched prefill and
decode passes after rows leave match a fresh full forward of each request alone."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.live.cache import SlotCache  # noqa: E402
from tests.live.helpers import IDS  # noqa: E402


def _alone(model, ids: list[int]):
    """Last-token logits of one sequence, no cache."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


@pytest.mark.parametrize("prompts", [IDS, [[1, 2, 3], [4, 5, 6], [7, 8, 9]]],
                         ids=["unequal-packed", "equal-batched"])
def test_prefill_logits_equal_each_prompt_alone(models, prompts):
    target = models[1]
    cache = SlotCache(target, slots=8, length=32)
    with torch.inference_mode():
        logits = cache.prefill(target, prompts)
    for i, p in enumerate(prompts):
        torch.testing.assert_close(logits[i], _alone(target, p), rtol=1e-4, atol=1e-4)
    assert cache.n == len(prompts) and list(cache.count[:cache.n]) == [len(p) for p in prompts]


def test_rows_leave_and_the_rest_decode_as_if_alone(models):
    target = models[1]
    cache = SlotCache(target, slots=8, length=32)
    seqs = [list(p) for p in IDS]
    with torch.inference_mode():
        cache.prefill(target, seqs[:3])
        cache.prefill(target, seqs[3:])  # joiners take rows 3, 4
        order = cache.remove(np.array([0, 2]))  # rows 0 and 2 leave; 3 and 4 move in
        assert sorted(order.tolist()) == [1, 3, 4] and cache.n == 3
        nxt = torch.tensor([[50], [51], [52]])
        logits = cache.forward(target, nxt)[:, -1]
    for r, old in enumerate(order.tolist()):
        torch.testing.assert_close(logits[r], _alone(target, seqs[old] + [50 + r]),
                                   rtol=1e-4, atol=1e-4)


def test_mixed_pass_gives_every_row_and_joiner_its_own_sequence(models):
    """vllm-v1's mixed step: running rows' new tokens (different widths) and whole prompts of
    joiners packed into one pass; each sees only its own sequence."""
    target = models[1]
    cache = SlotCache(target, slots=8, length=32)
    seqs = [list(p) for p in IDS[:3]]
    ids = torch.tensor([[50, 51, 52], [53, 0, 0], [54, 55, 0]])
    width = np.array([3, 1, 2])
    with torch.inference_mode():
        cache.prefill(target, seqs)
        rows, first = cache.mixed(target, ids, width, [IDS[3], IDS[4]])
    assert rows.shape[:2] == (3, 3) and first.shape[0] == 2
    for i, seq in enumerate(seqs):
        for r in range(3):
            fed = ids[i, :min(r, width[i] - 1) + 1].tolist()  # past the width: its last
            torch.testing.assert_close(rows[i, r], _alone(target, seq + fed),
                                       rtol=1e-4, atol=1e-4)
    for j, prompt in enumerate(IDS[3:]):
        torch.testing.assert_close(first[j], _alone(target, prompt), rtol=1e-4, atol=1e-4)
    assert cache.n == 5 and list(cache.count[:5]) == [3, 7, 1, 4, 2]  # callers commit rows
