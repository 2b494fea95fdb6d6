"""The registered detectors, by name. The pipeline runs all but the baseline-only configuration."""

from __future__ import annotations

from detectors.peer import PeerDeviation
from detectors.rules import RuleDetector
from detectors.trend import TrendDetector

DETECTORS: dict[str, type] = {
    RuleDetector.name: RuleDetector,
    PeerDeviation.name: PeerDeviation,
    TrendDetector.name: TrendDetector,
}


def build(baseline: bool = False) -> list:
    """Fitted instances of every detector (only the static rules for the baseline)."""
    if baseline:
        return [RuleDetector(baseline=True).fit()]
    return [cls().fit() for cls in DETECTORS.values()]
