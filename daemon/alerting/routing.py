"""Routing: which receivers get a group's notification, by severity, rack, category and entity kind.

Routes are tried in order; the first that matches decides (unless it says ``continue = true``, then
later routes may add receivers). A group no route matches goes to the default receivers. A route's
empty filter matches everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.alerting.alert import SEVERITY_ORDER, Notification


@dataclass
class Route:
    receivers: list[str]
    severities: list[str] = field(default_factory=list)  # e.g. ["critical"]
    min_severity: str | None = None  # e.g. "warning": warning and critical
    racks: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    continue_: bool = False

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], where: str) -> Route:
        raw = dict(raw)
        receivers = raw.pop("receivers", None)
        if not receivers or not isinstance(receivers, list):
            raise ValueError(f"{where}.receivers: a list of receiver names is required")
        route = cls(receivers=[str(r) for r in receivers], continue_=bool(raw.pop("continue", False)))
        for key in ("severities", "racks", "categories", "kinds"):
            if key in raw:
                value = raw.pop(key)
                if not isinstance(value, list):
                    raise ValueError(f"{where}.{key}: a list is required")
                setattr(route, key, [str(v) for v in value])
        if "min_severity" in raw:
            route.min_severity = str(raw.pop("min_severity"))
            if route.min_severity not in SEVERITY_ORDER:
                raise ValueError(f"{where}.min_severity: one of {', '.join(SEVERITY_ORDER)}")
        if raw:
            raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(raw))}")
        return route

    def matches(self, n: Notification) -> bool:
        alerts = n.firing or n.alerts
        if self.severities and n.severity not in self.severities:
            return False
        if self.min_severity and SEVERITY_ORDER.get(n.severity, 0) < SEVERITY_ORDER[self.min_severity]:
            return False
        if self.racks and not any(a.rack in self.racks for a in alerts):
            return False
        if self.categories and not any(a.category in self.categories for a in alerts):
            return False
        if self.kinds and not any(a.kind in self.kinds for a in alerts):
            return False
        return True


def route(n: Notification, routes: list[Route], default: list[str]) -> list[str]:
    """Receiver names for ``n``, in configuration order, without repeats."""
    chosen: list[str] = []
    matched = False
    for r in routes:
        if r.matches(n):
            matched = True
            chosen += [x for x in r.receivers if x not in chosen]
            if not r.continue_:
                break
    return chosen if matched else list(default)
