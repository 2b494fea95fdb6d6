"""The registered detectors, by name. The pipeline runs all but the baseline-only configuration."""

from __future__ import annotations

from detectors.contract import Detector
from detectors.multivariate import MultivariateDetector
from detectors.peer import PeerDeviation
from detectors.predictor import FailurePredictor
from detectors.rules import RuleDetector
from detectors.trend import TrendDetector

DETECTORS: dict[str, type] = {
    RuleDetector.name: RuleDetector,
    PeerDeviation.name: PeerDeviation,
    TrendDetector.name: TrendDetector,
}

# Learned from labelled traces ('raswarden train'); they run only when a model is loaded.
LEARNED: dict[str, type] = {
    MultivariateDetector.name: MultivariateDetector,
    FailurePredictor.name: FailurePredictor,
}


def build(baseline: bool = False, model=None, rules_only: bool = False) -> list[Detector]:
    """Fitted instances of every detector (only the static rules for the baseline, only the rules with
    ``rules_only``), plus the learned detectors of ``model`` (a :class:`detectors.bundle.ModelBundle`)."""
    if baseline or rules_only:
        return [RuleDetector(baseline=baseline).fit()]
    out = [cls().fit() for cls in DETECTORS.values()]
    if model is not None:
        out += model.detectors()
    return out
