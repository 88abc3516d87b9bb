"""Prompts for capture, and the local text every machine has.

Two jobs:

1. **Read prompt files** (:func:`load_prompts`): JSONL with one ``{"prompt": ...}`` object per
   line (an optional ``"category"`` field is kept), a ShareGPT-style JSON list
   (``[{"conversations": [{"from": "human", "value": ...}, ...]}, ...]``: the first human
   turn is the prompt), a JSON list of strings or of ``{"prompt": ...}`` objects, or plain
   text with one prompt per line.
2. **Local corpus** (:func:`stdlib_documents`): the Python standard library's source files
   (``code``) and its bundled English prose (``prose``: the ``pydoc_data.topics`` help texts,
   ``LICENSE.txt`` and module/class/function docstrings). Every file goes deterministically to
   a ``train`` or a ``heldout`` split (every 10th file of the sorted list is held out), so the
   zoo trains on one part and the default prompts (:func:`default_prompts`) are cut from the
   other.
"""

from __future__ import annotations

import ast
import functools
import json
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from specbatch.errors import SpecbatchError
from specbatch.io import atomic_write
from specbatch.limits import MAX_PROMPTS, check_size

#: Sub-trees of the standard library that are tests, vendored packages or data tables.
_EXCLUDED_PARTS = {"site-packages", "test", "tests", "idle_test", "__pycache__", "encodings",
                   "pydoc_data", "ensurepip", "lib2to3", "turtledemo"}
_MAX_FILE_BYTES = 200_000
HELDOUT_EVERY = 10


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


# ----------------------------------------------------------------------------- local corpus
def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_source_files() -> list[Path]:
    """Sorted list of the standard library's own ``.py`` files (no tests, no data tables)."""
    root = stdlib_root()
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if _EXCLUDED_PARTS.intersection(rel.parts[:-1]) or path.stat().st_size > _MAX_FILE_BYTES:
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def is_heldout(index: int) -> bool:
    """Every ``HELDOUT_EVERY``-th item of a sorted list is held out from training."""
    return index % HELDOUT_EVERY == HELDOUT_EVERY - 1


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""


def _docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= 80:
                out.append(doc)
    return out


def _pydoc_topics() -> list[str]:
    path = stdlib_root() / "pydoc_data" / "topics.py"
    try:
        namespace: dict = {}
        exec(compile(_read(path), str(path), "exec"), namespace)  # a plain dict literal
        topics = namespace.get("topics", {})
        return [topics[k] for k in sorted(topics)]
    except Exception:  # noqa: BLE001  (a stripped stdlib simply has no topics)
        return []


def stdlib_documents(kind: str, split: str) -> list[str]:
    """Documents of the local corpus, deterministic order (cached per process).

    kind:  ``code`` (source files) or ``prose`` (help topics, licence, docstrings)
    split: ``train``, ``heldout`` or ``all``
    """
    return list(_stdlib_documents(kind, split))


@functools.lru_cache(maxsize=8)
def _stdlib_documents(kind: str, split: str) -> tuple[str, ...]:
    if kind not in ("code", "prose") or split not in ("train", "heldout", "all"):
        raise ValueError(f"kind/split: got {kind!r}/{split!r}")
    keep = (lambda i: True) if split == "all" else (
        (lambda i: is_heldout(i)) if split == "heldout" else (lambda i: not is_heldout(i)))
    files = stdlib_source_files()
    if kind == "code":
        return tuple(t for i, f in enumerate(files) if keep(i) and (t := _read(f)).strip())
    docs: list[str] = []
    for i, topic in enumerate(_pydoc_topics()):
        if keep(i):
            docs.append(topic)
    if split in ("train", "all"):
        licence = _read(stdlib_root() / "LICENSE.txt")
        if licence:
            docs.append(licence)
    for i, f in enumerate(files):
        if keep(i):
            strings = _docstrings(_read(f))
            if strings:
                docs.append("\n\n".join(strings))
    return tuple(docs)


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
    run itself (:func:`specbatch.live.models.random_prompts`); here they are refused with the
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
        return prompts[:limit], f"stdlib held-out text: {n - n // 2} code + {n // 2} prose prompts, seed {seed}"
    return load_prompts(spec, limit), spec
