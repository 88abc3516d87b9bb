"""Model shapes and real weights: what a pass costs and where the capture models come from.

Reading order: ``model_shape`` (the ModelShape record), ``hf_config`` / ``hf_moe`` (shapes, MoE
and quantisation fields from a config.json), ``shapes`` (architecture shapes of widely used
models, by name or config.json path), ``weights`` (pretrained weights from
the package index), ``quantize`` (quantised self-drafts), ``zoo_parts`` / ``zoo`` (a small pair
trained locally, no downloads).
"""
