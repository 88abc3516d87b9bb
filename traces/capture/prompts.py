"""Prompts for capture: prompt files and the default prompts cut from the local corpus.

Two jobs:

1. **Read prompt files** (:func:`load_prompts`): JSONL with one ``{"prompt": ...}`` object per
   line (an optional ``"category"`` field is kept), a ShareGPT-style JSON list
   (``[{"conversations": [{"from": "human", "value": ...}, ...]}, ...]``: the first human
   turn is the prompt), a JSON list of strings or of ``{"prompt": ...}`` objects, or plain
   text with one prompt per line.
2. **Default prompts** (:func:`default_prompts`): cut from the held-out split of the local
   corpus (traces.corpus), which the zoo does not train on.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from specbatch.errors import SpecbatchError
from specbatch.io import atomic_write
from specbatch.limits import MAX_PROMPTS, check_size
from specbatch.traces.corpus import stdlib_documents


@dataclass(frozen=True)
class Prompt:
    """One capture prompt: its text and a source category (``code``, ``prose``, ...)."""

    text: str
    category: str = "prompt"


# ----------------------------------------------------------------------------- prompt files
def _from_record(record: object, path: str, index: int) -> Prompt:
    if isinstance(record, str):
        return Prompt(record)
    if isinstance(record, dict):
        if "prompt" in record:
            text = record["prompt"]
            if not isinstance(text, str):
                raise SpecbatchError(f"file {path}: record {index}: field prompt: "
                                     f"expected a string, got {type(text).__name__}")
            return Prompt(text, str(record.get("category", "prompt")))
        turns = record.get("conversations", record.get("messages"))
        if isinstance(turns, list):
            for turn in turns:
                if not isinstance(turn, dict):
                    continue
                who = turn.get("from", turn.get("role"))
                text = turn.get("value", turn.get("content"))
                if who in ("human", "user") and isinstance(text, str):
                    return Prompt(text, "sharegpt")
    raise SpecbatchError(f"file {path}: record {index}: expected a string, a {{\"prompt\": ...}} "
                         f"object or a ShareGPT conversation, got {str(record)[:60]!r}")


def load_prompts(path: str | Path, limit: int | None = None) -> list[Prompt]:
    """Prompts from JSONL, JSON (ShareGPT-style or a list) or plain text (one per line).

    Empty prompts are skipped; ``limit`` keeps the first ``limit`` ones.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecbatchError(f"file {path}: expected a prompts file (JSONL, JSON or text), "
                             "got no such file")
    text = path.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    prompts: list[Prompt]
    if path.suffix == ".jsonl" or (stripped.startswith("{") and "\n{" in stripped):
        prompts = []
        for i, line in enumerate(text.splitlines()):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecbatchError(f"file {path}: line {i + 1}: expected one JSON object, "
                                     f"got invalid JSON ({exc.msg})") from None
            prompts.append(_from_record(record, str(path), i))
    elif path.suffix == ".json" or stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecbatchError(f"file {path}: expected JSON, got invalid JSON ({exc.msg})"
                                 ) from None
        if isinstance(data, dict):
            data = data.get("prompts", data.get("data", [data]))
        if not isinstance(data, list):
            raise SpecbatchError(f"file {path}: expected a JSON list of prompts, "
                                 f"got {type(data).__name__}")
        prompts = [_from_record(r, str(path), i) for i, r in enumerate(data)]
    else:
        prompts = [Prompt(line) for line in text.splitlines()]
    prompts = [p for p in prompts if p.text.strip()]
    if not prompts:
        raise SpecbatchError(f"file {path}: expected at least one prompt, got none")
    return prompts[:limit] if limit is not None else prompts


def write_prompts_jsonl(prompts: list[Prompt], path: str | Path) -> None:
    """Write prompts as JSONL (``{"prompt": ..., "category": ...}`` per line)."""
    atomic_write(path, "".join(json.dumps({"prompt": p.text, "category": p.category}) + "\n"
                               for p in prompts))


# ----------------------------------------------------------------------------- default prompts
def _cut_code(doc: str, rng: random.Random, min_chars: int, max_chars: int) -> str | None:
    """A prefix of a source file ending at a line start, between min and max chars long."""
    lines = doc.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    ok = [s for s in starts if s >= min_chars]
    if not ok:
        return None
    cut = rng.choice(ok)
    begins = [s for s in starts if cut - max_chars <= s <= cut - min_chars]
    if not begins:
        return None
    return doc[rng.choice(begins):cut]


def _cut_prose(doc: str, rng: random.Random, min_chars: int, max_chars: int) -> str | None:
    """A span of prose ending just after a sentence end or at a word boundary."""
    if len(doc) < min_chars + 20:
        return None
    begin = rng.randrange(0, max(1, len(doc) - min_chars))
    space = doc.find(" ", begin)
    begin = 0 if space < 0 or begin == 0 else space + 1
    end_max = min(len(doc), begin + max_chars)
    chunk = doc[begin:end_max]
    stops = [i + 1 for i, ch in enumerate(chunk) if ch in ".:" and i + 1 >= min_chars]
    if stops:
        return chunk[: rng.choice(stops)] + " "
    spaces = [i for i, ch in enumerate(chunk) if ch == " " and i >= min_chars]
    return chunk[: spaces[0] + 1] if spaces else None


def default_prompts(n_code: int, n_prose: int, seed: int = 0, min_chars: int = 200,
                    max_chars: int = 1200) -> list[Prompt]:
    """Code-completion and English-prose prompts cut from the held-out local text.

    Code prompts are prefixes of held-out stdlib source files ending at a line start; prose
    prompts are spans of held-out help topics / docstrings ending after a sentence. Seeded.
    Prompts alternate code, prose, code, ... while both kinds last.
    """
    rng = random.Random(seed)
    out: dict[str, list[Prompt]] = {"code": [], "prose": []}
    for kind, n, cut in (("code", n_code, _cut_code), ("prose", n_prose, _cut_prose)):
        docs = [d for d in stdlib_documents(kind, "heldout") if len(d) >= min_chars + 20]
        if n and not docs:
            raise SpecbatchError(f"local corpus: expected held-out {kind} text, got none")
        order = list(range(len(docs)))
        rng.shuffle(order)
        i = 0
        while len(out[kind]) < n and i < 50 * max(n, 1):
            text = cut(docs[order[i % len(order)]], rng, min_chars, max_chars)
            i += 1
            if text and text.strip():
                out[kind].append(Prompt(text, kind))
    mixed: list[Prompt] = []
    for i in range(max(n_code, n_prose)):
        for kind in ("code", "prose"):
            if i < len(out[kind]):
                mixed.append(out[kind][i])
    return mixed


def resolve_prompts(spec: str, limit: int | None):
    """Prompts and a description of their source from ``--prompts``: ``default:N[:SEED]`` or a
    prompts file. ``random:N:LEN`` token ids need no tokenizer and are resolved by the live
    run itself (:func:`specbatch.live.model_pair.random_prompts`); here they are refused with the
    sources that are text."""
    if spec.startswith("random:"):
        raise SpecbatchError(f"--prompts {spec}: random token ids are for `specbatch live`; "
                             "expected text prompts: a JSONL/JSON/text file or default:N[:SEED]")
    if spec.startswith("default:"):
        parts = spec.split(":")
        try:
            n = int(parts[1])
            seed = int(parts[2]) if len(parts) > 2 else 0
        except (ValueError, IndexError):
            raise SpecbatchError(f"--prompts {spec}: expected default:N or default:N:SEED, "
                                 "got a non-integer") from None
        check_size(f"--prompts {spec}", n, MAX_PROMPTS, "prompts", "ask for fewer prompts")
        prompts = default_prompts(n - n // 2, n // 2, seed=seed)
        source = f"stdlib held-out text: {n - n // 2} code + {n // 2} prose prompts, seed {seed}"
        return prompts[:limit], source
    return load_prompts(spec, limit), spec
