"""WeCom (WeChat Work) group robot, Markdown message.

Format: https://developer.work.weixin.qq.com/document/path/91770 (``msgtype: markdown``,
``markdown.content`` at most 4,096 bytes of UTF-8; at most 20 messages a minute per robot). The robot
answers HTTP 200 with ``{"errcode": 0, "errmsg": "ok"}``; 45009 means the frequency limit was hit
(retried after a minute); 93000 an invalid webhook key.
"""

from __future__ import annotations

from daemon.alerting.alert import Notification
from daemon.alerting.http import Outcome, Request, Response
from daemon.alerting.receivers.receiver import Receiver, errcode_outcome
from daemon.alerting.render import truncate

CONTENT_LIMIT = 4096  # bytes


class WeComReceiver(Receiver):
    type = "wecom"
    rate_per_minute = 20.0
    options = ()

    def request(self, n: Notification, now: float) -> Request:
        listed, truncated = self.listed(n)
        text = f"### {self.title(listed)}\n{self.body(listed)}"
        if truncated:
            text += f"\n{truncated} more alerts in this group not listed."
        return Request(self.config.url, {"msgtype": "markdown",
                                         "markdown": {"content": truncate(text, CONTENT_LIMIT, "bytes")}})

    def outcome(self, resp: Response) -> Outcome:
        return errcode_outcome(resp, "errcode", "errmsg", retry_codes={45009})
