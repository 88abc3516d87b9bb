"""Capture's memory (issue 46: SmolLM2-135M with its 2-layer draft peaked at 3.4 GB RSS for 4
prompts): the shared prefix cache is a view, a scoring pass stores no concatenated layer, and
prefills compute only the logits they read; the numbers are those of the copying code."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.traces.capture.cache_api import cache_kwargs, last_logits  # noqa: E402
from specbatch.traces.capture.chain import load_pair  # noqa: E402
from specbatch.traces.capture.drafters import Layout, full_cache, shared_cache  # noqa: E402
from specbatch.traces.capture.positions import score_paths  # noqa: E402
from tests.traces.capture.test_chain import _save_pair  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    _, draft, target = load_pair(*_save_pair(tmp_path_factory.mktemp("pair")))
    return draft, target


def prefix_cache(target, length: int):
    ids = torch.arange(1, length + 1)[None] % 200
    with torch.inference_mode():
        out = target(input_ids=ids, **cache_kwargs(target, full_cache()), use_cache=True)
    return out


def test_the_shared_prefix_is_a_view_and_a_scoring_pass_stores_nothing(models):
    _, target = models
    out = prefix_cache(target, 20)
    base = out.past_key_values if hasattr(out, "past_key_values") else out.cache
    cache = shared_cache(base, 12, rows=32, keep=False)
    for mine, theirs in zip(cache.layers, base.layers):
        assert mine.keys.stride(0) == 0 and mine.keys.data_ptr() == theirs.keys.data_ptr()
        assert mine.keys.shape == (32, theirs.keys.shape[1], 12, theirs.keys.shape[3])
    new = torch.zeros(32, base.layers[0].keys.shape[1], 3, base.layers[0].keys.shape[3])
    k, _ = cache.layers[0].update(new, new)
    assert k.shape[2] == 15 and cache.layers[0].keys.shape[2] == 12  # returned, not stored
    kept = shared_cache(base, 12, rows=32)
    kept.layers[0].update(new, new)
    assert kept.layers[0].keys.shape[2] == 15  # the draft's K steps keep their tokens


def test_scoring_on_the_view_gives_the_copied_caches_numbers(models):
    """The same target rows, bit for bit, as a cache holding 4 real copies of the prefix."""
    from transformers import DynamicCache

    _, target = models
    out = prefix_cache(target, 20)
    base = out.past_key_values if hasattr(out, "past_key_values") else out.cache
    row0 = out.logits[0, -1].expand(4, -1)
    ts, x = torch.tensor([0, 1, 2, 3]), torch.randint(0, 200, (4, 3))
    with torch.inference_mode():
        mine = score_paths(target, base, row0, 16, ts, x, row0.shape[-1])
        layout = Layout(16, ts, 3)
        copied = DynamicCache([(layer.keys[:, :, :layout.prefix].repeat(4, 1, 1, 1),
                                layer.values[:, :, :layout.prefix].repeat(4, 1, 1, 1))
                               for layer in base.layers])
        theirs = target(input_ids=x, **cache_kwargs(target, copied), use_cache=True,
                        attention_mask=layout.masks(target, layout.mask(3), 3),
                        position_ids=layout.new_pos).logits
    np.testing.assert_array_equal(mine[:, 1:].numpy(), theirs.numpy())


def test_a_prefill_computes_only_the_logits_it_reads(models):
    _, target = models
    assert last_logits(target, 1) == {"logits_to_keep": 1}
    ids = torch.arange(1, 31)[None] % 200
    with torch.inference_mode():
        whole = target(input_ids=ids).logits
        last = target(input_ids=ids, **last_logits(target, 4)).logits
    assert last.shape[1] == 4
    np.testing.assert_allclose(last.numpy(), whole[:, -4:].numpy(), rtol=1e-5, atol=1e-5)


def test_path_statistics_split_by_rows_are_those_of_one_call(monkeypatch):
    """Capture computes the path statistics a few rows at a time (positions.by_rows) to bound
    the float64 [rows, K+1, V] tables; each statistic is its row's own, bit for bit."""
    from specbatch.theory.verify.torch_path_stats import path_stats_torch
    from specbatch.traces.capture import positions

    g = torch.Generator().manual_seed(0)
    p, k, v = 12, 4, 5000
    dl, tl = torch.randn(p, k, v, generator=g) * 4, torch.randn(p, k + 1, v, generator=g) * 4
    x = torch.randint(0, v, (p, k), generator=g)
    whole = path_stats_torch(x, dl, tl, 0.7)
    monkeypatch.setattr(positions, "STATS_BYTES", 8 * (k + 1) * v * 5)  # 5 rows a call
    calls = []

    def stats_of(rows):
        calls.append(rows)
        return path_stats_torch(x[rows], dl[rows], tl[rows], 0.7)

    split = positions.by_rows(stats_of, x, tl)
    assert [(r.start, r.stop) for r in calls] == [(0, 5), (5, 10), (10, 15)]
    for name, value in whole.items():
        np.testing.assert_array_equal(split[name], value, err_msg=name)
