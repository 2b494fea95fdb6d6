"""Idle ticks: a tick that brings nothing new is given the detectors' evidence of the tick before, not run.

Sampled every 5 minutes and judged every 30 s, nine ticks in ten bring no sample, no event and no counter increase:
the detectors would judge the same held readings again. Each detector says until when its evidence stands without new
input (:meth:`detectors.contract.Detector.steady_until`: a rule's latch that ends, a trend alarm's hold, the hourly
pruning), and the gauge hold until when its readings stay current (:meth:`detectors.hold.GaugeHold.held_until`). Up
to the earliest of them an idle tick hands health the last evidence; health, incidents and the store still run every
tick, so staleness, hysteresis and escalation keep their own time. A tick with anything new, or a change of the reboot
graces the rules read, runs in full.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from detectors.contract import Detector, Evidence


class IdleTicks:
    """The last full tick's detector evidence and until when it stands."""

    def __init__(self) -> None:
        self.until = -math.inf
        self._ask: Callable[[], float] | None = None
        self.evidence: list[Evidence] = []
        self.grace: frozenset[str] = frozenset()
        self.reused = 0  # ticks given the evidence of the tick before

    def evidence_for(self, now: float, grace: frozenset[str]) -> list[Evidence] | None:
        """The evidence of the tick before when an idle tick at ``now`` (nothing new in it) may take it, else None."""
        if self._ask is not None:  # asked at the first idle tick after a full one (a large fleet sampled every tick
            self.until, self._ask = self._ask(), None  # has none: its full ticks ask nothing)
        if now > self.until or grace != self.grace:
            return None
        self.reused += 1
        return list(self.evidence)

    def ran(self, now: float, evidence: list[Evidence], grace: frozenset[str], detectors: Sequence[Detector],
            held_until: Callable[[], float]) -> None:
        """A full tick at ``now`` gave ``evidence``: it stands until the earliest time a detector says
        (:meth:`~detectors.contract.Detector.steady_until`) and the held readings stay current (``held_until``)."""

        def ask() -> float:
            until = math.inf
            for detector in detectors:
                until = min(until, detector.steady_until(now))
                if until <= now:
                    return until
            return min(until, held_until())

        self._ask, self.evidence, self.grace = ask, list(evidence), grace

    def forget(self) -> None:
        """A detector's memory changed outside a tick (parts replaced, a restart): the next tick runs in full."""
        self._ask, self.until = None, -math.inf
