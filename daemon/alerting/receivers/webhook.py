"""Generic webhook: Alertmanager's webhook payload, version 4, so any tool that takes Alertmanager's
webhooks takes raswarden's.

Format: https://prometheus.io/docs/alerting/latest/configuration/#webhook_config (the JSON body with
``version``, ``groupKey``, ``truncatedAlerts``, ``status``, ``receiver``, ``groupLabels``, ``commonLabels``,
``commonAnnotations``, ``externalURL``, ``alerts``), as Alertmanager 0.25 (Debian 12) posted it to a receiver of
ours (tests/daemon/alerting/test_alertmanager_real.py). 2xx is done, 5xx is retried (Alertmanager's notify/webhook
does the same).
"""

from __future__ import annotations

from daemon.alerting.alert import Alert, Notification
from daemon.alerting.http import Request
from daemon.alerting.receivers.receiver import Receiver, iso
from daemon.alerting.render import commands, where


def annotations(a: Alert) -> dict[str, str]:
    out = {"summary": a.summary, "description": "\n".join(a.evidence), "action": a.action or "none yet",
           "commands": "\n".join(commands(a))}
    if a.where:
        out["where"] = where(a)
    if a.runbook:
        out["runbook"] = a.runbook
    if a.parent:
        out["parent_incident"] = a.parent
    return out


def alert_json(a: Alert, generator_url: str) -> dict:
    return {"status": a.status, "labels": a.labels, "annotations": annotations(a), "startsAt": iso(a.started_at),
            "endsAt": iso(a.ended_at), "generatorURL": generator_url, "fingerprint": a.fingerprint}


def common(dicts: list[dict[str, str]]) -> dict[str, str]:
    if not dicts:
        return {}
    out = dict(dicts[0])
    for d in dicts[1:]:
        out = {k: v for k, v in out.items() if d.get(k) == v}
    return out


def payload(n: Notification, receiver: str, truncated: int) -> dict:
    """The version 4 payload of ``n``."""
    base = n.status_url.rstrip("/")
    alerts = [alert_json(a, f"{base}{a.path}" if base else "") for a in n.alerts]
    return {
        "version": "4", "groupKey": n.key, "truncatedAlerts": truncated, "status": n.status, "receiver": receiver,
        "groupLabels": n.group_labels, "commonLabels": common([a["labels"] for a in alerts]),
        "commonAnnotations": common([a["annotations"] for a in alerts]), "externalURL": base, "alerts": alerts,
    }


class WebhookReceiver(Receiver):
    type = "webhook"
    rate_per_minute = 600.0
    options = ("headers",)

    def request(self, n: Notification, now: float) -> Request:
        listed, truncated = self.listed(n)
        headers = {str(k): str(v) for k, v in (self.config.options.get("headers") or {}).items()}
        return Request(self.config.url, payload(listed, self.name, truncated), headers)
