"""One HTTP POST with a timeout, and what its outcome means for the outbox (deliver, retry, give up)."""

from __future__ import annotations

import email.utils
import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from daemon import __version__
from daemon.alerting.secrets import redact_url, scrub

USER_AGENT = f"raswarden/{__version__}"


@dataclass
class Request:
    """What a receiver wants sent: URL (may hold a token), headers and a JSON or raw body."""

    url: str
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"  # a ticket's update may be PATCH (ServiceNow's Table API)

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class Response:
    status: int  # 0 when no HTTP answer came (connection refused, timeout)
    headers: dict[str, str]
    body: bytes
    error: str = ""  # transport error, secrets removed

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None

    def text(self, limit: int = 300) -> str:
        return scrub(self.body[:limit].decode("utf-8", "replace")).strip()


@dataclass
class Outcome:
    """``ok``; or ``retry`` (after ``retry_after`` seconds when the platform said so); or a permanent failure."""

    ok: bool
    retry: bool = False
    retry_after: float | None = None
    error: str = ""


def post(request: Request, timeout: float = 10.0) -> Response:
    """Send ``request`` (POST unless it says otherwise); never raises for HTTP or transport errors (they are in the
    response)."""
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT, **request.headers}
    req = urllib.request.Request(request.url, data=request.encoded(), headers=headers, method=request.method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (URL from the operator's config)
            body = resp.read(65536)
            while resp.length:  # what the Content-Length promised beyond the first 64 KiB: read and let go
                if not resp.read(min(resp.length, 65536)):
                    break
            if resp.length:  # the server closed before the body it announced: not an answer to count on
                raise http.client.IncompleteRead(body, resp.length)
            return Response(resp.status, dict(resp.headers.items()), body)
    except urllib.error.HTTPError as exc:
        body = exc.read(65536) if exc.fp else b""
        return Response(exc.code, dict(exc.headers.items()) if exc.headers else {}, body)
    except http.client.IncompleteRead as exc:  # a 200 whose body broke off is not a delivery: retried
        return Response(0, {}, b"", f"{redact_url(request.url)}: the answer broke off after {len(exc.partial)} bytes "
                                    f"of its body ({exc.expected} more announced)")
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return Response(0, {}, b"", f"{redact_url(request.url)}: {scrub(str(reason)) or type(exc).__name__}")


def retry_after(headers: dict[str, str], now: float | None = None) -> float | None:
    """Seconds from a Retry-After header (delta seconds or an HTTP date), None without one."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def http_outcome(resp: Response) -> Outcome:
    """The generic rule: 2xx done; 429 and 5xx (and no answer) retried, honouring Retry-After; other 4xx fail."""
    if 200 <= resp.status < 300:
        return Outcome(True)
    if resp.status == 0:
        return Outcome(False, retry=True, error=resp.error)
    error = f"HTTP {resp.status}: {resp.text()}" if resp.body else f"HTTP {resp.status}"
    if resp.status == 429 or resp.status >= 500:
        return Outcome(False, retry=True, retry_after=retry_after(resp.headers), error=error)
    return Outcome(False, error=error)
