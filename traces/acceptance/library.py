"""The bundled library of published acceptance profiles (``traces/data/acceptance/*.json``).

Each file is a profile (traces.acceptance.profile) whose ``provenance`` names the source
(paper, model card, engine issue or pull request, and the table or comment), what the source
printed (``published``) and how the rates follow from it (``derivation``). Only numbers a
source gives with their conditions are bundled; where a source gives the mean accepted length
at one K only, the rates are the constant chain ``a_j = α`` with ``1 + Σ_{j≤K} α^j = MAL``
(:func:`constant_chain`), which reproduces that MAL at that K and nothing more — the profile
says so in ``notes``. Where a source gives MAL at every k (a model card's k = 1..7 table),
``S_k = MAL(k) − MAL(k−1)`` gives the per-position survival exactly (to the printed digits).

``--acceptance-profile NAME`` names a file here; a path names any profile file.
"""

from __future__ import annotations

from pathlib import Path

from specbatch.errors import SpecbatchError, require
from specbatch.traces.acceptance.profile import AcceptanceProfile, read_profile

#: Where the bundled profiles live.
LIBRARY_DIR = Path(__file__).resolve().parent.parent / "data" / "acceptance"


def bundled_names() -> list[str]:
    """The bundled profiles' names (file stems), sorted."""
    return sorted(p.stem for p in LIBRARY_DIR.glob("*.json"))


def load_bundled(name: str) -> AcceptanceProfile:
    """The bundled profile ``name`` (one-line error listing the names otherwise)."""
    require("/" not in name, f"--acceptance-profile: expected a bundled name, got {name!r}")
    return read_profile(profile_path(name))


def profile_path(text: str) -> Path:
    """The file ``--acceptance-profile TEXT`` names: a path, or a bundled profile's name."""
    path = Path(text)
    if path.is_file():
        return path
    if path.suffix == ".json" or "/" in text:
        raise SpecbatchError(f"--acceptance-profile: expected a profile file, got no such file "
                             f"{text!r}")
    bundled = LIBRARY_DIR / f"{text}.json"
    require(bundled.is_file(), f"--acceptance-profile: expected a profile file or one of "
            f"{', '.join(bundled_names())}, got {text!r}")
    return bundled


def resolve_profile(text: str) -> AcceptanceProfile:
    """A profile file's path, or a bundled profile's name."""
    return read_profile(profile_path(text))


def chain_mal(alpha: float, k: int) -> float:
    """``1 + Σ_{j≤k} α^j``: MAL of a constant chain at k drafted tokens."""
    return 1.0 + sum(alpha ** j for j in range(1, k + 1))


def constant_chain(mal: float, k: int) -> float:
    """The α with ``chain_mal(α, k) = mal`` (bisection to 1e-12; 1 ≤ mal ≤ k + 1)."""
    require(1.0 <= mal <= k + 1, f"mal: expected 1 <= MAL <= K + 1 = {k + 1}, got {mal}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chain_mal(mid, k) < mal else (lo, mid)
    return (lo + hi) / 2


def survival_from_mal_table(mals: list[float]) -> list[float]:
    """``S_k = MAL(k) − MAL(k−1)`` (``MAL(0) = 1``) from a table of MAL at k = 1..K, clipped
    to be non-increasing and in [0, 1] (printed digits can make a step rise by rounding)."""
    out, before, cap = [], 1.0, 1.0
    for m in mals:
        s = min(cap, max(0.0, m - before))
        out.append(s)
        before, cap = m, s
    return out
