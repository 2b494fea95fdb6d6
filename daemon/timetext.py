"""Times as raswarden prints them everywhere (CLI tables, alerts, logs): UTC, to the second, ``Z``-suffixed; and the
time zones an operator names (of log stamps that carry none)."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo


def fmt_ts(ts: float | None) -> str:
    """``2026-11-26 11:44:01Z`` for a Unix time; ``-`` for none."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


_OFFSET = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$")


def parse_zone(text: str) -> dt.tzinfo:
    """A zone as an operator writes it: an IANA name (``Asia/Shanghai``, daylight saving included), ``UTC``, or a fixed
    offset (``+08:00``, ``UTC+8``). ValueError naming what is accepted otherwise."""
    text = text.strip()
    if text.upper() in ("UTC", "GMT", "Z"):
        return dt.UTC
    m = _OFFSET.match(text)
    if m:
        minutes = int(m.group(2)) * 60 + int(m.group(3) or 0)
        if minutes > 14 * 60:
            raise ValueError(f"{text!r}: an offset of at most 14 hours")
        return dt.timezone(dt.timedelta(minutes=minutes if m.group(1) == "+" else -minutes))
    try:
        return zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{text!r} is no time zone: an IANA name (Asia/Shanghai), UTC, or an offset (+08:00)") \
            from None


def zoneless_epoch(stamp: dt.datetime, zone: dt.tzinfo) -> float:
    """Seconds since the epoch of a stamp that names no zone, read in ``zone`` (a stamp that names one keeps it)."""
    return (stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=zone)).timestamp()


def zone_name(zone: dt.tzinfo) -> str:
    """How the summary names a zone."""
    return "UTC" if zone is dt.UTC else str(zone)
