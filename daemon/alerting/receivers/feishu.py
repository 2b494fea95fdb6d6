"""Feishu / Lark custom bot, signed, with an interactive card.

Format and signature: https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot (Lark:
open.larksuite.com). The signature is HMAC-SHA256 keyed by ``timestamp + "\\n" + secret`` over an empty
message, base64-encoded; ``timestamp`` (seconds, as a string) and ``sign`` go in the JSON body beside
``msg_type`` and ``card``. The bot answers HTTP 200 with ``{"code": 0}`` on success and another code on
failure (19021 bad signature, 19024 keyword mismatch, 11232 frequency limited: retried after a minute).
A request body is at most 20 KB; the limit is 100 messages a minute (5 a second) per bot.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from daemon.alerting.alert import Notification
from daemon.alerting.http import Outcome, Request, Response
from daemon.alerting.receivers.receiver import Receiver, errcode_outcome
from daemon.alerting.render import truncate

BODY_LIMIT = 15000  # bytes of card text, leaving room for the JSON around it
TEMPLATE = {"critical": "red", "warning": "orange", "info": "blue"}


def sign(timestamp: int, secret: str) -> str:
    """Feishu's signature for ``timestamp`` (seconds)."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


class FeishuReceiver(Receiver):
    type = "feishu"
    rate_per_minute = 100.0
    options = ()
    needs_secret = True

    def request(self, n: Notification, now: float) -> Request:
        listed, truncated = self.listed(n)
        text = self.body(listed)
        if truncated:
            text += f"\n\n{truncated} more alerts in this group not listed."
        template = "green" if n.status == "resolved" else TEMPLATE.get(n.severity, "blue")
        ts = int(now)
        payload = {
            "timestamp": str(ts), "sign": sign(ts, self.config.secret or ""), "msg_type": "interactive",
            "card": {"config": {"wide_screen_mode": True},
                     "header": {"title": {"tag": "plain_text", "content": self.title(listed)}, "template": template},
                     "elements": [{"tag": "div", "text": {"tag": "lark_md",
                                                          "content": truncate(text, BODY_LIMIT, "bytes")}}]},
        }
        return Request(self.config.url, payload)

    def outcome(self, resp: Response) -> Outcome:
        return errcode_outcome(resp, "code", "msg", retry_codes={11232, 9499})
