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
MAX_PER_TICK = 3
"""Errors that start (go on, clear) in one tick logged one by one; more are summed up in one line."""


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

    def ongoing(self, error: str) -> bool:
        """True while ``error`` was in the last tick's errors (it has been logged already)."""
        return error in self.active

    def report(self, errors: list[str], now: float) -> None:
        """The errors of this tick (an empty list: none), at ``now`` (seconds)."""
        current = dict.fromkeys(errors)  # in order, once each
        new = [e for e in current if e not in self.active]
        for error in new:
            self.active[error] = _Seen(since=now, logged_at=now)
        due = []
        for error in current:
            seen = self.active[error]
            if error in new:
                continue
            seen.ticks += 1
            if now - seen.logged_at >= self.remind_s:
                due.append(f"still {error} ({seen.ticks} ticks over {(now - seen.since) / 60:.0f} min)")
                seen.logged_at = now
        cleared = []
        for error in [e for e in self.active if e not in current]:
            seen = self.active.pop(error)
            cleared.append(f"cleared after {seen.ticks} ticks over {now - seen.since:.0f} s: {error}")
        self._log(logging.WARNING, new, "more errors")
        self._log(logging.WARNING, due, "more errors go on")
        self._log(logging.INFO, cleared, "more errors cleared")

    def _log(self, level: int, messages: list[str], more: str) -> None:
        """The first few messages one by one, the rest summed up in one line (a rack's exporters at once)."""
        for message in messages[:MAX_PER_TICK]:
            self.logger.log(level, "%s: %s", self.source, message)
        if len(messages) > MAX_PER_TICK:
            self.logger.log(level, "%s: %d %s, e.g. %s", self.source, len(messages) - MAX_PER_TICK, more,
                            messages[MAX_PER_TICK])
