"""NVIDIA Model-Optimizer's ``speculation_profile.json``, read and written.

The layout is the one proposed in NVIDIA/Model-Optimizer pull requests #2313 (export beside
a draft checkpoint), #2247 (``specdec_bench`` producer, the schema), #2315 (``ar_validate``
producer) and #2316 (docs), as of September 2026 (open, unmerged; their tests pin it):

- ``schema_version`` ("1.0"), ``measured`` (false: a stub written without a measurement),
  ``method`` (``eagle3``, ``dflash``, ...), ``num_speculative_tokens`` K;
- ``conditional_accept_rates`` [K]: P(draft i+1 accepted | first i accepted) — our ``a_j``;
- ``marginal_accept_rates`` [K]: P(first i+1 accepted) — our ``S_j``;
- ``acceptance_length_histogram``: {acceptance length: count}, the length counting the
  target's bonus token (length n + 1 = n drafts accepted), lengths 1..K+1, gaps allowed;
- ``mean_accept_length`` (per step, bonus included: ``1 + Σ marginal``) and
  ``mean_accept_length_per_request``;
- ``verification_method`` (``longest_prefix``, or ``block``: the vectors are then null, the
  histogram kept), ``accept_length_model`` (``chain_analytic`` | ``measured_per_k``);
- ``measurement_conditions`` (dataset, osl, num_samples, ...), ``target_model`` and
  ``draft_checkpoint`` (objects describing what was measured).

Import prefers the histogram (the joint law), else the conditional vector, else the marginal
one, and checks that those given agree. Export writes every field it knows; the histogram's
values are then probabilities (weights summing to 1), which a consumer normalising by their
total (as ``build_profile`` does) reads the same as counts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from specbatch.errors import SpecbatchError, require
from specbatch.traces.acceptance.profile import (
    AcceptanceProfile,
    mean_accepted_length,
    rates_from_survival,
    survival,
)

SCHEMA_VERSION = "1.0"
#: Model-Optimizer ``method`` -> our drafter kind (others: unknown, the method kept).
METHODS = {"eagle": "eagle", "eagle1": "eagle", "eagle2": "eagle", "eagle3": "eagle3",
           "mtp": "mtp", "ngram": "ngram", "draft_model": "draft-model",
           "draft-model": "draft-model", "medusa": "unknown"}
#: Our drafter kind -> ``method`` on export.
EXPORT_METHODS = {"eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram",
                  "draft-model": "draft_model", "unknown": None}


def _histogram(obj: dict, k: int, where: str) -> tuple[float, ...] | None:
    """``h_n`` for n = 0..K from {length: count} (length = n + 1), normalised."""
    raw = obj.get("acceptance_length_histogram")
    if not raw:
        return None
    require(isinstance(raw, dict), f"{where}: field acceptance_length_histogram: expected "
            f"{{length: count}}, got {type(raw).__name__}")
    counts = [0.0] * (k + 1)
    for key, value in raw.items():
        try:
            length = int(key)
        except (TypeError, ValueError):
            raise SpecbatchError(f"{where}: field acceptance_length_histogram: expected integer "
                                 f"lengths, got {key!r}") from None
        require(1 <= length <= k + 1, f"{where}: field acceptance_length_histogram: expected "
                f"lengths 1..K+1 = {k + 1} (bonus token included), got {length}")
        require(isinstance(value, (int, float)) and math.isfinite(value) and value >= 0,
                f"{where}: field acceptance_length_histogram: expected counts >= 0, got "
                f"{value!r} at length {length}")
        counts[length - 1] += float(value)
    total = sum(counts)
    require(total > 0, f"{where}: field acceptance_length_histogram: expected some steps, got 0")
    return tuple(c / total for c in counts)


def _vector(obj: dict, key: str, k: int, where: str) -> list[float] | None:
    vec = obj.get(key)
    if vec is None:
        return None
    require(isinstance(vec, list) and len(vec) == k and all(
        isinstance(x, (int, float)) and math.isfinite(x) and 0 <= x <= 1 for x in vec),
        f"{where}: field {key}: expected {k} probabilities (num_speculative_tokens), got {vec!r}")
    return [float(x) for x in vec]


def profile_from_modelopt(obj: dict, where: str, name: str | None = None) -> AcceptanceProfile:
    """A profile from a parsed ``speculation_profile.json`` (module docstring)."""
    require(isinstance(obj, dict), f"{where}: expected a JSON object, got {type(obj).__name__}")
    require(obj.get("measured", True) is not False, f"{where}: field measured: expected a "
            "measured profile, got false (a stub written without a measurement)")
    k = obj.get("num_speculative_tokens")
    require(isinstance(k, int) and k >= 1, f"{where}: field num_speculative_tokens: expected an "
            f"integer >= 1, got {k!r}")
    hist = _histogram(obj, k, where)
    conditional = _vector(obj, "conditional_accept_rates", k, where)
    marginal = _vector(obj, "marginal_accept_rates", k, where)
    notes = []
    if hist is not None:
        rates = rates_from_survival([sum(hist[n:]) for n in range(1, k + 1)])
    elif conditional is not None:
        rates = tuple(conditional)
    elif marginal is not None:
        rates = rates_from_survival(marginal)
    else:
        raise SpecbatchError(f"{where}: expected acceptance_length_histogram, "
                             "conditional_accept_rates or marginal_accept_rates, got none")
    chain, reach = [], 1.0
    for a in rates:
        reach *= a
        chain.append(reach)
    for key, vec, mine in (("conditional_accept_rates", conditional, list(rates)),
                           ("marginal_accept_rates", marginal, chain)):
        bad = [] if vec is None else [j for j in range(k) if abs(vec[j] - mine[j]) > 1e-4]
        if bad:
            raise SpecbatchError(f"{where}: field {key}: expected {mine[bad[0]]:.6g} at "
                                 f"position {bad[0] + 1} (from the histogram or the other "
                                 f"vector), got {vec[bad[0]]:.6g}")
    if obj.get("verification_method") == "block":
        notes.append("measured under block verification: the histogram is the law of the "
                     "accepted length, not a longest-prefix chain (Model-Optimizer withholds "
                     "the vectors); the rates here are derived from it")
    if obj.get("accept_length_model") == "measured_per_k":
        notes.append("accept_length_model measured_per_k: valid at K = "
                     f"{k} only (a block-parallel drafter does not extrapolate over K)")
    method = str(obj.get("method") or "").lower()
    cond = obj.get("measurement_conditions") or {}
    require(isinstance(cond, dict), f"{where}: field measurement_conditions: expected an object")
    target, draft = obj.get("target_model") or {}, obj.get("draft_checkpoint") or {}
    conditions = {"dataset": cond.get("dataset"), "temperature": cond.get("temperature"),
                  "engine": cond.get("engine"), "engine_version": cond.get("engine_version"),
                  "samples": cond.get("num_samples")}
    return AcceptanceProfile(
        rates=tuple(rates), histogram=hist, drafter=METHODS.get(method, "unknown"),
        target=_model_name(target), draft=_model_name(draft),
        conditions={k_: v for k_, v in conditions.items() if v is not None},
        provenance={"source": "model-optimizer", "file": where.removeprefix("file "),
                    "schema_version": obj.get("schema_version"), "method": obj.get("method"),
                    "measurement_conditions": cond,
                    "mean_accept_length": obj.get("mean_accept_length")},
        notes=tuple(notes), name=name)


def _model_name(model) -> str | None:
    if isinstance(model, str):
        return model or None
    if isinstance(model, dict):
        for key in ("name", "id", "checkpoint", "path", "model"):
            if model.get(key):
                return str(model[key])
    return None


def read_modelopt(path: str | Path) -> AcceptanceProfile:
    """A profile from a ``speculation_profile.json`` file (one-line errors naming it)."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecbatchError(f"file {path}: expected a speculation_profile.json, got no such "
                             "file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SpecbatchError(f"file {path}: expected JSON, got {err}") from None
    return profile_from_modelopt(obj, f"file {path}", name=path.stem)


def to_modelopt(p: AcceptanceProfile) -> dict:
    """``p`` in Model-Optimizer's layout (module docstring)."""
    surv = survival(p)
    hist = None
    if p.histogram is not None:
        hist = {str(n + 1): round(float(h), 9) for n, h in enumerate(p.histogram) if h > 0}
    cond = p.conditions
    return {
        "schema_version": SCHEMA_VERSION, "measured": True,
        "method": EXPORT_METHODS.get(p.drafter),
        "num_speculative_tokens": p.K,
        "conditional_accept_rates": [round(float(a), 6) for a in p.rates],
        "marginal_accept_rates": [round(float(s), 6) for s in surv],
        "mean_accept_length": round(mean_accepted_length(p), 6),
        "acceptance_length_histogram": hist,
        "verification_method": "longest_prefix",
        "accept_length_model": "measured_per_k" if p.histogram is not None else "chain_analytic",
        "measurement_conditions": {
            **{k: cond.get(k) for k in ("dataset", "temperature", "engine", "engine_version")},
            "num_samples": cond.get("samples")},
        "target_model": {"name": p.target}, "draft_checkpoint": {"name": p.draft},
        "provenance": {"exported_by": "specbatch acceptance export-profile",
                       "source": p.source},
    }
