"""ServiceNow Table API: a record per alert (``incident`` by default), its work notes updated at every change.

Create: ``POST {url}/api/now/table/{table}`` with ``short_description``, ``description``, ``urgency``,
``correlation_id``; ServiceNow answers 201 with ``{"result": {"sys_id": ..., "number": ...}}``. Update: ``PATCH
{url}/api/now/table/{table}/{sys_id}`` with ``work_notes`` (and the ``close_code``/``close_notes``/``state`` of a
resolved record). (ServiceNow's Table API and REST API Explorer guides, servicenow.com/docs.) ``secret`` is sent
as ``Authorization: Bearer`` (an OAuth token); ``correlation_id`` is ``raswarden-<alert id>``.
"""

from __future__ import annotations

from daemon.alerting.alert import Alert
from daemon.alerting.http import Request, Response
from daemon.alerting.receivers.ticket import TicketReceiver, ticket_text

URGENCY = {"critical": "1", "warning": "2", "info": "3"}


class ServiceNowReceiver(TicketReceiver):
    type = "servicenow"
    options = ("table", "assignment_group", "resolved_state")

    def ticket_request(self, a: Alert, key: str | None) -> Request:
        base = self.config.url.rstrip("/")
        table = str(self.config.options.get("table") or "incident")
        headers = {"Accept": "application/json"}
        if self.config.secret:
            headers["Authorization"] = f"Bearer {self.config.secret}"
        text = ticket_text(a, self.link(a))
        if key is None:
            body = {"short_description": a.summary[:160], "description": text, "urgency": URGENCY.get(a.severity, "2"),
                    "correlation_id": f"raswarden-{a.incident_id}"}
            if self.config.options.get("assignment_group"):
                body["assignment_group"] = str(self.config.options["assignment_group"])
            return Request(f"{base}/api/now/table/{table}", body, headers)
        body = {"work_notes": text}
        if a.status == "resolved":
            body.update(state=str(self.config.options.get("resolved_state") or "6"), close_code="Solved (Permanently)",
                        close_notes=a.summary)
        return Request(f"{base}/api/now/table/{table}/{key}", body, headers, method="PATCH")

    def key_of(self, response: Response) -> str | None:
        data = response.json()
        result = data.get("result") if isinstance(data, dict) else None
        return str(result["sys_id"]) if isinstance(result, dict) and result.get("sys_id") else None
