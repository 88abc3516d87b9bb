"""The acceptance profile: how one drafter's tokens are accepted on one target pair.

A profile is what a user has in hand when no trace is: per-position conditional acceptance
``a_j = P(τ ≥ j | τ ≥ j − 1)`` for draft positions j = 1..K (τ: accepted draft tokens of one
drafting step, THEORY.md §13), optionally the accept-length histogram ``h_n = P(τ = n)`` for
n = 0..K (an n-gram drafter's acceptance is bimodal: a match accepts many tokens, a miss none,
which no chain of per-position rates replayed independently reproduces), the drafter kind and
its K, the conditions it was measured under and where it came from.

The chain and the histogram say the same survival function ``S_j = P(τ ≥ j) = Π_{l≤j} a_l``
(:func:`survival`), so the mean accepted length at any k ≤ K, bonus token included, is

    MAL(k) = 1 + Σ_{j≤k} S_j                                  (THEORY.md §13)

(a step drafting k < K tokens accepts ``min(τ, k)``). What the histogram adds is the joint law
of the positions, which matters only for replay (simulator.replay.profile_replay).

On disk: JSON, ``{"format": "specbatch-acceptance-profile", "version": 1, ...}``, written
atomically (:func:`write_profile`), read back bit for bit (:func:`read_profile`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specbatch.errors import SpecbatchError, require

FORMAT_NAME = "specbatch-acceptance-profile"
FORMAT_VERSION = 1
#: Drafter kinds: a separate draft model, a head on the target (EAGLE, EAGLE-3, MTP), n-gram
#: prompt lookup; ``unknown`` when the source does not say.
DRAFTERS = ("draft-model", "eagle", "eagle3", "mtp", "ngram", "unknown")
#: Keys of ``conditions`` a profile may fill (None: not stated by the source).
CONDITION_KEYS = ("dataset", "temperature", "engine", "engine_version", "samples")
#: Tolerance of the consistency checks (a histogram summing to 1, rates in [0, 1]).
SLACK = 1e-6


@dataclass(frozen=True)
class AcceptanceProfile:
    """One drafter on one pair (module docstring). ``rates``: a_1..a_K # [K]; ``histogram``:
    h_0..h_K # [K+1] or None; ``target``/``draft``: the pair's names as the source gives them
    (a free-form model name or id); ``conditions``: :data:`CONDITION_KEYS`; ``provenance``:
    at least ``source`` (``vllm-metrics``, ``model-optimizer``, ``trace``, ``published``) and,
    for published numbers, ``citation`` and ``derivation`` (how the rates follow from what the
    source printed); ``notes``: caveats a consumer must repeat (unidentified positions)."""

    rates: tuple[float, ...]
    drafter: str = "unknown"
    target: str | None = None
    draft: str | None = None
    histogram: tuple[float, ...] | None = None
    conditions: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    name: str | None = None

    def __post_init__(self) -> None:
        check_profile(self, "AcceptanceProfile")

    @property
    def K(self) -> int:  # noqa: N802  (the papers' symbol)
        return len(self.rates)

    @property
    def pair(self) -> str:
        """``draft -> target`` as the profile names them (``?`` where unknown)."""
        return f"{self.draft or self.drafter} -> {self.target or '?'}"

    @property
    def source(self) -> str:
        """One phrase naming where the numbers came from."""
        prov = self.provenance
        what = prov.get("citation") or prov.get("file") or prov.get("source") or "unknown"
        return f"{self.name or 'profile'} ({prov.get('source', 'unknown')}: {what})"


def check_profile(p: AcceptanceProfile, where: str) -> None:
    """One-line errors for a profile that is not one: rates in [0, 1], a histogram of K + 1
    probabilities summing to 1 whose survival equals the chain's, a known drafter kind."""
    require(len(p.rates) >= 1, f"{where}: field rates: expected at least one position, got none")
    for j, a in enumerate(p.rates, 1):
        require(isinstance(a, (int, float)) and math.isfinite(a) and -SLACK <= a <= 1 + SLACK,
                f"{where}: field rates: expected probabilities in [0, 1], got {a!r} at "
                f"position {j}")
    require(p.drafter in DRAFTERS, f"{where}: field drafter: expected one of "
            f"{', '.join(DRAFTERS)}, got {p.drafter!r}")
    if p.histogram is not None:
        h = p.histogram
        require(len(h) == p.K + 1, f"{where}: field histogram: expected K + 1 = {p.K + 1} "
                f"probabilities P(tau = 0..K), got {len(h)}")
        require(all(isinstance(x, (int, float)) and math.isfinite(x) and x >= -SLACK for x in h),
                f"{where}: field histogram: expected probabilities >= 0, got {list(h)!r}")
        require(abs(sum(h) - 1.0) <= 1e-6, f"{where}: field histogram: expected probabilities "
                f"summing to 1, got {sum(h)!r}")
        chain, hist = _chain_survival(p.rates), histogram_survival(h)
        bad = [j for j in range(p.K) if abs(chain[j] - hist[j]) > 1e-4]
        if bad:
            raise SpecbatchError(f"{where}: field rates: expected the chain of the histogram "
                                 f"(P(tau >= {bad[0] + 1}) = {hist[bad[0]]:.6g}), got "
                                 f"{chain[bad[0]]:.6g}")
    for key in ("target", "draft", "name"):
        value = getattr(p, key)
        require(value is None or isinstance(value, str), f"{where}: field {key}: expected a "
                f"string or null, got {value!r}")
    require(isinstance(p.notes, tuple) and all(isinstance(n, str) for n in p.notes),
            f"{where}: field notes: expected a list of strings, got {p.notes!r}")
    require(isinstance(p.conditions, dict) and isinstance(p.provenance, dict),
            f"{where}: fields conditions, provenance: expected objects")
    unknown = set(p.conditions) - set(CONDITION_KEYS)
    require(not unknown, f"{where}: field conditions: expected keys among "
            f"{', '.join(CONDITION_KEYS)}, got {sorted(unknown)}")


def _chain_survival(rates) -> list[float]:
    out, s = [], 1.0
    for a in rates:
        s *= a
        out.append(s)
    return out


def histogram_survival(histogram) -> list[float]:
    """``S_j = P(τ ≥ j) = Σ_{n≥j} h_n`` for j = 1..K.  # [K]"""
    out, tail = [], 1.0
    for n in range(len(histogram) - 1):
        tail -= histogram[n]
        out.append(max(0.0, tail))
    return out


def rates_from_survival(survival) -> tuple[float, ...]:
    """``a_j = S_j / S_{j−1}`` (``S_0 = 1``); 0 past a position nothing reaches."""
    out, before = [], 1.0
    for s in survival:
        out.append(min(1.0, s / before) if before > 0 else 0.0)
        before = s
    return tuple(out)


def survival(p: AcceptanceProfile) -> list[float]:
    """``S_j = P(τ ≥ j)`` for j = 1..K (from the histogram when given, else the chain).  # [K]"""
    return histogram_survival(p.histogram) if p.histogram is not None else _chain_survival(p.rates)


def mean_accepted_length(p: AcceptanceProfile, k: int | None = None) -> float:
    """``MAL(k) = 1 + Σ_{j≤k} S_j`` (bonus token included) at ``k ≤ K`` drafted tokens
    (default K). Past K the profile says nothing: refused."""
    k = p.K if k is None else int(k)
    require(0 <= k <= p.K, f"k: expected 0 <= k <= the profile's K = {p.K}, got {k}")
    return 1.0 + sum(survival(p)[:k])


def scaled(p: AcceptanceProfile, factor: float) -> AcceptanceProfile:
    """Every ``a_j`` times ``factor`` (clipped to [0, 1]), the histogram dropped: the
    one-parameter family a break-even search walks (analysis.plan)."""
    require(0 <= factor < math.inf, f"factor: expected a number >= 0, got {factor!r}")
    rates = tuple(min(1.0, a * factor) for a in p.rates)
    return replace(p, rates=rates, histogram=None,
                   name=f"{p.name or 'profile'} x{factor:.4g}",
                   provenance={**p.provenance, "scaled_by": float(factor)})


def to_dict(p: AcceptanceProfile) -> dict:
    """The JSON object of a profile (format header first)."""
    body = asdict(p)
    body["rates"] = list(p.rates)
    body["histogram"] = None if p.histogram is None else list(p.histogram)
    body["notes"] = list(p.notes)
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "K": p.K, **body}


def from_dict(obj: Any, where: str) -> AcceptanceProfile:
    """A profile from its JSON object (one-line errors naming ``where`` and the field)."""
    require(isinstance(obj, dict), f"{where}: expected a JSON object, got {type(obj).__name__}")
    require(obj.get("format") == FORMAT_NAME, f"{where}: field format: expected "
            f"{FORMAT_NAME!r}, got {obj.get('format')!r}")
    require(obj.get("version") == FORMAT_VERSION, f"{where}: field version: expected "
            f"{FORMAT_VERSION}, got {obj.get('version')!r}")
    rates = obj.get("rates")
    require(isinstance(rates, list), f"{where}: field rates: expected a list of probabilities, "
            f"got {rates!r}")
    hist = obj.get("histogram")
    require(hist is None or isinstance(hist, list), f"{where}: field histogram: expected a "
            f"list or null, got {hist!r}")
    for key in ("conditions", "provenance"):
        require(isinstance(obj.get(key, {}), dict), f"{where}: field {key}: expected an object")
    notes = obj.get("notes", [])
    require(isinstance(notes, list), f"{where}: field notes: expected a list of strings, got "
            f"{notes!r}")
    require("K" not in obj or obj["K"] == len(rates), f"{where}: field K: expected "
            f"len(rates) = {len(rates)}, got {obj.get('K')!r}")
    try:
        profile = AcceptanceProfile(
            rates=tuple(rates), drafter=obj.get("drafter", "unknown"), target=obj.get("target"),
            draft=obj.get("draft"), histogram=None if hist is None else tuple(hist),
            conditions=dict(obj.get("conditions", {})), provenance=dict(obj.get("provenance", {})),
            notes=tuple(notes), name=obj.get("name"))
    except SpecbatchError as err:
        raise SpecbatchError(str(err).replace("AcceptanceProfile", where)) from None
    return profile


def write_profile(p: AcceptanceProfile, path: str | Path) -> Path:
    """Write ``p`` as JSON, atomically (a kill leaves the old file or the new one)."""
    from specbatch.io import atomic_write

    return atomic_write(path, json.dumps(to_dict(p), indent=1) + "\n")


def read_profile(path: str | Path) -> AcceptanceProfile:
    """A profile file (one-line errors naming the file)."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecbatchError(f"file {path}: expected an acceptance profile, got no such file"
                             ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SpecbatchError(f"file {path}: expected JSON, got {err}") from None
    return from_dict(obj, f"file {path}")
