"""Capturing a trace from a live draft/target pair of Hugging Face causal LMs.

Reading order: ``loading`` (load the pair), ``prompts`` (what to prompt with), ``cache_api``
(the KV cache's name in transformers), ``drafters`` (who proposes the K tokens), ``ngram``
(prompt-lookup drafting), ``positions`` (one request's position rows), ``chain`` (the capture
run), ``resume`` (resumable state), ``tree`` (static draft trees), ``profile`` (forward-pass
latency profiles of a model).
"""
