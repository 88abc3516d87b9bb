"""vLLM's *proposed* per-(batch size, context length) schedule: emitted only when asked
(``tune --vllm-context-buckets``) and marked NOT MERGED.

RFC vllm-project/vllm#48627 and PR #54801 propose 5-item entries ``(bs_lo, bs_hi, ctx_lo,
ctx_hi, K)`` forming a rectangular grid (``validate_and_normalize_dynamic_sd_schedule`` at
vllm@14b450ca reads them; analysis.engines.vllm.check_proposal_table is its twin). The merged
``SpeculativeConfig`` (vllm@002e77c1) types the field ``list[tuple[int, int, int]]``: no
released vLLM accepts this table.

**How K is chosen per cell.** The context ranges are ``[1, c1], [c1 + 1, c2], ...,
[c_last + 1, inf)`` from the given cuts. Each range is represented by one prompt length (the
rounded geometric mean of its ends; the open last range by twice its start) and tune's step 1
(analysis.tune.tuner.choose: a burst per batch-size bucket at every K) runs on a workload
whose prompts all have that length and whose outputs are drawn from the question's output
distribution. The grid keeps tune's buckets unmerged (the grid needs the same batch ranges in
every context row). **Not validated**: the simulator applies no context-dependent K, so the
table is not run against the best fixed K the way tune's other settings are.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from specbatch.analysis.engines import vllm
from specbatch.analysis.engines.draft_model import draft_of, model_id
from specbatch.analysis.engines.versions import short
from specbatch.errors import require

OPEN = 2**31 - 1
STATUS = ("NOT MERGED: vLLM RFC #48627 / PR #54801; no released vLLM accepts 5-item "
          "num_speculative_tokens_per_batch_size entries")


def context_ranges(cuts: tuple[int, ...]) -> list[tuple[int, int]]:
    """``[1, c1], [c1 + 1, c2], ..., [c_last + 1, OPEN]``."""
    require(len(cuts) > 0 and all(c >= 1 for c in cuts) and list(cuts) == sorted(set(cuts)),
            f"--vllm-context-buckets: expected increasing context lengths >= 1, got {cuts}")
    los = [1, *(c + 1 for c in cuts)]
    his = [*cuts, OPEN]
    return list(zip(los, his))


def representative(lo: int, hi: int) -> int:
    """One prompt length for a context range: the rounded geometric mean of its ends, twice
    the start of the open last range."""
    return 2 * lo if hi == OPEN else max(1, round(math.sqrt(lo * hi)))


def context_table(question, run: Callable, cuts: tuple[int, ...], output) -> dict:
    """The proposal (module docstring): its flag, its cells, and what it is not."""
    from specbatch.analysis.plan.planner import write_length_workload
    from specbatch.analysis.tune.tuner import choose
    from specbatch.simulator.workload.lengths import Lengths

    ranges = context_ranges(tuple(cuts))
    entries: list[list[int]] = []
    lengths = []
    with tempfile.TemporaryDirectory(prefix="specbatch-ctx-") as tmp:
        for i, (lo, hi) in enumerate(ranges):
            length = representative(lo, hi)
            lengths.append(length)
            path = write_length_workload(question.base, Lengths("fixed", (float(length),)),
                                         output, Path(tmp) / f"ctx{i}.csv")
            chosen = choose(replace(question, base={**question.base, "workload": str(path)}),
                            run)
            entries += [[b["lo"], b["hi"], lo, hi, b["k"]] for b in chosen]
    vllm.check_proposal_table(entries)
    top = max(1, max(e[4] for e in entries))
    config = {"method": vllm.method_of(draft_of(question.base)),
              "model": model_id(question.base), "num_speculative_tokens": top}
    if config["model"] is None:
        del config["model"]
    vllm.check_speculative_config(config)  # every field but the proposed table
    config["num_speculative_tokens_per_batch_size"] = entries
    return {"setting": vllm.flag(config), "status": STATUS,
            "context_ranges": [list(r) for r in ranges], "prompt_lengths": lengths,
            "validated": "no: the simulator applies no context-dependent K",
            "checked_against": short("vllm-proposal")}
