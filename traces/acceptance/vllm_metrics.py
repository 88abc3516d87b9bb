"""An acceptance profile from vLLM's Prometheus spec-decode counters (THEORY.md §13).

vLLM V1 exports, per engine and model (labels ``engine``, ``model_name``):

- ``vllm:spec_decode_num_drafts_total`` D: drafting steps of a request;
- ``vllm:spec_decode_num_draft_tokens_total`` T: draft tokens proposed;
- ``vllm:spec_decode_num_accepted_tokens_total`` A: draft tokens accepted;
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="j"}`` c_j: drafts whose
  position j (0-based) was accepted, which a longest-prefix verifier accepts only after every
  earlier position.

Then ``P(τ ≥ j+1) = c_j / D``, ``a_{j+1} = c_j / c_{j−1}`` (``c_{−1} = D``),
``MAL = 1 + A / D`` and vLLM's "acceptance rate" ``A / T`` (per drafted token, another number).
A window is the difference of two scrapes (:func:`counter_delta`). When ``T ≠ K · D`` the
drafts did not all propose K tokens (a dynamic K, or an n-gram drafter that found fewer): the
counters do not say how many drafts reached position j, so rates past the shortest draft are
not identified; the profile keeps them and says so in ``notes``.

The text format is Prometheus' exposition format 0.0.4 (``name{label="v",...} value
[timestamp]``, ``#`` comments); samples of one counter on several engines (data parallel) are
summed per ``model_name``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from specbatch.errors import SpecbatchError, require
from specbatch.traces.acceptance.profile import AcceptanceProfile

PREFIX = "vllm:spec_decode_"
DRAFTS = "num_drafts"
DRAFT_TOKENS = "num_draft_tokens"
ACCEPTED = "num_accepted_tokens"
PER_POS = "num_accepted_tokens_per_pos"
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_labels(text: str, where: str) -> dict[str, str]:
    """``k="v",...`` (Prometheus escapes ``\\\\``, ``\\"``, ``\\n`` undone)."""
    out, pos = {}, 0
    while pos < len(text.strip()):
        m = _LABEL.match(text, pos)
        require(m is not None, f"{where}: expected label pairs name=\"value\", got {text!r}")
        out[m.group(1)] = (m.group(2).replace('\\"', '"').replace("\\n", "\n")
                           .replace("\\\\", "\\"))
        pos = m.end()
    return out


def parse_counters(text: str, where: str) -> dict[tuple[str, str, str | None], float]:
    """The spec-decode samples of a scrape: ``(counter, model_name, position) -> value``,
    summed over the other labels (engines). Other metrics are skipped; ``_created`` samples
    (a counter's creation time) too."""
    out: dict[tuple[str, str, str | None], float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#") or not line.startswith(PREFIX):
            continue
        m = _SAMPLE.match(line)
        require(m is not None, f"{where}: line {number}: expected 'name{{labels}} value', got "
                f"{line[:80]!r}")
        name = m.group(1)[len(PREFIX):]
        if name.endswith("_created"):
            continue
        name = name.removesuffix("_total")
        if name not in COUNTERS:
            continue
        labels = parse_labels(m.group(3) or "", f"{where}: line {number}")
        try:
            value = float(m.group(4))
        except ValueError:
            raise SpecbatchError(f"{where}: line {number}: expected a number, got "
                                 f"{m.group(4)!r}") from None
        require(math.isfinite(value) and value >= 0, f"{where}: line {number}: expected a "
                f"counter value >= 0, got {m.group(4)}")
        position = labels.get("position")
        require(name != PER_POS or position is not None, f"{where}: line {number}: expected a "
                f"position label on {PREFIX}{PER_POS}_total, got none")
        key = (name, labels.get("model_name", ""), position if name == PER_POS else None)
        out[key] = out.get(key, 0.0) + value
    return out


def counter_delta(after: dict, before: dict, where: str) -> dict:
    """``after − before`` sample by sample (the window between two scrapes); a counter that
    went down (a server restart between them) is refused."""
    out = {}
    for key, value in after.items():
        diff = value - before.get(key, 0.0)
        require(diff >= 0, f"{where}: {PREFIX}{key[0]}_total"
                + (f'{{position="{key[2]}"}}' if key[2] is not None else "")
                + f": expected the later scrape >= the earlier one, got {value:g} < "
                f"{before.get(key, 0.0):g} (did the server restart?)")
        out[key] = diff
    return out


def counts_by_model(samples: dict, model: str | None, where: str) -> tuple[str, dict]:
    """(model_name, {counter: value, per_pos: [c_0..c_{K−1}]}) of one served model."""
    models = sorted({m for _, m, _ in samples})
    require(bool(models), f"{where}: expected the counters "
                          f"{', '.join(PREFIX + c + '_total' for c in COUNTERS)}, "
            "got none (is speculative decoding on, and is this vLLM's /metrics?)")
    if model is None:
        require(len(models) == 1, f"--model: expected one of {', '.join(models)} (the scrape "
                f"serves {len(models)} models), got none")
        model = models[0]
    require(model in models, f"--model: expected one of {', '.join(models)}, got {model!r}")
    counts: dict = {}
    for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
        require((name, model, None) in samples, f"{where}: expected {PREFIX}{name}_total for "
                f"model {model!r}, got none")
        counts[name] = samples[(name, model, None)]
    positions = {}
    for (name, m, pos), value in samples.items():
        if name == PER_POS and m == model:
            require(pos.isdigit(), f"{where}: {PREFIX}{PER_POS}_total: expected position "
                    f"labels 0, 1, ..., got {pos!r}")
            positions[int(pos)] = value
    require(bool(positions), f"{where}: expected {PREFIX}{PER_POS}_total{{position=...}} for "
            f"model {model!r}, got none")
    k = max(positions) + 1
    missing = [j for j in range(k) if j not in positions]
    require(not missing, f"{where}: {PREFIX}{PER_POS}_total: expected positions 0..{k - 1}, "
            f"missing {missing}")
    counts[PER_POS] = [positions[j] for j in range(k)]
    return model, counts


def profile_from_counts(drafts: float, draft_tokens: float, accepted: float,
                        per_pos: list[float], where: str = "counters", **fields
                        ) -> AcceptanceProfile:
    """The profile of counters D, T, A, c_0..c_{K−1} (module docstring, THEORY.md §13).
    fields: the profile's other fields (drafter, target, conditions, provenance, name)."""
    k = len(per_pos)
    require(drafts > 0, f"{where}: {PREFIX}{DRAFTS}_total: expected at least one draft in the "
            f"window, got {drafts:g}")
    before = drafts
    rates = []
    for j, c in enumerate(per_pos):
        require(c <= before + 1e-9, f"{where}: {PREFIX}{PER_POS}_total: expected position "
                f"{j} accepted no more often than position {j - 1 if j else 'none (the drafts)'}"
                f" ({before:g}), got {c:g}")
        rates.append(c / before if before > 0 else 0.0)
        before = c
    require(abs(sum(per_pos) - accepted) <= 1e-6 * max(1.0, accepted),
            f"{where}: {PREFIX}{ACCEPTED}_total: expected the sum of the per-position counts "
            f"({sum(per_pos):g}), got {accepted:g}")
    notes = list(fields.pop("notes", ()))
    if abs(draft_tokens - k * drafts) > 1e-6 * max(1.0, draft_tokens):
        notes.append(f"drafts proposed {draft_tokens / drafts:.4g} tokens on average, not K = "
                     f"{k}: the counters do not say how many drafts reached each position, so "
                     "the conditional rates past the shortest draft are not identified "
                     "(THEORY.md §13); they are read as if every draft proposed K")
    provenance = {**fields.pop("provenance", {}),
                  "counters": {"drafts": drafts, "draft_tokens": draft_tokens,
                               "accepted_tokens": accepted, "accepted_per_position": per_pos,
                               "mean_accepted_length": 1 + accepted / drafts,
                               "draft_acceptance_rate": accepted / draft_tokens
                               if draft_tokens else None}}
    return AcceptanceProfile(rates=tuple(rates), provenance=provenance, notes=tuple(notes),
                             **fields)


def read_metrics(path: str | Path, before: str | Path | None = None, model: str | None = None,
                 **fields) -> AcceptanceProfile:
    """The profile of a saved ``/metrics`` scrape (``before``: an earlier scrape; the window
    between them). fields: as :func:`profile_from_counts` (drafter, conditions, ...)."""
    after = parse_counters(_read(path), f"file {path}")
    where = f"file {path}"
    if before is not None:
        after = counter_delta(after, parse_counters(_read(before), f"file {before}"),
                              f"file {path} - {before}")
        where = f"file {path} - {before}"
    name, counts = counts_by_model(after, model, where)
    provenance = {"source": "vllm-metrics", "file": str(path),
                  **({"before": str(before)} if before is not None else {}),
                  "model_name": name}
    fields.setdefault("target", name or None)
    return profile_from_counts(counts[DRAFTS], counts[DRAFT_TOKENS], counts[ACCEPTED],
                               counts[PER_POS], where, provenance=provenance, **fields)


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise SpecbatchError(f"file {path}: expected a Prometheus /metrics scrape, got no such "
                             "file") from None
    except UnicodeDecodeError:
        raise SpecbatchError(f"file {path}: expected Prometheus text, got binary data") from None
