"""Mattermost incoming webhook.

Format: https://developers.mattermost.com/integrate/webhooks/incoming/ (``text`` in Markdown, optional
``channel``, ``username``, ``icon_url``, ``props``); answers ``200 ok``. A post holds at most 16,383
characters (Mattermost 5.0 and later), so the text is cut there with a mark.
"""

from __future__ import annotations

from daemon.alerting.alert import Notification
from daemon.alerting.http import Request
from daemon.alerting.receivers.receiver import Receiver
from daemon.alerting.render import truncate

TEXT_LIMIT = 16383


class MattermostReceiver(Receiver):
    type = "mattermost"
    rate_per_minute = 60.0
    options = ("channel", "username", "icon_url")

    def request(self, n: Notification, now: float) -> Request:
        listed, truncated = self.listed(n)
        text = f"#### {self.title(listed)}\n{self.body(listed)}"
        if truncated:
            text += f"\n\n_{truncated} more alerts in this group not listed._"
        payload = {"text": truncate(text, TEXT_LIMIT), "props": {"raswarden_key": n.key}}
        payload.update(self.option_fields())
        return Request(self.config.url, payload)
