"""simulator.workload.lengths' ``sharegpt`` preset: the lognormal refitted here from the
bundled public ShareGPT requests (traces/data/vllm_runs) equals the preset's numbers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.workload.lengths import PRESETS, parse_lengths

RUNS = Path(__file__).resolve().parents[3] / "traces" / "data" / "vllm_runs"


def lengths(run: str, key: str) -> np.ndarray:
    with gzip.open(RUNS / run / "requests.jsonl.gz") as f:
        return np.array([json.loads(line)[key] for line in f])


@pytest.mark.parametrize("side, key", [("prompt", "input_toks"), ("output", "output_toks")])
def test_the_preset_is_the_maximum_likelihood_lognormal_of_the_public_requests(side, key):
    logs = np.log(lengths("rtxpro6000-llama-3.1-8b", key))
    median, sigma = PRESETS["sharegpt"][side]
    assert median == pytest.approx(float(np.exp(logs.mean())), abs=0.05)
    assert sigma == pytest.approx(float(logs.std()), abs=0.0005)


def test_the_preset_reads_by_flag():
    assert parse_lengths("sharegpt", "--prompt-len").params == PRESETS["sharegpt"]["prompt"]
    assert parse_lengths("ShareGPT", "--output-len").params == PRESETS["sharegpt"]["output"]
    assert parse_lengths("sharegpt", "--prompt-len").kind == "lognormal"
    with pytest.raises(SpecbatchError, match="prompt or output"):
        parse_lengths("sharegpt", "lengths")
