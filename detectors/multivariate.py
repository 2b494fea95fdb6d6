"""Multivariate anomaly: an IsolationForest per entity kind on the whole feature vector, fitted on healthy
periods only (confounders included), so what it flags is a combination of signals the healthy fleet never
showed, whatever fault class it is.

Score = the negated ``score_samples`` (higher = more anomalous, about 0.3-0.8). ``threshold_`` per kind is
the ``healthy_quantile`` of the healthy training scores: above it for ``persist`` scorings in a row is
``suspect``; above the highest healthy training score plus ``margin`` is ``subhealthy``. Isolation scores
saturate: a point far outside the healthy fleet isolates about as fast as the fleet's own extreme tail, so
on its own this detector is a "something unusual" signal, and the flags come mostly from the predictor. Missing
features (a stock exporter has no ECC counters) take the healthy median. Like the predictor's, an alarm needs
one supporting feature far outside the healthy fleet (``LearnedDetector.support_z``): an idle GPU with one
stray PCIe replay is a combination the healthy fleet rarely shows, and no fault.
"""

from __future__ import annotations

import numpy as np

from detectors.learned import LearnedDetector, transform
from detectors.schema import State


class MultivariateDetector(LearnedDetector):
    """IsolationForest on healthy feature vectors; parameters in ``__init__``."""

    name = "multivariate"
    fitted_per_kind = ("fill_", "subhealthy_", "columns_")
    min_support_z = 6.0  # the default for models saved before the parameter existed

    def __init__(self, n_estimators: int = 100, max_samples: int = 512, healthy_quantile: float = 0.999,
                 margin: float = 0.02, score_every_ticks: int = 10, persist: int = 3, random_state: int = 0,
                 min_support_z: float | None = 6.0):
        super().__init__(score_every_ticks, persist)
        self.min_support_z = min_support_z
        self.n_estimators = n_estimators
        self.max_samples = max_samples
        self.healthy_quantile = healthy_quantile
        self.margin = margin
        self.random_state = random_state

    def fit(self, X=None, y=None, kind: str = "accelerator", names: tuple[str, ...] = (), sample_weight=None):
        """Fit one kind on its healthy rows ``X`` (raw features; ``y`` unused)."""
        self._start()
        if X is None:
            return self
        self._fit_reference(kind, X)
        Xt = transform(X, names)
        fill = np.nanmedian(Xt, axis=0)
        self.fill_[kind] = np.where(np.isfinite(fill), fill, 0.0)
        Xt = self._impute(kind, Xt)
        # A feature constant over the healthy fleet can never be split on; leaving it in only dilutes the
        # random choice of split features (any value of it is new, and the others say so too).
        self.columns_[kind] = np.flatnonzero(np.ptp(Xt, axis=0) > 0) if len(Xt) else np.arange(Xt.shape[1])
        Xt = Xt[:, self.columns_[kind]]
        from sklearn.ensemble import IsolationForest  # (when fitting: the daemon starts without sklearn's import)

        model = IsolationForest(n_estimators=self.n_estimators, max_samples=min(self.max_samples, len(Xt)),
                                random_state=self.random_state)
        model.fit(Xt, sample_weight=sample_weight)
        self.models_[kind] = model
        train = -model.score_samples(Xt)
        self.thresholds_[kind] = float(np.quantile(train, self.healthy_quantile))
        self.subhealthy_[kind] = float(train.max()) + self.margin
        return self

    def _impute(self, kind: str, Xt: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(Xt), self.fill_[kind][None, :], Xt)

    def _score(self, kind: str, Xt: np.ndarray) -> np.ndarray:
        return -self.models_[kind].score_samples(self._impute(kind, Xt)[:, self.columns_[kind]])

    def _level(self, kind: str, score: float) -> State:
        return State.SUBHEALTHY if score >= self.subhealthy_[kind] else State.SUSPECT
