"""SGLang's adaptive speculative decoding: the config FILE, the flags that point at it, and
the parser twin.

SGLang reads ``--speculative-adaptive-config`` as a *path*: ``_load_adaptive_config`` in
python/sglang/srt/speculative/adaptive_spec_params.py (sgl-project/sglang@015c872628e3) opens
it and ``json.load``s it; a digit key is a batch-size slot whose ``candidate_steps`` must be a
non-empty list of non-negative integers; at least one slot. ``adaptive_unsupported_reason``
refuses the mode unless ``speculative_algorithm`` is EAGLE or EAGLE3 and
``speculative_eagle_topk`` is 1. A slot with one candidate is accepted by that parser but its
EMA (``AdaptiveStepSlot``) has nowhere to move (SGLang's own default has one such slot,
``"64": [0]``); a config whose slots all have the same single step is fixed K in adaptive
clothing: the twin refuses fewer than two distinct steps over all slots, and the emitter
writes two per slot.

**Emit** (:func:`adaptive_setting`): per schedule range, a slot keyed by its smallest batch
size (``AdaptiveStepRouter``: the largest slot key <= the batch size) whose candidates are
that bucket's two best K by simulated throughput; written to ``OUT/sglang_adaptive.json`` by
the caller; the flags name the file by path. **Otherwise** (not EAGLE/EAGLE-3, fewer than two
candidates anywhere) a one-line reason and the fixed-K flags.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbatch.analysis.engines.twin_input import twin_fail
from specbatch.errors import SpecbatchError

WHERE = "sglang --speculative-adaptive-config"
FILE_NAME = "sglang_adaptive.json"
#: specbatch draft -> SGLang --speculative-algorithm.
ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "ngram": "NGRAM"}


def algorithm(draft: str) -> str:
    return ALGORITHMS.get(str(draft).lower(), "STANDALONE")


def unsupported_reason(draft: str, topk: int = 1) -> str | None:
    """``adaptive_unsupported_reason``'s first two rules, for a specbatch draft."""
    algo = algorithm(draft)
    if algo not in ("EAGLE", "EAGLE3"):
        return (f"SGLang's adaptive mode runs only with EAGLE/EAGLE-3 (speculative_algorithm="
                f"{algo} for draft {draft})")
    if topk != 1:
        return f"SGLang's adaptive mode needs speculative_eagle_topk = 1, got {topk}"
    return None


def slots(buckets: list[dict], ranges: list[tuple[int, int, int]]) -> dict[str, dict]:
    """One slot per range, keyed by its smallest batch size: the two best K of the range's
    buckets by burst throughput (``buckets``: tune's chosen table, ``throughput`` by K)."""
    out = {}
    for lo, hi, _ in ranges:
        score: dict[int, float] = {}
        for b in buckets:
            if lo <= b["lo"] and b["hi"] <= hi:
                for k, v in b["throughput"].items():
                    score[int(k)] = score.get(int(k), 0.0) + float(v)
        best = sorted(score, key=lambda k: (-score[k], k))[:2]
        out[str(lo)] = {"candidate_steps": sorted(best)}
    return out


def flags(*, draft: str, model: str | None, steps: int, config_path: Path | None) -> str:
    """The launch flags: the algorithm, the draft, topk 1, the starting steps, and the
    adaptive config by path (None: fixed K, no adaptive mode)."""
    parts = [f"--speculative-algorithm {algorithm(draft)}"]
    if model:
        parts.append(f"--speculative-draft-model-path {model}")
    if algorithm(draft) != "NGRAM":  # NGRAM takes the draft tokens alone
        parts += ["--speculative-eagle-topk 1", f"--speculative-num-steps {steps}"]
    parts.append(f"--speculative-num-draft-tokens {steps + 1}")
    if config_path is not None:
        parts += ["--speculative-adaptive", f"--speculative-adaptive-config {config_path}"]
    return " ".join(parts)


def _fail(field: str, expected: str, got: Any) -> None:
    twin_fail(WHERE, field, expected, got)


def load_adaptive_config(path: str | Path, *, draft: str, topk: int = 1) -> dict[int, dict]:
    """The twin: open ``path`` as SGLang does, check it (module docstring), and return the
    slots ``{batch size: {**shared, **slot}}``; one-line errors name the file and field."""
    reason = unsupported_reason(draft, topk)
    if reason is not None:
        raise SpecbatchError(f"{WHERE}: {reason}")
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SpecbatchError(f"{WHERE} {path}: expected a readable JSON file, got {exc}"
                             ) from None
    if not isinstance(cfg, dict):
        _fail("(file)", "a JSON object", type(cfg).__name__)
    shared = {k: v for k, v in cfg.items() if not k.isdigit()}
    out: dict[int, dict] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                           for s in steps)):
            _fail(f"{key}.candidate_steps", "a list of non-negative ints", steps)
        out[int(key)] = {**shared, **entry}
    if not out:
        _fail("(keys)", 'at least one integer-string batch-size key, e.g. {"1": '
              '{"candidate_steps": [1, 3]}}', list(cfg))
    union = sorted({s for entry in out.values() for s in entry["candidate_steps"]})
    if len(union) < 2:
        _fail("candidate_steps", "at least 2 distinct steps over the slots (with one, no "
              "slot can adapt: fixed K)", union)
    return dict(sorted(out.items()))
