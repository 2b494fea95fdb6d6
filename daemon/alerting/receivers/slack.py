"""Slack incoming webhook with Block Kit.

Format: https://api.slack.com/messaging/webhooks (``text`` is the notification fallback, ``blocks`` the
message); limits from https://api.slack.com/reference/block-kit/blocks: a header's plain text ≤ 150
characters, a section's mrkdwn ≤ 3,000, at most 50 blocks. Errors come back as 4xx with a plain-text
code (``invalid_payload``, ``channel_is_archived``, ...), rate limiting as 429 with Retry-After
(https://api.slack.com/apis/rate-limits: about one message per second per webhook).
"""

from __future__ import annotations

from daemon.alerting.alert import Notification
from daemon.alerting.http import Request
from daemon.alerting.receivers.receiver import Receiver
from daemon.alerting.render import truncate

SECTION_LIMIT = 3000
HEADER_LIMIT = 150
MAX_BLOCKS = 50


def escape(text: str) -> str:
    """Slack treats &, < and > as markup (``<!channel>`` would ping everyone)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def sections(text: str, limit: int = SECTION_LIMIT) -> list[str]:
    """Split mrkdwn into section-sized pieces at paragraph, then line boundaries (a single line longer than
    a section is cut with a mark)."""
    out: list[str] = []
    current = ""
    for para in text.split("\n\n"):
        for sep, piece in [("\n\n", para)] if len(para) <= limit else \
                [("\n\n" if i == 0 else "\n", truncate(line, limit)) for i, line in enumerate(para.split("\n"))]:
            candidate = f"{current}{sep}{piece}" if current else piece
            if len(candidate) <= limit:
                current = candidate
            else:
                out.append(current)
                current = piece
    if current:
        out.append(current)
    return out


class SlackReceiver(Receiver):
    type = "slack"
    rate_per_minute = 60.0
    options = ("channel", "username", "icon_emoji")

    def request(self, n: Notification, now: float) -> Request:
        listed, truncated = self.listed(n)
        title = self.title(listed)
        body = self.body(listed)
        blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "emoji": True,
                                                          "text": truncate(title, HEADER_LIMIT)}}]
        parts = sections(body)
        room = MAX_BLOCKS - 2
        if len(parts) > room:
            parts = parts[: room - 1] + [f"… [truncated: {len(parts) - room + 1} more sections]"]
        blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": p}} for p in parts]
        if truncated:
            blocks.append({"type": "context", "elements": [
                {"type": "mrkdwn", "text": f"{truncated} more alerts in this group not listed"}]})
        payload = {"text": truncate(title, 3000), "blocks": blocks}
        payload.update(self.option_fields())
        return Request(self.config.url, payload)

    def body(self, n: Notification) -> str:
        # The template writes mrkdwn; the data inside it (entity names, reasons) is escaped first.
        return self.renderer.render("body", _escaped(n), self.type)


def _escaped(n: Notification) -> Notification:
    from dataclasses import replace

    alerts = [replace(a, summary=escape(a.summary), evidence=[escape(x) for x in a.evidence],
                      action=escape(a.action)) for a in n.alerts]
    return Notification(n.group_key, n.seq, n.created_at, alerts, n.status_url)
