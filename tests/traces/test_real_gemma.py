"""Capture on the real Gemma-3-270M (sliding window 512) past its window: the fast path's
shared caches and real-position masks equal the naive per-position twin. Slow (about two
minutes on one CPU thread); needs ``models/gemma3`` and ``models/gemma3-drop2``::

    specbatch models get gemma3-270m
    specbatch models convert gemma3-270m --out models/gemma3
    specbatch models derive --from models/gemma3 --drop 8-9 --out models/gemma3-drop2
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.slow
def test_real_gemma_capture_past_the_window_equals_naive():
    if not (MODELS / "gemma3" / "config.json").is_file() or not (
            MODELS / "gemma3-drop2" / "config.json").is_file():
        pytest.skip("models/gemma3 and models/gemma3-drop2 not present (see the docstring)")
    import torch

    from specbatch.traces.capture.chain import (
        CaptureConfig,
        capture_request,
        capture_request_naive,
        load_pair,
    )
    from specbatch.traces.capture.drafters import sliding_window
    from specbatch.traces.capture.prompts import default_prompts

    torch.set_num_threads(1)
    tok, draft, target = load_pair(str(MODELS / "gemma3-drop2"), str(MODELS / "gemma3"))
    window = sliding_window(target)
    assert window == 512
    text = " ".join(p.text for p in default_prompts(40, 3))
    ids = tok(text)["input_ids"][:window - 4]  # prompt + outputs + K cross the window
    cfg = CaptureConfig(max_new_tokens=6, depth=4, temperature=1.0, batch_size=3,
                        stop_at_eos=False, max_prompt_tokens=window)
    fast = capture_request(tok, draft, target, ids, 3, cfg)
    naive = capture_request_naive(tok, draft, target, ids, 3, cfg)
    np.testing.assert_array_equal(fast["y"], naive["y"])
    np.testing.assert_array_equal(fast["draft_token"], naive["draft_token"])
    for name in ("q", "pt", "z"):
        np.testing.assert_allclose(fast[name], naive[name], atol=2e-5, err_msg=name)
