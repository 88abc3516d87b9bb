"""Autoregressive model pairs over a small vocabulary, for exact work (THEORY.md §1, §4).

A *model* maps a prefix (a tuple of token ids, the context included) to a next-token
distribution, a tuple of ``V`` probabilities. Three forms:

- ``iid``:    one distribution for every position, ``M(x | s) = probs[x]``;
- ``markov``: first order, ``M(x | ()) = initial[x]``, ``M(x | s) = transition[s[-1]][x]``;
- ``table``:  an explicit prefix -> distribution table, complete up to its depth D (every
  prefix of length 0..D present); asking for a longer prefix is a :class:`SpecbatchError`.

A *pair* is ``(Ms, Mb)`` = (draft, target) over the same vocabulary. Numbers are either all
``fractions.Fraction`` (``pair.exact``: exact rational arithmetic end to end) or all ``float``.

JSON form (``read_pair``)::

    {"vocab": V, "draft": MODEL, "target": MODEL}
    MODEL = {"iid": [p0, ...]}
          | {"markov": {"initial": [...], "transition": [[...], ...]}}
          | {"table": {"": [...], "0": [...], "0,1": [...], ...}}   # comma-joined token ids

If any probability in the file is a string (``"1/3"``), the whole pair is exact: every entry is
read as ``Fraction(str(x))`` (so ``0.5`` means 1/2) and every row must sum to exactly 1.
Otherwise rows are float64 and must sum to 1 within 1e-9. Errors are one line naming the model
(``draft``/``target``) and the row.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import loads_json, read_text
from specbatch.io import atomic_write

Number = Fraction | float
Probs = tuple  # tuple[Number, ...] of length V
Prefix = tuple  # tuple[int, ...]

#: Tolerance on row sums for float models.
SUM_TOL = 1e-9

FORMS = ("iid", "markov", "table")


@dataclass(frozen=True, eq=False)
class IidModel:
    """Context-free model: ``M(x | s) = probs[x]`` for every prefix ``s``."""

    probs: Probs

    @property
    def vocab(self) -> int:
        return len(self.probs)

    def row(self, prefix: Prefix) -> Probs:
        return self.probs

    def to_json(self) -> dict:
        return {"iid": [_num_json(v) for v in self.probs]}


@dataclass(frozen=True, eq=False)
class MarkovModel:
    """First-order model: ``initial`` for the empty prefix, ``transition[s[-1]]`` otherwise."""

    initial: Probs
    transition: tuple  # tuple[Probs, ...]  [V][V]

    @property
    def vocab(self) -> int:
        return len(self.initial)

    def row(self, prefix: Prefix) -> Probs:
        return self.transition[prefix[-1]] if prefix else self.initial

    def to_json(self) -> dict:
        return {"markov": {"initial": [_num_json(v) for v in self.initial],
                           "transition": [[_num_json(v) for v in r] for r in self.transition]}}


@dataclass(frozen=True, eq=False)
class TableModel:
    """Explicit table ``prefix -> row``, complete for every prefix of length ``0..depth``."""

    rows: dict  # dict[Prefix, Probs]
    depth: int
    name: str = "model"

    @property
    def vocab(self) -> int:
        return len(self.rows[()])

    def row(self, prefix: Prefix) -> Probs:
        try:
            return self.rows[prefix]
        except KeyError:
            raise SpecbatchError(
                f"table model '{self.name}': missing prefix '{_prefix_key(prefix)}' "
                f"(table depth {self.depth}; the computation needs prefixes up to length "
                f"{len(prefix)})"
            ) from None

    def to_json(self) -> dict:
        return {
            "table": {
                _prefix_key(k): [_num_json(v) for v in r]
                for k, r in sorted(self.rows.items(), key=lambda kv: (len(kv[0]), kv[0]))
            }
        }


Model = IidModel | MarkovModel | TableModel


@dataclass(frozen=True, eq=False)
class ModelPair:
    """Draft ``Ms`` and target ``Mb`` over ``vocab`` tokens; ``exact``: all entries Fractions."""

    vocab: int
    draft: Model
    target: Model
    exact: bool

    def to_json(self) -> dict:
        return {"vocab": self.vocab, "draft": self.draft.to_json(), "target": self.target.to_json()}


# --------------------------------------------------------------------------- helpers


def _prefix_key(prefix: Prefix) -> str:
    return ",".join(str(t) for t in prefix)


def _num_json(v: Number) -> Any:
    return f"{v.numerator}/{v.denominator}" if isinstance(v, Fraction) else float(v)


def zero_of(pair: ModelPair) -> Number:
    return Fraction(0) if pair.exact else 0.0


def one_of(pair: ModelPair) -> Number:
    return Fraction(1) if pair.exact else 1.0


def prefixes(vocab: int, length: int):
    """All ``vocab ** length`` token tuples of the given length, lexicographic."""
    return itertools.product(range(vocab), repeat=length)


def sequence_prob(model: Model, seq: Sequence[int], context: Prefix = ()) -> Number:
    """``M(seq | context) = Π_i M(seq_i | context, seq^{i-1})``."""
    prob: Number = 1
    prefix = tuple(context)
    for tok in seq:
        prob = prob * model.row(prefix)[tok]
        prefix = prefix + (tok,)
    return prob


# --------------------------------------------------------------------------- validation


def _contains_string(obj: Any) -> bool:
    if isinstance(obj, str):
        return True
    if isinstance(obj, dict):
        return any(_contains_string(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_contains_string(v) for v in obj)
    return False


#: Most decimal digits an exact probability may be written with, and the largest power of ten
#: its exponent may name: exact arithmetic on Fractions grows with the size of its inputs, and
#: ``"1e-99999999"`` alone would be a hundred-million-digit denominator.
MAX_EXACT_DIGITS = 1000


def _check_exact_size(text: str, where: str) -> None:
    """Refuse an exact number too large to compute with (:data:`MAX_EXACT_DIGITS`), before
    :class:`~fractions.Fraction` expands it."""
    digits = sum(c.isdigit() for c in text)
    exponent = re.search(r"[eE]\s*[+-]?\s*(\d+)", text)
    power = int(exponent.group(1)) if exponent and digits <= MAX_EXACT_DIGITS else 0
    require(digits <= MAX_EXACT_DIGITS and power <= MAX_EXACT_DIGITS,
            f"{where}: expected an exact probability of at most {MAX_EXACT_DIGITS} digits and "
            f"exponents within ±{MAX_EXACT_DIGITS}, got {text[:40]!r}"
            f"{'...' if len(text) > 40 else ''}")


def _parse_number(raw: Any, exact: bool, where: str) -> Number:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str, Fraction)):
        raise SpecbatchError(f"{where}: expected a probability (number or 'a/b' string), got "
                             f"{raw!r}")
    if exact:
        if not isinstance(raw, Fraction):
            _check_exact_size(str(raw), where)
        try:
            value = (
                Fraction(raw) if isinstance(raw, (int, Fraction)) else Fraction(str(raw).strip())
            )
        except (ValueError, ZeroDivisionError):
            raise SpecbatchError(
                f"{where}: expected a probability like '1/3', got {raw!r}"
            ) from None
        require(value >= 0, f"{where}: expected non-negative probabilities, got {raw!r}")
        return value
    if isinstance(raw, str):  # unreachable by construction (strings switch to exact)
        raise SpecbatchError(f"{where}: unexpected string {raw!r}")
    value = float(raw)
    require(math.isfinite(value), f"{where}: expected finite probabilities, got {raw!r}")
    require(value >= 0.0, f"{where}: expected non-negative probabilities, got {raw!r}")
    return value


def parse_row(raw: Any, vocab: int, exact: bool, where: str) -> Probs:
    """Validate one distribution: ``vocab`` non-negative entries summing to 1."""
    if isinstance(raw, np.ndarray):
        raw = raw.tolist()
    require(isinstance(raw, (list, tuple)),
            f"{where}: expected a list of {vocab} probabilities, got {type(raw).__name__}")
    require(len(raw) == vocab, f"{where}: expected {vocab} probabilities, got {len(raw)}")
    row = tuple(_parse_number(v, exact, where) for v in raw)
    total = sum(row, Fraction(0) if exact else 0.0)
    if exact:
        require(total == 1, f"{where}: exact row must sum to exactly 1, got {total}")
    else:
        require(abs(total - 1.0) <= SUM_TOL,
                f"{where}: row must sum to 1 within {SUM_TOL:g}, got {total!r}")
    return row


def parse_model(raw: Any, vocab: int, exact: bool, name: str) -> Model:
    """Build one model from its JSON object; ``name`` ('draft'/'target') goes into errors."""
    require(isinstance(raw, dict) and len(raw) == 1 and next(iter(raw)) in FORMS,
            f"model '{name}': expected an object with exactly one key of {list(FORMS)}, "
            f"got {list(raw) if isinstance(raw, dict) else type(raw).__name__}")
    form, body = next(iter(raw.items()))
    if form == "iid":
        return IidModel(parse_row(body, vocab, exact, f"model '{name}' (iid): row"))
    if form == "markov":
        require(isinstance(body, dict) and "initial" in body and "transition" in body,
                f"model '{name}' (markov): expected keys 'initial' and 'transition'")
        initial = parse_row(body["initial"], vocab, exact, f"model '{name}' (markov): initial row")
        trans = body["transition"]
        if isinstance(trans, np.ndarray):
            trans = trans.tolist()
        require(isinstance(trans, (list, tuple)) and len(trans) == vocab,
                f"model '{name}' (markov): transition: expected {vocab} rows, got "
                f"{len(trans) if isinstance(trans, (list, tuple)) else type(trans).__name__}")
        rows = tuple(parse_row(r, vocab, exact, f"model '{name}' (markov): transition row {i}")
                     for i, r in enumerate(trans))
        return MarkovModel(initial, rows)
    # table
    require(isinstance(body, dict), f"model '{name}' (table): expected an object prefix -> row")
    rows: dict = {}
    for key, row in body.items():
        where = f"model '{name}' (table): row '{key}'"
        try:
            prefix = tuple(int(t) for t in key.split(",")) if key.strip() else ()
        except ValueError:
            raise SpecbatchError(f"{where}: expected comma-joined token ids as the key") from None
        require(all(0 <= t < vocab for t in prefix),
                f"{where}: token ids must lie in 0..{vocab - 1}")
        require(prefix not in rows, f"{where}: duplicate prefix")
        rows[prefix] = parse_row(row, vocab, exact, where)
    require(() in rows, f"model '{name}' (table): missing prefix '' (the empty prefix)")
    depth = max(len(p) for p in rows)
    for length in range(depth + 1):
        for prefix in prefixes(vocab, length):
            require(prefix in rows,
                    f"model '{name}' (table): missing prefix '{_prefix_key(prefix)}' "
                    f"(a table of depth {depth} needs every prefix of length 0..{depth})")
    return TableModel(rows, depth, name)


def pair_from_dict(raw: Any, source: str = "pair") -> ModelPair:
    """Validate and build a pair from its JSON object (see the module docstring)."""
    require(isinstance(raw, dict), f"{source}: expected a JSON object, got {type(raw).__name__}")
    for key in ("vocab", "draft", "target"):
        require(key in raw, f"{source}: missing field '{key}'")
    vocab = raw["vocab"]
    require(isinstance(vocab, int) and not isinstance(vocab, bool) and vocab >= 1,
            f"{source}: field vocab: expected a positive integer, got {vocab!r}")
    exact = _contains_string(raw["draft"]) or _contains_string(raw["target"])
    try:
        draft = parse_model(raw["draft"], vocab, exact, "draft")
        target = parse_model(raw["target"], vocab, exact, "target")
    except SpecbatchError as exc:
        raise SpecbatchError(f"{source}: {exc}") from None
    return ModelPair(vocab, draft, target, exact)


def read_pair(path: str) -> ModelPair:
    """Read a pair from a JSON file; one-line :class:`SpecbatchError` on any problem."""
    try:
        raw = loads_json(read_text(path, f"file {path}"), f"file {path}")
    except FileNotFoundError:
        raise SpecbatchError(f"file {path}: not found") from None
    except json.JSONDecodeError as exc:
        raise SpecbatchError(f"file {path}: invalid JSON: {exc.msg} (line {exc.lineno})") from None
    return pair_from_dict(raw, source=f"file {path}")


def write_pair(pair: ModelPair, path: str) -> None:
    """Write ``pair`` as JSON (the form :func:`read_pair` reads), atomically."""
    atomic_write(path, json.dumps(pair.to_json(), indent=1))


# --------------------------------------------------------------------------- random pairs


def _random_row(rng: np.random.Generator, vocab: int, concentration: float, exact: bool,
                denominator: int) -> Probs:
    """Dirichlet row; exact rows are rounded to multiples of ``1/denominator`` (zeros allowed)."""
    probs = rng.dirichlet(np.full(vocab, concentration))
    if not exact:
        return tuple(float(v) for v in probs)
    counts = np.floor(probs * denominator).astype(np.int64)
    counts[int(np.argmax(probs))] += denominator - int(counts.sum())
    return tuple(Fraction(int(c), denominator) for c in counts)


def random_model(rng: np.random.Generator, vocab: int, form: str, depth: int = 0,
                 concentration: float = 1.0, exact: bool = False, denominator: int = 12,
                 name: str = "model") -> Model:
    """A seeded random model; ``table`` models get every prefix of length ``0..depth``."""
    def draw() -> Probs:
        return _random_row(rng, vocab, concentration, exact, denominator)

    if form == "iid":
        return IidModel(draw())
    if form == "markov":
        return MarkovModel(draw(), tuple(draw() for _ in range(vocab)))
    if form == "table":
        rows = {p: draw() for length in range(depth + 1) for p in prefixes(vocab, length)}
        return TableModel(rows, depth, name)
    raise SpecbatchError(f"model form: expected one of {list(FORMS)}, got {form!r}")


def random_pair(seed: int | np.random.Generator, vocab: int, form: str = "iid", depth: int = 0,
                concentration: float = 1.0, exact: bool = False,
                denominator: int = 12) -> ModelPair:
    """Seeded Dirichlet pair; both models share ``form``. ``depth`` only matters for tables.

    With ``exact=True`` every row is a multiple of ``1/denominator`` summing to exactly 1, so
    enumeration runs in exact rationals and zero probabilities occur naturally.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    draft = random_model(rng, vocab, form, depth, concentration, exact, denominator, "draft")
    target = random_model(rng, vocab, form, depth, concentration, exact, denominator, "target")
    return ModelPair(vocab, draft, target, exact)


def one_hot_draft(pair: ModelPair, seed: int | np.random.Generator, depth: int) -> ModelPair:
    """The same target with a deterministic (one-hot, greedy-like) table draft of ``depth``."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    one, zero = one_of(pair), zero_of(pair)
    rows = {}
    for length in range(depth + 1):
        for p in prefixes(pair.vocab, length):
            hot = int(rng.integers(pair.vocab))
            rows[p] = tuple(one if x == hot else zero for x in range(pair.vocab))
    return ModelPair(pair.vocab, TableModel(rows, depth, "draft"), pair.target, pair.exact)


def to_float(pair: ModelPair) -> ModelPair:
    """The same pair with float64 entries (for solvers)."""
    if not pair.exact:
        return pair
    return pair_from_dict(json.loads(json.dumps(_floatify(pair.to_json()))))


def _floatify(obj: Any) -> Any:
    if isinstance(obj, str) and "/" in obj:
        return float(Fraction(obj))
    if isinstance(obj, dict):
        return {k: _floatify(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_floatify(v) for v in obj]
    return obj
