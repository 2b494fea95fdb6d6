"""Bookkeeping for bad input: every rejected line is counted, and the first few are logged by position.

Bad input never stops a reader: it calls :meth:`RejectLog.reject` with the source and the position
(``file:line``, ``file#table:id``) and goes on with the next record.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from daemon import metrics

log = logging.getLogger("raswarden.input")

_QUOTED = re.compile(r"""'[^']*'|"[^"]*"|\{[^}]*\}""")
_NUMBER = re.compile(r"[-+]?\d[\d.,:eE+-]*")


def reason_kind(reason: str) -> str:
    """What kind of rejection ``reason`` is, without its particulars (the detail after ``": "`` or ``" ("``,
    quoted values, numbers): the label it is counted under, so that bad input cannot grow the metric's series or
    the log without bound. ``"bad row: time data 'x' ..."`` is ``"bad row"``; ``"xid code 99999 is out of
    range"`` is ``"xid code N is out of range"``."""
    kind = re.split(r": | \(", reason, maxsplit=1)[0]
    kind = _NUMBER.sub("N", _QUOTED.sub("…", kind))
    return kind[:100] or "unreadable"


@dataclass
class RejectLog:
    """Counts rejected input by (format, kind of reason: :func:`reason_kind`) and keeps the first messages of each
    kind for the summary."""

    max_logged_per_reason: int = 5
    counts: Counter = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def reject(self, fmt: str, position: str, reason: str, excerpt: str = "") -> None:
        """Record one rejected record of format ``fmt`` at ``position`` (e.g. ``trace/a.om:1234``)."""
        key = (fmt, reason_kind(reason))
        self.counts[key] += 1
        metrics.INPUT_REJECTED.labels(*key).inc()
        if self.counts[key] <= self.max_logged_per_reason:
            text = f"{position}: {reason}"
            if excerpt:
                text += f": {excerpt[:120]!r}"
            self.messages.append(text)
            log.warning("rejected %s", text)
            if self.counts[key] == self.max_logged_per_reason:
                log.warning("further '%s' rejections from %s input are counted, not logged", key[1], fmt)

    def refuse(self, fmt: str, position: str, reason: str) -> None:
        """Record that a whole file was refused (e.g. a raw dmesg with no boot time)."""
        self.reject(fmt, position, reason)

    def note(self, fmt: str, position: str, text: str) -> None:
        """Record an assumption a reader had to make (nothing was lost), for the summary and the log."""
        message = f"{position}: {text}"
        if message not in self.notes:
            self.notes.append(message)
            log.warning("%s input: %s", fmt, message)

    @property
    def total(self) -> int:
        return sum(self.counts.values())
