"""Jira (Data Center / Server REST API v2): an issue per alert, a comment per later change.

Create: ``POST {url}/rest/api/2/issue`` with ``fields`` ``project.key``, ``issuetype.name``, ``summary``,
``description``, ``labels``; Jira answers 201 with the issue's ``id``, ``key`` and ``self``. Update: ``POST
{url}/rest/api/2/issue/{key}/comment`` with ``body``. (Atlassian's "JIRA REST API Example - Create Issue" and the
v2 reference, developer.atlassian.com.) ``secret`` is a personal access token, sent as ``Authorization: Bearer``.
The labels carry ``raswarden-<alert id>`` so that an issue is found again from raswarden.
"""

from __future__ import annotations

from daemon.alerting.alert import Alert
from daemon.alerting.http import Request, Response
from daemon.alerting.receivers.ticket import TicketReceiver, ticket_text


class JiraReceiver(TicketReceiver):
    type = "jira"
    options = ("project", "issue_type", "labels")

    def __init__(self, config, renderer=None):
        super().__init__(config, renderer)
        if not config.options.get("project"):
            raise ValueError(f"receiver {config.name!r} (jira): 'project' is required (the key issues are made in)")

    def ticket_request(self, a: Alert, key: str | None) -> Request:
        base = self.config.url.rstrip("/")
        headers = {"Authorization": f"Bearer {self.config.secret}"} if self.config.secret else {}
        text = ticket_text(a, self.link(a))
        if key is None:
            project = self.config.options["project"]
            labels = ["raswarden", f"raswarden-{a.incident_id}", *map(str, self.config.options.get("labels") or [])]
            fields = {"project": {"key": str(project)},
                      "issuetype": {"name": str(self.config.options.get("issue_type") or "Task")},
                      "summary": a.summary[:250], "description": text, "labels": labels}
            return Request(f"{base}/rest/api/2/issue", {"fields": fields}, headers)
        note = f"{a.summary}\n\n{text}" if a.status == "resolved" else text
        return Request(f"{base}/rest/api/2/issue/{key}/comment", {"body": note}, headers)

    def key_of(self, response: Response) -> str | None:
        data = response.json()
        return str(data["key"]) if isinstance(data, dict) and data.get("key") else None
