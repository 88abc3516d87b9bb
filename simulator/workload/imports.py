"""Workload files users already have, read into the workload table (prompt_len, output_len,
arrival): a ShareGPT-format JSON and a vLLM ``bench serve`` result file (``.json``; which one
is told by its shape).

**ShareGPT** (a JSON list of ``{"conversations": [{"from": ..., "value": ...}, ...]}``): as
vLLM's benchmark reads it (vllm/benchmarks/datasets/sharegpt.py @237145ea,
``ShareGPTDataset``): entries with at least two turns, the first turn the prompt and the
second the completion; lengths are token counts of those two texts. Unlike vLLM's sampler the
file order is kept (vLLM shuffles with its seed) and no length filter is applied (vLLM's
``is_valid_sequence`` drops short and long pairs); a turn of empty text counts 1 token. Token
counts come from the target's own tokenizer when the target is a local model directory with
one (``tokenizer.json`` or ``tokenizer_config.json``; transformers' ``AutoTokenizer``, offline,
``len(tokenizer(text).input_ids)`` as vLLM counts), otherwise from
:data:`CHARS_PER_TOKEN` characters per token, ceil (an estimate: OpenAI's rule of thumb for
English text, not a fit; code and other languages tokenise denser).

**vLLM bench serve result** (``--save-result --save-detailed``: a JSON object with
``input_lens`` and ``output_lens``, vllm/benchmarks/serve.py): one row per request with those
lengths. Arrivals are drawn as vLLM's ``get_request`` draws them: gap i ~
``Gamma(shape=burstiness, scale=1 / (request_rate * burstiness))`` from numpy's global
(legacy ``RandomState``) stream seeded by ``--seed`` (vLLM's own ``--seed``; a result file does
not record it), cumulated, then rescaled so the last request is sent at ``N / request_rate``;
``burstiness`` inf gives constant gaps 1 / rate, ``request_rate`` "inf" all at 0. This is
exact only if nothing drew from numpy's global stream before ``get_request`` in that vLLM run
(dataset samplers that use numpy do); a ramp-up (``ramp_up_strategy``) is refused. Requests
that failed (output length 0) are dropped after the arrivals are drawn, so the others keep
their times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.errors import SpecbatchError, require

#: Characters per token of the estimate (no local tokenizer).
CHARS_PER_TOKEN = 4.0


def is_json_workload(path: Path) -> bool:
    return path.suffix.lower() == ".json"


def read_json_workload(path: Path, *, tokenizer: str | None = None, seed: int = 0
                       ) -> tuple[pd.DataFrame, str]:
    """The workload table of a ShareGPT or bench-serve JSON and a line saying how its
    lengths (and arrivals) were obtained."""
    where = f"workload {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise SpecbatchError(f"{where}: expected a readable JSON file, got "
                             f"{str(exc).splitlines()[0]}") from None
    if isinstance(data, list):
        return sharegpt_table(data, where, tokenizer)
    if isinstance(data, dict) and "input_lens" in data:
        return bench_table(data, where, seed)
    raise SpecbatchError(f"{where}: expected a ShareGPT list of conversations or a vLLM bench "
                         "serve result with input_lens/output_lens (--save-detailed), got "
                         f"{type(data).__name__}")


def token_counter(tokenizer: str | None) -> tuple[Callable[[str], int], str]:
    """(text -> tokens, how): the local tokenizer of ``tokenizer`` (a model directory) or the
    characters-per-token estimate."""
    if tokenizer is not None:
        folder = Path(tokenizer)
        folder = folder.parent if folder.suffix == ".json" else folder
        if (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            return (lambda text: len(tok(text).input_ids)), f"the tokenizer of {folder}"
    return (lambda text: max(1, math.ceil(len(text) / CHARS_PER_TOKEN)),
            f"{CHARS_PER_TOKEN:g} characters per token (an estimate: no local tokenizer)")


def sharegpt_table(data: list, where: str, tokenizer: str | None) -> tuple[pd.DataFrame, str]:
    count, how = token_counter(tokenizer)
    prompt, output = [], []
    for i, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        texts = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
        require(all(isinstance(t, str) for t in texts), f"{where}: field conversations: "
                f"expected turns with a string 'value', got {turns[:2]!r:.80} in entry {i}")
        prompt.append(max(1, count(texts[0])))
        output.append(max(1, count(texts[1])))
    require(bool(prompt), f"{where}: expected ShareGPT entries with at least two turns, got "
            "none")
    frame = pd.DataFrame({"prompt_len": prompt, "output_len": output})
    return frame, f"ShareGPT: first two turns of {len(frame)} conversations; tokens by {how}"


def bench_arrivals(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """vLLM ``get_request``'s send times (module docstring).  returns # [n] float64"""
    if math.isinf(rate):
        return np.zeros(n)
    rng = np.random.RandomState(seed)  # np.random.seed(seed)'s stream
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        theta = 1.0 / (rate * burstiness)
        gaps = np.array([rng.gamma(shape=burstiness, scale=theta) for _ in range(n)])
    times = np.cumsum(gaps)
    if times[-1] != 0:
        times = times * ((n / rate) / times[-1])
    return times


def bench_table(data: dict, where: str, seed: int) -> tuple[pd.DataFrame, str]:
    inputs, outputs = data.get("input_lens"), data.get("output_lens")
    ok = (isinstance(inputs, list) and isinstance(outputs, list) and len(inputs) == len(outputs)
          and len(inputs) > 0)
    require(ok, f"{where}: field output_lens: expected two lists of equal, non-zero length "
            "(input_lens, output_lens; bench serve --save-detailed), got "
            f"{type(outputs).__name__}")
    require(data.get("ramp_up_strategy") is None, f"{where}: field ramp_up_strategy: expected "
            f"none (a ramp-up's arrivals are not reproduced), got {data.get('ramp_up_strategy')!r}")
    rate = data.get("request_rate", "inf")
    rate = math.inf if rate == "inf" else rate
    burst = data.get("burstiness")
    burst = 1.0 if burst is None else math.inf if burst == "inf" else burst
    require(isinstance(rate, (int, float)) and rate > 0, f"{where}: field request_rate: "
            f"expected requests/s > 0 or 'inf', got {data.get('request_rate')!r}")
    require(isinstance(burst, (int, float)) and burst > 0, f"{where}: field burstiness: "
            f"expected a number > 0, got {data.get('burstiness')!r}")
    arrival = bench_arrivals(len(inputs), float(rate), float(burst), seed)
    frame = pd.DataFrame({"prompt_len": inputs, "output_len": outputs, "arrival": arrival})
    done = pd.to_numeric(frame["output_len"], errors="coerce").fillna(0) > 0
    frame = frame[done].reset_index(drop=True)
    require(len(frame) > 0, f"{where}: field output_lens: expected at least one completed "
            "request (output length > 0), got none")
    how = (f"vLLM bench serve result: {len(frame)} completed of {len(inputs)} requests; "
           f"arrivals as get_request draws them at {data.get('request_rate')} req/s, "
           f"burstiness {data.get('burstiness', 1.0)}, seed {seed} (exact if nothing drew from "
           "numpy's global stream first)")
    return frame, how
