"""Ticket trackers: one ticket per alert, made when it is first told and updated at every later change.

A repair order's alerts come one order per notification (daemon/alerting/alert_pipeline.py), so a route such as
``categories = ["repair"]`` to a ticket receiver gives one ticket per order. Where the tracker names the ticket
itself (a Jira key, a ServiceNow sys_id), the outbox keeps that key (table ``ticket``) from the answer to the
create, and later changes update that ticket; a create whose answer was lost is retried and may make a second one,
which the alert's own id in the ticket (a label, a correlation id) lets an operator find.

The generic ``ticket`` receiver posts one JSON document per change with the alert's own id as ``external_id``, for
trackers (or middleware) that upsert by it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable

from daemon.alerting.alert import Alert, Notification
from daemon.alerting.http import Request, Response
from daemon.alerting.receivers.receiver import Receiver, iso
from daemon.alerting.render import commands, where


def ticket_text(a: Alert, link: str) -> str:
    """The ticket's description (or an update's note): what, where, why, the evidence, what to do."""
    lines = [a.summary, ""]
    if a.where:
        lines.append(f"Where: {where(a)}")
    if a.runbook:
        lines.append(f"What to do: {a.runbook}")
    if a.action:
        lines.append(f"Last change: {a.action}")
    lines += ["", "Evidence:", *(f"- {e}" for e in a.evidence)]
    lines += ["", "Commands:", *(f"  {c}" for c in commands(a))]
    if link:
        lines += ["", f"raswarden: {link}"]
    return "\n".join(lines)


class TicketReceiver(Receiver):
    """A tracker: :meth:`ticket_request` per alert, with the ticket's key once the tracker gave one."""

    rate_per_minute = 60.0

    def request(self, n: Notification, now: float) -> Request:
        """What a tracker that has no ticket yet is sent for ``n``: its first alert's ticket made (how the examples
        show a tracker; delivery goes alert by alert, :meth:`requests`)."""
        return self.ticket_request(n.alerts[0], None)

    def requests(self, n: Notification, now: float,
                 ticket_of: Callable[[str], str | None]) -> list[tuple[str | None, Request]]:
        """One request per alert: its ticket made, or updated where the tracker made one before."""
        return [(a.incident_id, self.ticket_request(a, ticket_of(a.incident_id))) for a in n.alerts]

    @abstractmethod
    def ticket_request(self, a: Alert, key: str | None) -> Request:
        """Create the alert's ticket (``key`` None) or update ticket ``key``."""

    def link(self, a: Alert) -> str:
        return self.renderer.incident_url(a)


class GenericTicketReceiver(TicketReceiver):
    """``POST url`` a JSON document per change: ``event`` (open, update, close), ``external_id``, the alert."""

    type = "ticket"
    options = ("headers",)

    def ticket_request(self, a: Alert, key: str | None) -> Request:
        event = "close" if a.status == "resolved" else "open" if key is None else "update"
        body = {"event": event, "external_id": f"raswarden-{a.incident_id}", "title": a.summary,
                "severity": a.severity, "state": a.state, "entity": a.entity, "category": a.category,
                "rack": a.rack, "where": {str(k): str(v) for k, v in a.where}, "evidence": a.evidence,
                "runbook": a.runbook, "last_change": a.action, "opened_at": iso(a.started_at),
                "closed_at": iso(a.ended_at) if a.ended_at else None, "link": self.link(a),
                "text": ticket_text(a, self.link(a))}
        headers = {str(k): str(v) for k, v in (self.config.options.get("headers") or {}).items()}
        return Request(self.config.url, body, headers)

    def key_of(self, response: Response) -> str | None:
        return "external_id"  # keyed by our own id: later changes are updates
