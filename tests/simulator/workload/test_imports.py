"""simulator.workload.imports: ShareGPT lengths (vLLM's first-two-turns rule; a local
tokenizer or the stated characters-per-token estimate) and vLLM bench serve result files
(arrivals drawn exactly as vLLM's get_request draws them from numpy's global stream)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.workload.arrivals import read_workload_file
from specbatch.simulator.workload.imports import CHARS_PER_TOKEN, bench_arrivals


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def conversation(prompt: str, answer: str, more: int = 0) -> dict:
    turns = [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]
    return {"id": "x", "conversations": turns + [{"from": "human", "value": "and?"}] * more}


def test_sharegpt_takes_the_first_two_turns_by_the_characters_estimate(tmp_path):
    path = write(tmp_path, "s.json", [conversation("a" * 10, "b" * 17, more=2),
                                      {"id": "solo", "conversations": [{"from": "human",
                                                                        "value": "hi"}]},
                                      conversation("", "c" * 4)])
    data = read_workload_file(path)
    # ceil(10 / 4) = 3, ceil(17 / 4) = 5; the one-turn entry is skipped; "" counts 1 token
    assert CHARS_PER_TOKEN == 4.0
    assert data["prompt_len"].tolist() == [3, 1] and data["output_len"].tolist() == [5, 1]
    assert np.isnan(data["arrival"]).all()


def test_sharegpt_uses_the_targets_local_tokenizer(tmp_path):
    """A whitespace word-level tokenizer saved next to the target: tokens = words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "one": 1, "two": 2, "three": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path)
    path = write(tmp_path, "s.json", [conversation("one two three two", "one")])
    data = read_workload_file(path, tokenizer=str(tmp_path))
    assert data["prompt_len"].tolist() == [4] and data["output_len"].tolist() == [1]
    # no tokenizer there: the estimate (ceil(17 / 4) = 5, ceil(3 / 4) = 1)
    assert read_workload_file(path, tokenizer="meta-llama/Llama-3.1-8B")["prompt_len"].tolist() \
        == [5]


def vllm_get_request_twin(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """vllm/benchmarks/serve.py get_request's delays, written as vLLM writes them: the global
    numpy stream after np.random.seed(seed), one np.random.gamma call per request, cumulated,
    rescaled to end at n / rate."""
    np.random.seed(seed)
    delay = []
    for _ in range(n):
        if burstiness == float("inf"):
            delay.append(1.0 / rate)
        else:
            delay.append(np.random.gamma(shape=burstiness, scale=1.0 / (rate * burstiness)))
    for i in range(1, n):
        delay[i] += delay[i - 1]
    factor = (n / rate) / delay[-1]
    return [d * factor for d in delay]


@pytest.mark.parametrize("rate, burstiness, seed", [(4.0, 1.0, 0), (10.0, 0.5, 7),
                                                    (2.5, 3.0, 123), (3.0, float("inf"), 0)])
def test_bench_arrivals_are_vllms_get_request(rate, burstiness, seed):
    ours = bench_arrivals(50, rate, burstiness, seed)
    assert ours.tolist() == pytest.approx(vllm_get_request_twin(50, rate, burstiness, seed),
                                          rel=1e-12)
    assert ours[-1] == pytest.approx(50 / rate)
    assert bench_arrivals(5, math.inf, 1.0, 0).tolist() == [0.0] * 5


def test_a_bench_result_gives_lengths_and_arrivals_and_drops_failures(tmp_path):
    result = {"request_rate": 4.0, "burstiness": 1.0, "input_lens": [10, 20, 30, 40],
              "output_lens": [5, 0, 7, 9], "ttfts": [0.1] * 4}
    data = read_workload_file(write(tmp_path, "b.json", result), seed=3)
    times = vllm_get_request_twin(4, 4.0, 1.0, 3)
    assert data["prompt_len"].tolist() == [10, 30, 40]
    assert data["arrival"].tolist() == pytest.approx([times[0], times[2], times[3]])


@pytest.mark.parametrize("data, needle", [
    ({"request_rate": 4.0, "output_lens": [1]}, "ShareGPT list"),
    ({"input_lens": [1, 2], "output_lens": [1]}, "output_lens"),
    ({"input_lens": [1], "output_lens": [1], "ramp_up_strategy": "linear"}, "ramp_up"),
    ({"input_lens": [1], "output_lens": [1], "request_rate": -1}, "request_rate"),
    ({"input_lens": [1], "output_lens": [0]}, "completed"),
    ([{"conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "x"}]}],
     "conversations"),
    ([{"id": 1}], "at least two turns"),
])
def test_bad_files_are_one_line_errors_naming_the_field(tmp_path, data, needle):
    with pytest.raises(SpecbatchError, match=needle):
        read_workload_file(write(tmp_path, "w.json", data))
