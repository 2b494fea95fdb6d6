"""DingTalk custom robot, signed, with a Markdown message.

Format and signature: https://open.dingtalk.com/document/robots/custom-robot-access and
https://open.dingtalk.com/document/orgapp/customize-robot-security-settings. The signature is
HMAC-SHA256 keyed by the secret over ``timestamp + "\\n" + secret``, base64 then URL-encoded, with
``timestamp`` in milliseconds; both go in the URL's query beside ``access_token``. The robot answers HTTP
200 with ``{"errcode": 0, "errmsg": "ok"}``; 130101 means too fast (the limit is 20 messages a minute):
retried after a minute; 310000 is a bad signature or keyword.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote_plus

from daemon.alerting.alert import Notification
from daemon.alerting.http import Outcome, Request, Response
from daemon.alerting.receivers.receiver import Receiver, errcode_outcome
from daemon.alerting.render import truncate

TEXT_LIMIT = 18000  # bytes; DingTalk cuts messages near 20,000


def sign(timestamp_ms: int, secret: str) -> str:
    """DingTalk's signature for ``timestamp_ms``, URL-encoded as it goes into the query."""
    message = f"{timestamp_ms}\n{secret}".encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest))


class DingTalkReceiver(Receiver):
    type = "dingtalk"
    rate_per_minute = 20.0
    options = ()
    needs_secret = True

    def request(self, n: Notification, now: float) -> Request:
        listed, truncated = self.listed(n)
        title = self.title(listed)
        text = f"#### {title}\n\n{self.body(listed)}"
        if truncated:
            text += f"\n\n{truncated} more alerts in this group not listed."
        ts = int(now * 1000)
        sep = "&" if "?" in self.config.url else "?"
        url = f"{self.config.url}{sep}timestamp={ts}&sign={sign(ts, self.config.secret or '')}"
        payload = {"msgtype": "markdown", "markdown": {"title": title, "text": truncate(text, TEXT_LIMIT, "bytes")}}
        return Request(url, payload)

    def outcome(self, resp: Response) -> Outcome:
        return errcode_outcome(resp, "errcode", "errmsg", retry_codes={130101})
