"""Alertmanager API v2: post raswarden's alerts to an existing Alertmanager, which routes them on.

``POST {url}/api/v2/alerts`` with a JSON list of postable alerts (``labels``, ``annotations``,
``startsAt``, ``endsAt``, ``generatorURL``): https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml
(``postableAlerts``); checked against a real Alertmanager 0.25 in the tests. Alertmanager resolves an
alert by itself at ``endsAt``, so a firing alert is sent with ``endsAt`` ``hold_s`` ahead (default 3 h,
longer than the group's repeat interval, which re-sends it): a raswarden that died leaves no alert firing
for ever, and a resolved one is sent with its real end.
"""

from __future__ import annotations

from daemon.alerting.alert import Notification
from daemon.alerting.http import Request
from daemon.alerting.receivers.receiver import Receiver, iso
from daemon.alerting.receivers.webhook import annotations


class AlertmanagerReceiver(Receiver):
    type = "alertmanager"
    rate_per_minute = 600.0
    options = ("hold_s",)

    def request(self, n: Notification, now: float) -> Request:
        hold = float(self.config.options.get("hold_s", 3 * 3600.0))
        base = n.status_url.rstrip("/")
        body = [{"labels": a.labels, "annotations": annotations(a), "startsAt": iso(a.started_at),
                 "endsAt": iso(a.ended_at if a.status == "resolved" else now + hold),
                 "generatorURL": f"{base}{a.path}" if base else ""} for a in n.alerts]
        return Request(self.config.url.rstrip("/") + "/api/v2/alerts", body)
