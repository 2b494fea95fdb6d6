"""Message text from Jinja2 templates that operators can override, and length limits with a clear mark.

Templates live in ``daemon/alerting/templates``; an operator's directory (``alerting.templates_dir``)
is searched first. A receiver asks for ``title`` or ``body``; ``<receiver type>.<name>.j2`` wins over the
shared ``<name>.j2`` (Slack's mrkdwn differs from Markdown, WeCom's Markdown is a subset).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import jinja2

from daemon.alerting.alert import CATEGORY_WORDS, Alert, Notification
from daemon.alerting.silences import DEFAULT_SILENCE
from daemon.timetext import fmt_ts

TRUNCATED = "… [truncated: {n} more {unit}]"


def commands(alert: Alert) -> list[str]:
    """The exact CLI commands that silence, approve or resume what this alert is about (for a repair order: the
    technician's next one)."""
    if alert.category == "repair":
        order = alert.incident_id.rsplit("-", 1)[1]
        step = {"open": f"raswarden repairs start {order}",
                "in_progress": f"raswarden repairs done {order} --part-serial NEW"}.get(alert.state)
        return [f"raswarden repairs show {order}"] + ([step] if step else [])
    out = [f"raswarden silence add incident={alert.incident_id} --duration {DEFAULT_SILENCE} --comment "
           + shlex.quote(f"looking at {alert.entity}")]
    if alert.awaiting_approval:
        out.append(f"raswarden approve {alert.incident_id}")
    if alert.drained:  # only a node raswarden drained, not one a dry-run would have
        out.append(f"raswarden resume {alert.drained} --reason repaired --repaired")
    return out


def where(alert: Alert) -> str:
    """Where the alert's part is, in one line: ``rack r01 · node sn01-b03 · slot gpu2 · UUID GPU-… · PCI …``."""
    return " · ".join(f"{what} {value}" for what, value in alert.where)


def headline(n: Notification) -> str:
    alerts = n.firing or n.alerts
    words = CATEGORY_WORDS.get(alerts[0].category, alerts[0].category) if alerts else ""
    if len(alerts) == 1:
        return f"{alerts[0].entity}: {words}"
    where = f"rack {alerts[0].rack}" if alerts[0].rack else "cluster"
    return f"{len(alerts)} incidents in {where}: {words}"


def truncate(text: str, limit: int, unit: str = "characters") -> str:
    """``text`` cut to ``limit`` characters (or UTF-8 bytes with ``unit="bytes"``), ending in a mark that
    says how much was cut."""
    size = len(text.encode()) if unit == "bytes" else len(text)
    if size <= limit:
        return text
    mark_room = len(TRUNCATED.format(n=size, unit=unit).encode() if unit == "bytes" else
                    TRUNCATED.format(n=size, unit=unit))
    keep = max(0, limit - mark_room - 1)
    if unit == "bytes":
        head = text.encode()[:keep].decode("utf-8", "ignore")
        cut = size - len(head.encode())
    else:
        head = text[:keep]
        cut = size - len(head)
    return head.rstrip() + "\n" + TRUNCATED.format(n=cut, unit=unit)


class Renderer:
    """Renders a notification's title and body for one receiver type."""

    def __init__(self, templates_dir: str | Path | None = None, status_url: str = ""):
        loaders: list[jinja2.BaseLoader] = []
        if templates_dir:
            loaders.append(jinja2.FileSystemLoader(str(templates_dir)))
        loaders.append(jinja2.PackageLoader("daemon.alerting", "templates"))
        self.env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), autoescape=False, trim_blocks=True,
                                      lstrip_blocks=True, keep_trailing_newline=False,
                                      undefined=jinja2.StrictUndefined)
        self.env.filters["ts"] = fmt_ts
        self.env.globals.update(commands=commands, category_words=CATEGORY_WORDS, where=where,
                                incident_url=self.incident_url)
        self.status_url = status_url.rstrip("/")

    def incident_url(self, alert: Alert) -> str:
        """The incident's own page on the status server ("" without ``alerting.status_url``)."""
        return f"{self.status_url}{alert.path}" if self.status_url else ""

    def render(self, name: str, n: Notification, receiver_type: str) -> str:
        """Render template ``name`` (``title`` or ``body``) for ``receiver_type``."""
        template = self.env.select_template([f"{receiver_type}.{name}.j2", f"{name}.j2"])
        link = f"{self.status_url}/incidents" if self.status_url else ""
        return template.render(n=n, headline=headline(n), status_url=self.status_url, incidents_url=link).strip()
