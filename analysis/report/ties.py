"""Paired intervals over seeds and tie sets (THEORY.md §14).

Settings are run on the same R seeds (common random numbers). For a metric m where higher is
better (a gain over ``ar`` in percent), the paired difference of settings s and s' on seed r
is ``d_r = m_{s,r} − m_{s',r}``; its 95 % interval is ``d̄ ± t_{R−1,0.975} · s_d / √R``
(:func:`t_interval`). The **best** setting has the highest mean (ties: the
first listed, the simplest); its **tie set** is every setting whose interval against it
contains 0 (``d̄ − half ≤ 0``), the best included. A setting **wins** over a reference only
when its interval against it lies above 0.

Each seed's own best is always in the tie set for R ≤ 4: its difference to the best is ≤ 0
on that seed, and one value of a sample lies within ``s_d (R − 1) / √R`` of the mean, which is
at most ``t_{R−1,0.975} · s_d / √R`` while ``t_{R−1,0.975} ≥ R − 1`` (12.71, 4.30, 3.18 for
R = 2, 3, 4; not for R ≥ 5, where 2.78 < 4). So the seed-to-seed flips of a single-seed answer
are all named in the tie set of the default R = 3.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specbatch.errors import require

#: ``t_{df,0.975}`` for df = 1..32 (the 95 % intervals of 2 to 33 seeds), each the float
#: ``scipy.special.stdtrit(df, 0.975)`` returns (tests/analysis/report/test_ties.py checks
#: every one against scipy.stats.t.ppf): scipy.special's import costs ~0.15 CPU-s.
T_975 = (12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934,
         2.5705818356363146, 2.4469118511449786, 2.364624251592784, 2.306004135204166,
         2.262157162798205, 2.228138851986274, 2.200985160091639, 2.1788128296672284,
         2.1603686564627913, 2.144786687917804, 2.131449545559776, 2.1199052992212546,
         2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864,
         2.0796138447276795, 2.0738730679040254, 2.0686576104190486, 2.0638985616280245,
         2.0595385527532972, 2.0555294386428735, 2.0518305164802846, 2.0484071417952454,
         2.045229642132703, 2.0422724563012378, 2.039513446396408, 2.0369333434601016)


def t_quantile(q: float, df: int) -> float:
    """Student t's quantile ``t_{df,q}``: ``scipy.special.stdtrit``, the function
    ``scipy.stats.t.ppf`` calls (the same float), without importing scipy.stats (~0.7 s);
    from :data:`T_975` at q = 0.975 (no scipy at all)."""
    if q == 0.975 and 1 <= df <= len(T_975) and df == int(df):
        return T_975[int(df) - 1]
    try:
        from scipy.special._ufuncs import stdtrit
    except ImportError:  # a scipy that moved it
        from scipy.special import stdtrit
    return float(stdtrit(df, q))


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval of i.i.d. values; (mean, NaN, NaN) when n < 2."""
    x = np.asarray(values, dtype=float)  # [n]
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.5 + confidence / 2, x.size - 1) * sample_sd(x) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def sample_sd(x: np.ndarray) -> float:
    """The sample standard deviation (ddof 1) of ``x`` # [n], computed on deviations scaled
    by their largest magnitude so that tiny ones (below ~1e-154, whose squares underflow to 0)
    keep a positive spread instead of a zero-width interval."""
    dev = x - x.mean()  # [n]
    scale = float(np.abs(dev).max())
    if scale == 0.0 or not math.isfinite(scale):
        return float(x.std(ddof=1))
    return scale * float((dev / scale).std(ddof=1))


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its 95 % Student-t interval (NaN bounds when R < 2)."""

    mean: float
    ci_low: float
    ci_high: float
    n: int

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci_low": _finite(self.ci_low),
                "ci_high": _finite(self.ci_high), "seeds": self.n}

    def text(self, unit: str = " %") -> str:
        """``+0.57 % [-1.55, +2.68]`` (no brackets for one seed)."""
        if not math.isfinite(self.ci_low):
            return f"{self.mean:+.2f}{unit} (one seed: no interval)"
        return f"{self.mean:+.2f}{unit} [{self.ci_low:+.2f}, {self.ci_high:+.2f}]"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def interval(values: Sequence[float]) -> Interval:
    """The mean of per-seed values and its 95 % interval."""
    mean, low, high = t_interval(values)
    return Interval(mean, low, high, len(values))


def paired(a: Sequence[float], b: Sequence[float]) -> Interval:
    """The interval of ``a_r − b_r`` over the seeds (same order)."""
    require(len(a) == len(b), f"paired: expected the same seeds, got {len(a)} and {len(b)}")
    return interval([x - y for x, y in zip(a, b)])


def best_of(values: Mapping[str, Sequence[float]]) -> str:
    """The setting of highest mean (ties: the first listed)."""
    require(bool(values), "best_of: expected at least one setting")
    means = {k: sum(v) / len(v) for k, v in values.items()}
    return max(means, key=lambda k: (means[k], -list(values).index(k)))


def tie_set(values: Mapping[str, Sequence[float]]) -> tuple[str, list[str]]:
    """(best, tie set in the listed order) of per-seed values, higher better (module
    docstring). With one seed the tie set is the settings equal to the best."""
    best = best_of(values)
    ties = []
    for name, v in values.items():
        d = paired(values[best], v)
        if name == best or (math.isfinite(d.ci_low) and d.ci_low <= 0) or (
                not math.isfinite(d.ci_low) and d.mean <= 0):
            ties.append(name)
    return best, ties


def wins(values: Sequence[float], reference: Sequence[float]) -> tuple[bool, Interval]:
    """Whether ``values`` beat ``reference`` (interval of the paired difference above 0)."""
    d = paired(values, reference)
    return bool(math.isfinite(d.ci_low) and d.ci_low > 0), d


def tie_text(ties: Sequence[str]) -> str:
    """``fixed k=2 BV ≈ dsd BV ≈ fixed k=1 TV``."""
    return " ≈ ".join(ties)
