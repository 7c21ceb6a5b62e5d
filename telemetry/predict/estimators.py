"""The three model architectures, behind one ``fit(kind, X, y) -> Scorer`` call.

- ``gbdt``: one histogram gradient-boosted tree model (scikit-learn; LightGBM is not a dependency). The baseline.
- ``ensemble``: the ByteDance paper's *parallel* architecture. Three different learners (boosted trees, a random
  forest, a logistic regression) score every row and the ensemble's score is the k-th highest of their
  probabilities, so an alarm at threshold ``t`` means "at least k of the n models say p >= t". Agreement trades
  recall for precision: one model's quirk no longer raises an alarm by itself.
- ``cascade``: the paper's *cascade* architecture. A cheap filter (logistic regression, its cut-off set to keep
  97 % of the training positives) discards the rows that are plainly healthy; a boosted-tree classifier trained
  only on the rows that pass decides among the hard cases. The second stage sees far more hard negatives (ECC
  bursts that fade, hot-but-fine GPUs) per positive than a model trained on a random sample of all rows.

Failures are rare (a few hundred positive rows among millions), so every learner trains on all positives plus a
uniform sample of negatives whose weights restore the true class balance, and positives are then up-weighted to a
quarter of the negative mass. Only the ranking of scores matters downstream: the alarm threshold is chosen on
held-out data.

A feature can be empty in a training sample: a fleet that never reports a field (no ``pcie_replay`` column, a
driver that leaves ``retired_pages`` blank) or a window from before a firmware update started reporting it. The
boosted trees are fitted on the other columns only (:class:`_Trees`); scikit-learn's binning cannot take a column
without a single value. Constant columns need nothing: the trees never split on them. The imputing pipelines
(forest, logistic regression) keep empty columns as constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

DEFAULT_MAX_NEGATIVES = 120_000
POSITIVE_MASS = 0.25  # total positive weight as a fraction of the total (true-balance) negative weight
CASCADE_FILTER_RECALL = 0.97
ENSEMBLE_AGREEMENT = 2  # k of n


class ModelKind(StrEnum):
    GBDT = "gbdt"
    ENSEMBLE = "ensemble"
    CASCADE = "cascade"


class Scorer(Protocol):
    def score(self, x: np.ndarray) -> np.ndarray:
        """A failure score per row; higher means more likely to fail within the horizon."""
        ...


class NotEnoughData(ValueError):
    """The training window has no positive (or no negative) rows, so no model can be fitted."""


def fit(
    kind: ModelKind,
    x: np.ndarray,
    y: np.ndarray,
    *,
    seed: int = 0,
    max_negatives: int = DEFAULT_MAX_NEGATIVES,
    threads: int | None = 1,
) -> Scorer:
    """Fit a model of ``kind`` on features ``x`` (rows x features, NaN allowed) and boolean labels ``y``.

    ``threads`` caps OpenMP/BLAS threads during the fit. The default of one is deliberate: retraining runs on a
    shared control-plane host, and scikit-learn's OpenMP loops slow down several-fold (not just share the CPU)
    when other processes compete for the cores. ``None`` leaves the libraries' defaults."""
    y = np.asarray(y, dtype=bool)
    if threads is None:
        return _fit(kind, x, y, seed, max_negatives)
    with threadpool_limits(limits=threads):
        return _fit(kind, x, y, seed, max_negatives)


def _fit(kind: ModelKind, x: np.ndarray, y: np.ndarray, seed: int, max_negatives: int) -> Scorer:
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == len(y):
        raise NotEnoughData(f"training window has {n_pos} positive rows out of {len(y)}; need both classes")
    rng = np.random.default_rng(seed)
    if kind is ModelKind.GBDT:
        xs, ys, _ = _sample(x, y, rng, max_negatives)
        return _Single(_fit_trees(seed, xs, ys))
    if kind is ModelKind.ENSEMBLE:
        xs, ys, ws = _sample(x, y, rng, max_negatives)
        members = [
            _fit_trees(seed, xs, ys),
            _forest(seed).fit(xs, ys, randomforestclassifier__sample_weight=ws),
            _linear(seed).fit(xs, ys, logisticregression__sample_weight=ws),
        ]
        return _Agreement(members, ENSEMBLE_AGREEMENT)
    if kind is ModelKind.CASCADE:
        return _fit_cascade(x, y, rng, seed, max_negatives)
    raise ValueError(f"unknown model kind {kind!r}")


# -- architectures --------------------------------------------------------------------------------------------------


def _proba(model: Any, x: np.ndarray) -> np.ndarray:
    # One thread for the same reason as in fit(): prediction is OpenMP-parallel too, and as fragile under load.
    with threadpool_limits(limits=1):
        proba: np.ndarray = model.predict_proba(x)[:, 1]  # scikit-learn is untyped
    return proba


@dataclass
class _Trees:
    """Boosted trees over the feature columns that had at least one value in their training sample."""

    model: HistGradientBoostingClassifier
    columns: np.ndarray  # indices into the full feature matrix

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        proba: np.ndarray = self.model.predict_proba(x if len(self.columns) == x.shape[1] else x[:, self.columns])
        return proba


def _fit_trees(seed: int, x: np.ndarray, y: np.ndarray) -> _Trees:
    columns = np.flatnonzero(~np.isnan(x).all(axis=0))
    return _Trees(_gbdt(seed).fit(x if len(columns) == x.shape[1] else x[:, columns], y), columns)


@dataclass
class _Single:
    model: _Trees

    def score(self, x: np.ndarray) -> np.ndarray:
        return _proba(self.model, x)


@dataclass
class _Agreement:
    members: list[Any]
    k: int

    def score(self, x: np.ndarray) -> np.ndarray:
        probs = np.column_stack([_proba(m, x) for m in self.members])
        return np.sort(probs, axis=1)[:, -self.k]


@dataclass
class _Cascade:
    filter: Pipeline
    cutoff: float
    classifier: _Trees | None

    def score(self, x: np.ndarray) -> np.ndarray:
        out = np.zeros(len(x))
        passing = _proba(self.filter, x) >= self.cutoff
        if self.classifier is not None and passing.any():
            # Stage-2 scores live in (0, 1]; filtered rows stay at 0 so any positive threshold drops them.
            out[passing] = np.maximum(_proba(self.classifier, x[passing]), 1e-12)
        return out


def _fit_cascade(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, seed: int, max_negatives: int) -> _Cascade:
    xs, ys, ws = _sample(x, y, rng, max_negatives)
    stage1 = _linear(seed).fit(xs, ys, logisticregression__sample_weight=ws)
    s1 = stage1.predict_proba(x)[:, 1]  # inside fit()'s thread limit
    cutoff = float(np.quantile(s1[y], 1 - CASCADE_FILTER_RECALL))
    passing = s1 >= cutoff
    yp = y[passing]
    if yp.all() or not yp.any():
        return _Cascade(stage1, cutoff, None)
    xs2, ys2, _ = _sample(x[passing], yp, rng, max_negatives)
    return _Cascade(stage1, cutoff, _fit_trees(seed, xs2, ys2))


# -- learners -------------------------------------------------------------------------------------------------------


def _gbdt(seed: int) -> HistGradientBoostingClassifier:
    # Regularised: a training window holds a few dozen failures, each contributing a day of highly correlated
    # positive rows, and a flexible model memorises them (31 leaves, 40 rows per leaf: train AP 0.99, test AP 0.05
    # on a 2,000-GPU fleet). Smaller leaves-per-tree and larger leaves than this lost more than they gained.
    return HistGradientBoostingClassifier(
        learning_rate=0.05,
        max_iter=200,
        max_leaf_nodes=16,
        min_samples_leaf=100,
        l2_regularization=5.0,
        max_features=0.5,
        early_stopping=False,
        random_state=seed,
    )


def _forest(seed: int) -> Pipeline:
    return make_pipeline(
        SimpleImputer(strategy="median", keep_empty_features=True),
        # Each tree sees a third of the rows: the forest is the slowest member, and bagging small samples keeps
        # it diverse while cutting its share of a 7-fold evaluation on a 2,000-GPU fleet several-fold.
        RandomForestClassifier(
            n_estimators=100,
            min_samples_leaf=50,
            max_features="sqrt",
            max_samples=0.33,
            n_jobs=1,
            random_state=seed,
        ),
    )


def _linear(seed: int) -> Pipeline:
    return make_pipeline(
        SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True),
        StandardScaler(),
        LogisticRegression(C=0.1, max_iter=1000, random_state=seed),
    )


def _sample(
    x: np.ndarray, y: np.ndarray, rng: np.random.Generator, max_negatives: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All positives plus at most ``max_negatives`` negatives, with weights restoring the true negative mass and
    positives carrying :data:`POSITIVE_MASS` of it."""
    pos = np.flatnonzero(y)
    neg = np.flatnonzero(~y)
    keep = neg if len(neg) <= max_negatives else np.sort(rng.choice(neg, size=max_negatives, replace=False))
    neg_weight = len(neg) / len(keep)
    pos_weight = max(1.0, POSITIVE_MASS * len(neg) / len(pos))
    index = np.concatenate([pos, keep])
    weights = np.concatenate([np.full(len(pos), pos_weight), np.full(len(keep), neg_weight)])
    return x[index], y[index], weights / weights.mean()
