"""A learned acceptance predictor: P(draft token j is accepted | the draft's own signals).

TETRIS (THEORY.md §5) ranks draft tokens across the batch by an estimate of
``P_{i,j} = P(τ_i ≥ j)``; the official code's estimate is the draft's cumulative confidence
``Π_{l≤j} conf_l``. This module fits a small model of the *conditional* acceptance of each
drafted token instead, from signals known before verification, on calibration requests that
are never replayed (simulator.policies.calibration):

- features of token j of a row (:data:`FEATURES`): its draft index j, the draft's
  temperature-1 probability of it (``conf_j``, and its log), the draft's entropy and top-1
  probability at that position, the log of the running product ``Π_{l<j} conf_l`` and the
  smallest confidence before j (how shaky the path leading to it was);
- label: TV's acceptance probability of the token given its prefix, ``a_j = min(1, r_j)``
  (THEORY.md §2), used as a *soft* label: each token is one accepted example of weight
  ``a_j`` and one rejected example of weight ``1 − a_j``, so the classifier's log loss is the
  cross-entropy against the true probability (no coin noise in the labels);
- models (``config.predictor``): ``learned`` is scikit-learn's
  HistGradientBoostingClassifier (fixed iterations, no early-stopping split, fixed
  random_state: the same calibration rows give the same model), ``logistic`` a standardised
  logistic regression on the same features.

The estimate of ``P(τ ≥ j)`` is the product of the predicted conditionals, non-increasing
along j like the confidence surrogate, so the same allocators apply (top-C for TV, the
monotone optimum for BV, where it is the TV-style estimate as the surrogate is). Filler slots
of n-gram traces (beyond the row's ``proposed`` tokens) are neither fitted nor scored: a
policy never verifies them (StepView.cap). Their draft signals are 0, and a drafted token's
confidence never is, so a token of confidence 0 is predicted rejected (probability 0) rather
than extrapolated: TETRIS spends no budget on a filler.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import SpecbatchError

if TYPE_CHECKING:
    from specbatch.traces.format.trace import Trace

#: ``config.predictor`` values: the draft's own confidence (no fitting) or a fitted model.
PREDICTORS = ("confidence", "learned", "logistic")
#: The fitted kinds among :data:`PREDICTORS`.
LEARNED = ("learned", "logistic")
#: Columns of :func:`token_features`, in order.
FEATURES = ("draft_index", "conf", "log_conf", "entropy", "top1", "log_reach_before",
            "min_conf_before")
#: Confidences are floored here before a log (a filler or an underflow is not -inf).
TINY = 1e-12
#: Fitted predictors kept per process (a sweep refits nothing it has fitted already).
CACHE_SIZE = 16
_CACHE: dict[tuple, AcceptancePredictor] = {}


def token_features(conf: np.ndarray, entropy: np.ndarray, top1: np.ndarray) -> np.ndarray:
    """The :data:`FEATURES` of every (row, draft index), row-major.

    conf, entropy, top1: # [rows, D] draft-side signals (trace columns draft_conf, entropy,
    top1); each row's features depend on that row alone.
    returns # [rows · D, len(FEATURES)] float64
    """
    rows, depth = conf.shape
    c = np.clip(np.asarray(conf, dtype=np.float64), 0.0, 1.0)
    log_c = np.log(np.maximum(c, TINY))
    before = np.cumsum(log_c, axis=1) - log_c  # log Π_{l<j} conf_l
    shifted = np.concatenate([np.ones((rows, 1)), c[:, :-1]], axis=1)
    min_before = np.minimum.accumulate(shifted, axis=1)
    index = np.broadcast_to(np.arange(1, depth + 1, dtype=np.float64), (rows, depth))
    cols = (index, c, log_c, np.asarray(entropy, dtype=np.float64),
            np.asarray(top1, dtype=np.float64), before, min_before)
    return np.stack(cols, axis=-1).reshape(rows * depth, len(FEATURES))


def token_acceptance(q: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """TV's acceptance probability of each drafted token given its prefix, ``min(1, pt/q)``
    (0 where q = 0).  q, pt # [rows, D];  returns # [rows, D]"""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.minimum(np.nan_to_num(pt / q, nan=0.0, posinf=1.0), 1.0)


def real_slots(trace: Trace) -> np.ndarray:
    """Whether each (row, draft index) is a real draft token, not an n-gram filler.
    # [rows, K] bool"""
    k = trace.K
    if trace.proposed is None:
        return np.ones((trace.n_rows, k), dtype=bool)
    return np.arange(k)[None, :] < trace.proposed[:, None]


@dataclass(frozen=True, eq=False)
class FittedModel:
    """A fitted acceptance model; immutable, so replicas share it.

    kind:  ``learned`` (gradient-boosted trees) or ``logistic``
    model: the fitted scikit-learn estimator (classes 0 = rejected, 1 = accepted)
    key:   fingerprint of the calibration data and kind (the cache and table key)
    """

    kind: str
    model: Any
    key: str

    def __deepcopy__(self, memo: dict) -> FittedModel:
        return self  # immutable: replicas share one fitted model


class AcceptancePredictor(FittedModel):
    """A fitted model of per-token acceptance on chains (module docstring)."""

    def token_probs(self, conf: np.ndarray, entropy: np.ndarray, top1: np.ndarray
                    ) -> np.ndarray:
        """Predicted ``P(token j accepted | tokens < j accepted)``.
        conf, entropy, top1 # [rows, D];  returns # [rows, D] in [0, 1]"""
        rows, depth = conf.shape
        if rows == 0 or depth == 0:
            return np.zeros((rows, depth))
        x = token_features(conf, entropy, top1)
        with one_thread():
            prob = self.model.predict_proba(x)[:, 1]
        prob[x[:, FEATURES.index("conf")] <= 0] = 0.0  # a filler (no draft token): rejected
        return np.clip(prob, 0.0, 1.0).reshape(rows, depth)

    def reach(self, conf: np.ndarray, entropy: np.ndarray, top1: np.ndarray) -> np.ndarray:
        """Estimated ``P(τ ≥ j)``: the running product of :meth:`token_probs`, non-increasing
        along j (TETRIS's allocation values).  returns # [rows, D]"""
        return np.cumprod(self.token_probs(conf, entropy, top1), axis=1)


def one_thread() -> Any:
    """A context in which scikit-learn's OpenMP/BLAS pools run one thread: the same sums in
    the same order on every machine, and no spinning threads fighting a sweep's workers."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def make_model(kind: str) -> Any:
    """An unfitted scikit-learn estimator of ``kind`` (:data:`LEARNED`), deterministic."""
    if kind == "learned":
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(max_iter=150, learning_rate=0.1,
                                              max_leaf_nodes=31, min_samples_leaf=40,
                                              early_stopping=False, random_state=0)
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))
    raise SpecbatchError(f"predictor: expected one of {', '.join(LEARNED)}, got {kind!r}")


def fingerprint(trace: Trace, kind: str) -> str:
    """SHA-256 of the columns a fit reads (q, pt, the draft signals, proposed) and ``kind``."""
    h = hashlib.sha256(kind.encode())
    for arr in (trace.q, trace.pt, trace.draft_conf, trace.entropy, trace.top1):
        h.update(np.ascontiguousarray(arr).tobytes())
    if trace.proposed is not None:
        h.update(np.ascontiguousarray(trace.proposed).tobytes())
    return h.hexdigest()


def fit_predictor(trace: Trace, kind: str = "learned") -> AcceptancePredictor:
    """Fit a ``kind`` predictor on every real draft token of ``trace`` (the calibration
    requests), soft-labelled by ``min(1, r)`` (module docstring). Cached per process by
    :func:`fingerprint`. A trace whose tokens are all accepted or all rejected has nothing to
    learn: a one-line error."""
    key = fingerprint(trace, kind)
    got = _CACHE.get(key)
    if got is not None:
        return got
    mask = real_slots(trace).ravel()
    x = token_features(trace.draft_conf, trace.entropy, trace.top1)[mask]
    a = token_acceptance(trace.q, trace.pt).ravel()[mask]
    model = fit_soft_labels(kind, x, a, "the calibration requests have", "draft token")
    return remember(_CACHE, key, AcceptancePredictor(kind, model, key))


def fit_soft_labels(kind: str, x: np.ndarray, a: np.ndarray, owner: str, unit: str) -> Any:
    """``make_model(kind)`` fitted to acceptance probabilities ``a`` # [m] of examples ``x``
    # [m, features] as soft labels: each example is one accepted row of weight a and one
    rejected row of weight 1 − a, so the log loss is minimised by E[a | x] and the model's
    output is already a probability. ``owner``/``unit`` word the error when every a is 0 or
    every a is 1 (nothing to learn)."""
    pos, neg = a > 0, a < 1
    if not pos.any() or not neg.any():
        what = "accepted" if not pos.any() else "rejected"
        raise SpecbatchError(f"predictor {kind}: {owner} no {what} {unit}, so there is "
                             "nothing to learn")
    xs = np.concatenate([x[pos], x[neg]])
    ys = np.concatenate([np.ones(int(pos.sum()), dtype=np.int64),
                         np.zeros(int(neg.sum()), dtype=np.int64)])
    ws = np.concatenate([a[pos], 1.0 - a[neg]])
    model = make_model(kind)
    with one_thread():
        if kind == "logistic":
            model.fit(xs, ys, logisticregression__sample_weight=ws)
        else:
            model.fit(xs, ys, sample_weight=ws)
    return model


def remember(cache: dict, key: Any, value: Any) -> Any:
    """Put ``value`` in a per-process ``cache`` of at most :data:`CACHE_SIZE` entries (the
    oldest goes first) and return it."""
    if len(cache) >= CACHE_SIZE:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value
