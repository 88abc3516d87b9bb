"""Request-length distributions: a workload described by flags instead of a file.

A distribution is written ``KIND:PARAMS`` (:func:`parse_lengths`):

- ``fixed:N``: every request has N tokens;
- ``uniform:A,B``: integers drawn uniformly from [A, B];
- ``lognormal:MEDIAN,SIGMA``: ``round(exp(N(ln MEDIAN, SIGMA²)))``, at least 1 (the usual
  shape of chat prompt and output lengths);
- ``trace``: the lengths the acceptance trace recorded, of requests drawn uniformly from it;
- ``sharegpt``: a preset, the lognormal fitted (maximum likelihood: median = exp(mean ln x),
  sigma = std ln x) on the 300 ShareGPT requests of the public vLLM runs bundled in
  traces/data/vllm_runs (casys-kaist/LLMServingSim, Llama-3.1-8B tokenizer; PROVENANCE.json):
  prompts median 733.4, sigma 0.550; outputs median 645.2, sigma 0.150. Judged by the
  Kolmogorov-Smirnov distance on log lengths: prompts 0.050 in sample, 0.058 on the same
  requests under Qwen3's tokenizer (the Qwen3 runs); outputs 0.152 / 0.171: those runs capped
  outputs near 1024 tokens, so the output side is a rough shape, not a fit to trust.

:func:`length_columns` draws prompt and output lengths for N requests from one seed (prompt
and output from independent streams; two ``trace`` sides draw the same trace request, so its
prompt and output stay paired) and returns the columns a workload file holds (``prompt_len``,
``output_len``, and ``category`` when a side came from the trace, so the request replays
acceptance from a trace request of its own category); :func:`length_table` is their
DataFrame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError

if TYPE_CHECKING:  # pandas loads with length_table only (the planner writes the columns)
    import pandas as pd

KINDS = ("fixed", "uniform", "lognormal", "trace")
#: Named presets: side ("prompt" / "output") -> lognormal (median, sigma) (module docstring).
PRESETS = {"sharegpt": {"prompt": (733.4, 0.550), "output": (645.2, 0.150)}}
#: Longest length a distribution may produce (longer draws are clipped to it).
MAX_LENGTH = 1 << 20


@dataclass(frozen=True)
class Lengths:
    """One length distribution (module docstring): ``kind`` and its numbers."""

    kind: str
    params: tuple[float, ...] = ()

    def describe(self) -> str:
        """The distribution as it is written on the command line."""
        if not self.params:
            return self.kind
        return f"{self.kind}:{','.join(f'{p:g}' for p in self.params)}"

    def mean(self) -> float | None:
        """Expected length in tokens (None for ``trace``: it depends on the trace)."""
        if self.kind == "fixed":
            return self.params[0]
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        if self.kind == "lognormal":
            return self.params[0] * math.exp(self.params[1] ** 2 / 2)
        return None


def parse_lengths(text: str, where: str) -> Lengths:
    """A :class:`Lengths` from ``fixed:N``, ``uniform:A,B``, ``lognormal:MEDIAN,SIGMA``,
    ``trace`` or a preset (``sharegpt``: its prompt or output side by ``where``, the flag
    ``--prompt-len`` / ``--output-len``); anything else is a one-line error naming ``where``."""
    kind, _, rest = str(text).strip().partition(":")
    kind = kind.lower()
    forms = "fixed:N, uniform:A,B, lognormal:MEDIAN,SIGMA, trace or sharegpt"
    if kind in PRESETS and not rest:
        side = "prompt" if "prompt" in where else "output" if "output" in where else None
        if side is None:
            raise SpecbatchError(f"{where}: expected a prompt or output length flag for "
                                 f"preset {kind!r}")
        return Lengths("lognormal", PRESETS[kind][side])
    if kind not in KINDS:
        raise SpecbatchError(f"{where}: expected {forms}, got {text!r}")
    if kind == "trace":
        if rest:
            raise SpecbatchError(f"{where}: expected 'trace' without numbers, got {text!r}")
        return Lengths("trace")
    try:
        params = tuple(float(p) for p in rest.split(","))
    except ValueError:
        raise SpecbatchError(f"{where}: expected {forms} with numbers, got {text!r}") from None
    want = 1 if kind == "fixed" else 2
    if len(params) != want or not all(math.isfinite(p) for p in params):
        raise SpecbatchError(f"{where}: expected {forms}, got {text!r}")
    _check_params(kind, params, where, text)
    return Lengths(kind, params)


def _check_params(kind: str, params: tuple[float, ...], where: str, text: str) -> None:
    def integral(p: float) -> bool:
        return p == int(p) and 1 <= p <= MAX_LENGTH

    if kind == "fixed" and not integral(params[0]):
        raise SpecbatchError(f"{where}: expected fixed:N with an integer 1 <= N <= {MAX_LENGTH}, "
                             f"got {text!r}")
    if kind == "uniform" and not (integral(params[0]) and integral(params[1])
                                  and params[0] <= params[1]):
        raise SpecbatchError(f"{where}: expected uniform:A,B with integers 1 <= A <= B <= "
                             f"{MAX_LENGTH}, got {text!r}")
    if kind == "lognormal" and not (1 <= params[0] <= MAX_LENGTH and 0 <= params[1] <= 3):
        raise SpecbatchError(f"{where}: expected lognormal:MEDIAN,SIGMA with 1 <= MEDIAN <= "
                             f"{MAX_LENGTH} and 0 <= SIGMA <= 3, got {text!r}")


def draw_lengths(dist: Lengths, n: int, rng: np.random.Generator,
                 recorded: np.ndarray | None = None) -> np.ndarray:
    """N lengths from ``dist``; ``recorded`` # [N] the trace lengths for kind ``trace``.
    returns # [N] int64, each in [1, MAX_LENGTH]"""
    if dist.kind == "fixed":
        out = np.full(n, dist.params[0])
    elif dist.kind == "uniform":
        out = rng.integers(int(dist.params[0]), int(dist.params[1]) + 1, size=n)
    elif dist.kind == "lognormal":
        out = np.rint(rng.lognormal(math.log(dist.params[0]), dist.params[1], size=n))
    else:
        out = np.asarray(recorded)
    return np.clip(out, 1, MAX_LENGTH).astype(np.int64)


def length_columns(prompt: Lengths, output: Lengths, n: int, seed: int,
                   trace_prompt: np.ndarray, trace_output: np.ndarray,
                   trace_category: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of a workload table of ``n`` requests (module docstring), each # [n];
    ``trace_*`` # [R] the trace's recorded request lengths and categories (used by ``trace``
    sides only)."""
    pick_seq, prompt_seq, output_seq = np.random.SeedSequence([int(seed), 0x1E9]).spawn(3)
    idx = np.random.default_rng(pick_seq).integers(0, len(trace_prompt), size=n)
    columns = {
        "prompt_len": draw_lengths(prompt, n, np.random.default_rng(prompt_seq),
                                   np.asarray(trace_prompt)[idx]),
        "output_len": draw_lengths(output, n, np.random.default_rng(output_seq),
                                   np.asarray(trace_output)[idx]),
    }
    if "trace" in (prompt.kind, output.kind):
        columns["category"] = np.asarray(trace_category, dtype=object)[idx].astype(str)
    return columns


def length_table(prompt: Lengths, output: Lengths, n: int, seed: int,
                 trace_prompt: np.ndarray, trace_output: np.ndarray,
                 trace_category: np.ndarray) -> pd.DataFrame:
    """:func:`length_columns` as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(length_columns(prompt, output, n, seed, trace_prompt, trace_output,
                                       trace_category))
