"""Silences: label matchers with an expiry, persisted in the store (``raswarden silence add|list|expire``).

A matcher is ``label=value``, ``label!=value``, ``label=~regex`` or ``label!~regex`` (Alertmanager's
syntax; a regex is anchored). A silence mutes the alerts all of its matchers match, from ``starts_at``
to ``ends_at``; an expired silence stays listed (with ``--all``) for the record.
"""

from __future__ import annotations

import re
import secrets as _random
from dataclasses import dataclass

from daemon.store import SilenceRow, Store
from daemon.store.alerting import AlertRecords

DEFAULT_SILENCE = "4h"
"""How long a silence lasts when none is given (CLI, API and the command an alert suggests): an alert's repeat
interval, so a silenced alert does not come back before its next repeat would have."""

_MATCHER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Matcher:
        m = _MATCHER.match(text)
        if not m:
            raise ValueError(f"matcher {text!r}: expected label=value, label!=value, label=~regex or label!~regex")
        label, op, value = m.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"matcher {text!r}: bad regex: {exc}") from None
        return cls(label, op, value)

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.label, "")
        if self.op == "=":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        hit = re.fullmatch(self.value, have) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        return f"{self.label}{self.op}{self.value}"


@dataclass
class Silence:
    id: str
    matchers: list[Matcher]
    starts_at: float
    ends_at: float
    created_by: str = ""
    comment: str = ""

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def mutes(self, labels: dict[str, str], now: float) -> bool:
        return self.active(now) and all(m.matches(labels) for m in self.matchers)


#: the longest silence: a year
MAX_SILENCE_S = 366 * 86400.0


class SilenceBook:
    """Silences in the store."""

    def __init__(self, store: Store):
        self.store = store
        self.records = AlertRecords(store)

    def add(self, matchers: list[str], starts_at: float, ends_at: float, created_by: str = "",
            comment: str = "") -> Silence:
        """Persist a new silence; ValueError for a bad matcher or an empty or backwards time range."""
        parsed = [Matcher.parse(m) for m in matchers]
        if not parsed:
            raise ValueError("a silence needs at least one matcher")
        if ends_at <= starts_at:
            raise ValueError("a silence must end after it starts")
        if ends_at - starts_at > MAX_SILENCE_S:  # longer is a removal of the alert, not a silence (and its end
            # time would overflow what a date can print)
            raise ValueError(f"a silence lasts at most a year ({MAX_SILENCE_S / 86400:.0f} days); remove the route "
                             "or the receiver for longer")
        silence = Silence(f"sil-{_random.token_hex(4)}", parsed, starts_at, ends_at, created_by, comment)
        self.records.add_silence(SilenceRow(id=silence.id, matchers=[str(m) for m in parsed], starts_at=starts_at,
                                            ends_at=ends_at, created_by=created_by, comment=comment))
        return silence

    def expire(self, silence_id: str, now: float) -> bool:
        """End a silence now; False when there is no such silence still running."""
        return self.records.end_silence(silence_id, now)

    def all(self) -> list[Silence]:
        return [Silence(r.id, [Matcher.parse(m) for m in r.matchers], r.starts_at, r.ends_at, r.created_by,
                        r.comment) for r in self.records.silences()]

    def active(self, now: float) -> list[Silence]:
        return [Silence(r.id, [Matcher.parse(m) for m in r.matchers], r.starts_at, r.ends_at, r.created_by,
                        r.comment) for r in self.records.silences(ending_after=now)
                if r.starts_at <= now]
