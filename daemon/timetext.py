"""Times as raswarden prints them everywhere (CLI tables, alerts, logs): UTC, to the second, ``Z``-suffixed."""

from __future__ import annotations

import datetime as dt


def fmt_ts(ts: float | None) -> str:
    """``2026-11-26 11:44:01Z`` for a Unix time; ``-`` for none."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
