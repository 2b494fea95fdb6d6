"""Durations as people write them in playbooks, config, scenarios and on the command line (here, in
``playbooks``, because ``daemon`` may import ``playbooks`` but not the other way round)."""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(min|s|m|h|d)?")
_UNIT = {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(value, where: str = "duration") -> float:
    """``90``, ``"15m"``, ``"2h"``, ``"2h30m"``, ``"1.5d"`` to seconds; ValueError naming ``where``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).replace(" ", "")
    parts = list(_DURATION_PART.finditer(text))
    if not text or not parts or "".join(m.group(0) for m in parts) != text or (
            len(parts) > 1 and any(m.group(2) is None for m in parts)):
        raise ValueError(f"{where}: not a duration: {value!r} (use e.g. 90, '15m', '2h', '2h30m', '1d')")
    return sum(float(m.group(1)) * _UNIT[m.group(2)] for m in parts)
