"""Microsoft Teams through a Workflows webhook ("When a Teams webhook request is received"), with an
Adaptive Card. The Office 365 connectors and their MessageCard format are retired.

Format: https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using
(a ``message`` whose ``attachments`` hold ``application/vnd.microsoft.card.adaptive`` content; Workflows
take Adaptive Cards only); card schema https://adaptivecards.io/explorer/ (TextBlock, FactSet,
Action.OpenUrl; version 1.4). Workflows answer 202 Accepted. A Teams message is at most about 28 KB,
so the body is cut at 20,000 characters.
"""

from __future__ import annotations

from daemon.alerting.alert import Notification
from daemon.alerting.http import Request
from daemon.alerting.receivers.receiver import Receiver
from daemon.alerting.render import truncate

BODY_LIMIT = 20000
COLOR = {"critical": "Attention", "warning": "Warning", "info": "Accent"}


class TeamsReceiver(Receiver):
    type = "teams"
    rate_per_minute = 30.0
    options = ()

    def request(self, n: Notification, now: float) -> Request:
        listed, truncated = self.listed(n)
        color = "Good" if n.status == "resolved" else COLOR.get(n.severity, "Default")
        body: list[dict] = [
            {"type": "TextBlock", "text": self.title(listed), "weight": "Bolder", "size": "Medium", "wrap": True,
             "color": color},
            {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in listed.group_labels.items()]},
            {"type": "TextBlock", "text": truncate(self.body(listed), BODY_LIMIT), "wrap": True},
        ]
        if truncated:
            body.append({"type": "TextBlock", "text": f"{truncated} more alerts in this group not listed",
                         "isSubtle": True, "wrap": True})
        card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard",
                "version": "1.4", "body": body}
        if n.status_url:
            card["actions"] = [{"type": "Action.OpenUrl", "title": "Status page",
                                "url": n.status_url.rstrip("/") + "/incidents"}]
        payload = {"type": "message", "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}]}
        return Request(self.config.url, payload)
