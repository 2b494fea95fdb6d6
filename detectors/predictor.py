"""Supervised failure predictor: the probability that an entity is heading for a hard fault within
``horizon_s``, from a HistGradientBoostingClassifier per entity kind trained on labelled traces.

Rows and labels come from :func:`detectors.learned.label_rows` (positives: a non-benign fault's onset has
passed and its failure is within the horizon; negatives: entities no fault touches, confounders
included). Classes are balanced by weight. The threshold is chosen out of fold, grouped by trace (no trace
scores itself): the ``negative_quantile`` of the held-out healthy probabilities, at least
``min_threshold``; above it for ``persist`` scorings in a row is ``subhealthy``. Missing features are
native to the model (the stock exporter profile has no ECC counters). A kind whose out-of-fold recall
at that threshold is below ``min_out_of_fold_recall`` is not kept (too little data to trust it: the
reason is in ``out_of_fold_``), and the other detectors carry that kind alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from detectors.learned import LearnedDetector, transform
from detectors.schema import State

if TYPE_CHECKING:  # scikit-learn is imported when a model is fitted (the daemon starts without it)
    from sklearn.ensemble import HistGradientBoostingClassifier


class FailurePredictor(LearnedDetector):
    """Gradient-boosted failure probability within a horizon; parameters in ``__init__``."""

    name = "predictor"
    fitted_per_kind = ("out_of_fold_",)
    min_support_z = 6.0  # the default for models saved before the parameter existed

    def __init__(self, horizon_s: float = 12 * 3600.0, max_iter: int = 200, learning_rate: float = 0.1,
                 max_leaf_nodes: int = 31, min_threshold: float = 0.5, negative_quantile: float = 0.99999,
                 min_out_of_fold_recall: float = 0.5, score_every_ticks: int = 10, persist: int = 3,
                 random_state: int = 0, min_support_z: float | None = 6.0):
        super().__init__(score_every_ticks, persist)
        self.min_support_z = min_support_z
        self.horizon_s = horizon_s
        self.min_out_of_fold_recall = min_out_of_fold_recall
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_threshold = min_threshold
        self.negative_quantile = negative_quantile
        self.random_state = random_state

    def _model(self) -> HistGradientBoostingClassifier:
        from sklearn.ensemble import HistGradientBoostingClassifier  # (when fitting: see multivariate)

        return HistGradientBoostingClassifier(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                              max_leaf_nodes=self.max_leaf_nodes, random_state=self.random_state)

    def _fit_one(self, Xt: np.ndarray, y: np.ndarray, w: np.ndarray) -> HistGradientBoostingClassifier:
        """Fit on rows where a feature may be missing throughout (a stock-profile trace has no ECC at all):
        scikit-learn's binning fails on an all-NaN column, so such a column is a constant here."""
        empty = np.isnan(Xt).all(axis=0)
        if empty.any():
            Xt = Xt.copy()
            Xt[:, empty] = 0.0
        return self._model().fit(Xt, y, sample_weight=w)

    def fit(self, X=None, y=None, kind: str = "accelerator", names: tuple[str, ...] = (), sample_weight=None,
            groups=None, healthy=None):
        """Fit one kind: ``X`` raw features, ``y`` 1 for positives, ``groups`` the trace of each row,
        ``healthy`` the negatives that no fault touches (for the reasons' reference fleet)."""
        self._start()
        if X is None:
            return self
        y = np.asarray(y, dtype=int)
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        w = w.copy()
        pos, neg = w[y == 1].sum(), w[y == 0].sum()
        if pos == 0 or neg == 0:
            raise ValueError(f"{kind}: training rows need both positives ({pos:g}) and negatives ({neg:g})")
        w[y == 1] *= neg / pos
        self._fit_reference(kind, X[healthy] if healthy is not None else X[y == 0])
        Xt = transform(X, names)
        threshold = self.min_threshold
        groups = np.zeros(len(y), dtype=int) if groups is None else np.asarray(groups)
        n_groups = len(np.unique(groups))
        if n_groups >= 2:
            from sklearn.model_selection import GroupKFold

            oof = np.full(len(y), np.nan)  # rows of a fold that could not be fitted stay unscored
            for train, test in GroupKFold(n_splits=min(4, n_groups)).split(Xt, y, groups):
                if len(np.unique(y[train])) < 2:
                    continue
                m = self._fit_one(Xt[train], y[train], w[train])
                oof[test] = m.predict_proba(Xt[test])[:, 1]
            negatives = oof[(y == 0) & np.isfinite(oof)]
            positives = oof[(y == 1) & np.isfinite(oof)]
            if len(negatives):
                threshold = max(self.min_threshold, float(np.quantile(negatives, self.negative_quantile)))
            recall = float((positives >= threshold).mean()) if len(positives) else 0.0
            self.out_of_fold_[kind] = {
                "threshold": threshold,
                "positives_above": recall,
                "negatives_above": float((negatives >= threshold).mean()) if len(negatives) else None,
            }
            if recall < self.min_out_of_fold_recall:
                self.out_of_fold_[kind]["rejected"] = (
                    f"out-of-fold recall {recall:.2f} below {self.min_out_of_fold_recall}: not used")
                return self
        self.models_[kind] = self._fit_one(Xt, y, w)
        self.thresholds_[kind] = threshold
        return self

    def _score(self, kind: str, Xt: np.ndarray) -> np.ndarray:
        return self.models_[kind].predict_proba(Xt)[:, 1]

    def _level(self, kind: str, score: float) -> State:
        return State.SUBHEALTHY
