"""``traces.capture.cache_api``: the KV cache goes to and comes from a forward pass under the name
the installed transformers declares, so no deprecation warning is raised and nothing changes."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_the_name_follows_the_models_forward_signature():
    from specbatch.traces.capture.cache_api import cache_argument

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None):
            return input_ids

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None):
            return input_ids

    assert cache_argument(New()) == "cache" and cache_argument(Old()) == "past_key_values"


def test_a_cached_decode_step_warns_nothing_and_equals_a_full_pass():
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from specbatch.traces.capture.cache_api import cache_kwargs, returned_cache

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([[3, 7, 11, 5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a FutureWarning about the cache name fails here
        with torch.no_grad():
            out = model(input_ids=ids[:, :3], **cache_kwargs(model, DynamicCache()),
                        use_cache=True)
            cache = returned_cache(out)
            assert cache.get_seq_length() == 3
            step = model(input_ids=ids[:, 3:], **cache_kwargs(model, cache), use_cache=True)
            full = model(input_ids=ids, use_cache=False)
    torch.testing.assert_close(step.logits[0, -1], full.logits[0, -1], rtol=1e-5, atol=1e-5)
