"""Human-readable summaries of a trace: what ``specbatch trace info`` and reports print.

``trace_summary`` gives per draft position i the means over all rows of ``r_i``, ``min(1, r_i)``
and BV's ``p_i``, and the implied mean accepted length ``MAL(γ) = E[τ + 1] = 1 + Σ_{i≤γ} mean
P(τ ≥ i)`` for TV (``P = Π_{j≤i} min(1, r_j)``, THEORY.md §2) and BV (``P = p_i``, §3) at every
γ = 0..K, averaged uniformly over the recorded (request, position) rows.

``signal_quality`` says how well each draft-side signal, known before verification, predicts
acceptance, which bounds what a confidence-driven allocator such as TETRIS can gain. The
outcome at a row is probabilistic, so both scores weight by the true probability instead of
sampling labels:

- ``corr``: Pearson correlation between the signal and the acceptance probability;
- ``auc``: the expected ROC AUC when each row is an accepted example with weight ``a`` and a
  rejected one with weight ``1 − a``: ``Σ_{i,j} a_i (1 − a_j) [s_i > s_j] / (Σ a · Σ (1 − a))``
  (ties count 1/2). 0.5 is no information, 1 a perfect ranking.

The signals: the first drafted token's confidence ``conf_1``, minus its entropy (low entropy
should mean acceptance), its top-1 probability, all against ``a = min(1, r_1)`` (the first
token's TV acceptance probability); and TETRIS's estimate ``Π_{l≤j} min(conf_l, 1)`` against
``P(τ ≥ j) = Π_{l≤j} min(1, r_l)`` over every position j (THEORY.md §2, §5).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specbatch.traces.format.identity import describe_identity


def trace_summary(trace) -> dict:
    """The numbers ``specbatch trace info`` prints (means over all position rows)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = trace.pt / trace.q  # [rows, K]
    accept = np.minimum(r, 1.0)
    tv = trace.accept_tv.mean(axis=0)  # [K] mean P(τ ≥ i) under TV
    bv = trace.p.mean(axis=0)  # [K] under BV
    models = trace.meta.get("models") or {}
    names = {role: (m.get("name") or m.get("path")) if isinstance(m, dict) else m
             for role, m in models.items()} if isinstance(models, dict) else models
    identity = {role: describe_identity(m) for role, m in models.items()} \
        if isinstance(models, dict) else {}
    categories, counts = np.unique(trace.category.astype(str), return_counts=True)
    return {
        "path": trace.path,
        "requests": trace.n_requests,
        "positions": trace.n_rows,
        "K": trace.K,
        "temperature": trace.temperature,
        "models": names,
        "identity": identity,
        "model_params": {role: _count(m.get("params")) for role, m in models.items()
                         if isinstance(m, dict)} if isinstance(models, dict) else {},
        "categories": dict(zip(categories.tolist(), counts.tolist())),
        "prompt_len_mean": float(trace.prompt_len.mean()),
        "output_len_mean": float(trace.output_len.mean()),
        "per_position": {
            "i": list(range(1, trace.K + 1)),
            "r_mean": r.mean(axis=0).tolist(),
            "accept_mean": accept.mean(axis=0).tolist(),
            "p_mean": bv.tolist(),
            "tv_reach_mean": tv.tolist(),
        },
        "mal": {
            "gamma": list(range(trace.K + 1)),
            "tv": (1 + np.concatenate([[0.0], np.cumsum(tv)])).tolist(),
            "bv": (1 + np.concatenate([[0.0], np.cumsum(bv)])).tolist(),
        },
        "status": trace.status,
        "signals": signal_quality(trace),
        **({"tree": _tree_part(trace)} if getattr(trace, "tree", None) is not None else {}),
    }


def _tree_part(trace) -> dict:
    from specbatch.traces.format.tree_summary import tree_summary

    return tree_summary(trace)


def _count(value):
    """``value`` when it is a positive number (a parameter count), else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return value if ok else None


def weighted_auc(score: np.ndarray, a: np.ndarray) -> float:
    """Expected ROC AUC of ``score`` for outcomes that are positive with probability ``a``.

    score, a: # [n]. Sorting once: for each group of tied scores, the positive weight in the
    group times the negative weight strictly below it, plus half the pairs inside the group.
    """
    score, a = np.asarray(score, dtype=np.float64), np.asarray(a, dtype=np.float64)
    pos_total, neg_total = a.sum(), (1.0 - a).sum()
    if pos_total <= 0 or neg_total <= 0:
        return float("nan")
    order = np.argsort(score, kind="stable")
    s, pos, neg = score[order], a[order], 1.0 - a[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    pos_g, neg_g = np.add.reduceat(pos, starts), np.add.reduceat(neg, starts)
    neg_below = np.cumsum(neg_g) - neg_g
    return float((pos_g * neg_below + 0.5 * pos_g * neg_g).sum() / (pos_total * neg_total))


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def signal_quality(trace) -> dict:
    """Correlation and expected AUC of each draft signal against acceptance (module doc)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a1 = np.minimum(trace.pt[:, 0] / trace.q[:, 0], 1.0)  # [rows]
    a1 = np.nan_to_num(a1, nan=0.0)
    signals = {"confidence": trace.draft_conf[:, 0], "neg_entropy": -trace.entropy[:, 0],
               "top1": trace.top1[:, 0]}
    out = {name: {"corr": _corr(v, a1), "auc": weighted_auc(v, a1)} for name, v in signals.items()}
    estimate = np.cumprod(np.minimum(trace.draft_conf, 1.0), axis=1).ravel()  # [rows * K]
    reach = trace.accept_tv.ravel()
    out["cumulative_confidence"] = {"corr": _corr(estimate, reach),
                                    "auc": weighted_auc(estimate, reach)}
    out["acceptance_mean"] = float(a1.mean()) if a1.size else float("nan")
    return out


def describe_trace(meta: dict, depth: int) -> str:
    """``draft (0.37M params) -> target (3.44M params), 240 requests, temperature 1, K = 8``."""
    bits = []
    models = meta.get("models") or {}
    pair = []
    for role in ("draft", "target"):
        model = models.get(role) or meta.get(role) or {}
        if not isinstance(model, dict):  # a name (or any other value an older file holds)
            pair.append(str(model))
            continue
        text = str(model.get("name") or Path(str(model.get("path") or role)).name)
        if _count(model.get("params")):
            text += f" ({model['params'] / 1e6:.2f}M params)"
        pair.append(text)
    bits.append(" -> ".join(pair))
    if "temperature" in meta:
        bits.append(f"temperature {meta['temperature']:g}")
    bits.append(f"K = {depth}")
    return ", ".join(bits)
