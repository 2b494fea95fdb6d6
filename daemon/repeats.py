"""Logging a source's errors once while they last: when one starts, a reminder while it goes on, when it clears.

A collector reports its errors every tick (an exporter that does not answer, a log file that went missing). Logged
every tick, one node down at a 1-second interval is three thousand lines an hour, and the line that says what
changed scrolls out of sight. :class:`RepeatLog` logs an error the tick it first appears, again every
``remind_s`` while it persists (with how many ticks had it), and once when a tick no longer has it; the metrics
(``raswarden_scrape_up``, ``raswarden_collector_success``) say every tick which targets answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

REMIND_S = 600.0
"""A persisting error is logged again every ten minutes."""
MAX_NEW_PER_TICK = 3
"""New errors logged one by one in one tick; more are summed up in one line."""


@dataclass
class _Seen:
    since: float
    logged_at: float
    ticks: int = 1


@dataclass
class RepeatLog:
    """The errors of one source (a collector), each logged when it starts, every ``remind_s``, and when it clears."""

    source: str
    logger: logging.Logger
    remind_s: float = REMIND_S
    active: dict[str, _Seen] = field(default_factory=dict)

    def report(self, errors: list[str], now: float) -> None:
        """The errors of this tick (an empty list: none), at ``now`` (seconds)."""
        current = dict.fromkeys(errors)  # in order, once each
        new = [e for e in current if e not in self.active]
        for error in new[:MAX_NEW_PER_TICK]:
            self.logger.warning("%s: %s", self.source, error)
        if len(new) > MAX_NEW_PER_TICK:
            self.logger.warning("%s: %d more errors, e.g. %s", self.source, len(new) - MAX_NEW_PER_TICK,
                                new[MAX_NEW_PER_TICK])
        for error in new:
            self.active[error] = _Seen(since=now, logged_at=now)
        for error in current:
            seen = self.active[error]
            if error in new:
                continue
            seen.ticks += 1
            if now - seen.logged_at >= self.remind_s:
                self.logger.warning("%s: still %s (%d ticks over %.0f min)", self.source, error, seen.ticks,
                                    (now - seen.since) / 60)
                seen.logged_at = now
        for error in [e for e in self.active if e not in current]:
            seen = self.active.pop(error)
            self.logger.info("%s: cleared after %d ticks over %.0f s: %s", self.source, seen.ticks,
                             now - seen.since, error)
