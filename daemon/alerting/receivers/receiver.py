"""The receiver interface: turn a notification into one HTTP request, and judge the platform's answer."""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from urllib.parse import urlsplit
from collections.abc import Callable
from typing import Any, ClassVar

from daemon.alerting.alert import Notification
from daemon.alerting.http import Outcome, Request, Response, http_outcome
from daemon.alerting.render import Renderer
from daemon.alerting.secrets import SecretError, read_secret, redact_url


@dataclass
class ReceiverConfig:
    """One ``[[alerting.receivers]]`` entry; ``url`` and ``secret`` are already read (files, credentials)."""

    name: str
    type: str
    url: str
    secret: str | None = None
    send_resolved: bool = True
    rate_per_minute: float | None = None  # default: the platform's own limit
    timeout_s: float = 10.0
    max_alerts: int = 20  # alerts listed in one message; the rest are counted as truncated
    options: dict[str, Any] = field(default_factory=dict)  # type-specific keys (channel, username, ...)
    unavailable: str | None = None  # why its secret could not be read: built, it is not; its alerts wait

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], where: str) -> ReceiverConfig:
        """Build from a config table; secrets come from ``url``/``url_file``/``url_credential`` and the same
        for ``secret``. Raises ValueError naming the key."""
        raw = dict(raw)
        name = raw.pop("name", None)
        kind = raw.pop("type", None)
        if not name or not kind:
            raise ValueError(f"{where}: 'name' and 'type' are required")
        given = {k: raw.pop(k, None) for k in ("url", "url_file", "url_credential", "secret", "secret_file",
                                                 "secret_credential")}
        if not any(given[k] for k in ("url", "url_file", "url_credential")):
            raise SecretError(f"{where}.url: missing (set {where}.url, {where}.url_file or {where}.url_credential)")
        url, secret, unavailable = "", None, None
        try:  # a secret that is not there (yet) disables the receiver, never the daemon
            url = read_secret(f"{where}.url", given["url"], given["url_file"], given["url_credential"])
            secret = read_secret(f"{where}.secret", given["secret"], given["secret_file"], given["secret_credential"],
                                 required=False)
        except SecretError as exc:
            unavailable = str(exc)
        if url:
            check_url(f"{where}.url", url)
        known = {k: raw.pop(k) for k in ("send_resolved", "rate_per_minute", "timeout_s", "max_alerts") if k in raw}
        return cls(name=name, type=kind, url=url or "", secret=secret, options=raw, unavailable=unavailable, **known)


def check_url(where: str, url: str) -> None:
    """A receiver's URL is http or https with a host; anything else (file://, ftp://, javascript:, http:///hook) is
    refused when the config is read, with the key and the scheme, never the rest of the URL (its path holds the
    webhook's token). Raises ValueError."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{where}: the scheme must be http or https, not {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise ValueError(f"{where}: no host in {redact_url(url)}")


def iso(ts: float | None) -> str:
    """RFC 3339 as Alertmanager writes it; the zero time for 'not ended'."""
    if ts is None:
        return "0001-01-01T00:00:00Z"
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Receiver(ABC):
    """A chat platform or alert router. Subclasses set ``type``, ``rate_per_minute`` and build requests."""

    type: ClassVar[str]
    rate_per_minute: ClassVar[float] = 60.0  # the platform's documented limit, or a polite default
    options: ClassVar[tuple[str, ...]] = ()  # type-specific config keys accepted
    needs_secret: ClassVar[bool] = False

    def __init__(self, config: ReceiverConfig, renderer: Renderer | None = None):
        unknown = set(config.options) - set(self.options)
        if unknown:
            raise ValueError(f"receiver {config.name!r} ({self.type}): unknown key(s) {', '.join(sorted(unknown))}")
        if self.needs_secret and not config.secret:
            raise ValueError(f"receiver {config.name!r} ({self.type}): 'secret' is required (the signing key)")
        self.config = config
        self.name = config.name
        self.renderer = renderer or Renderer()
        self.per_minute = config.rate_per_minute or self.rate_per_minute

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {redact_url(self.config.url)})"

    @abstractmethod
    def request(self, n: Notification, now: float) -> Request:
        """The HTTP request delivering ``n`` (called at each attempt: signatures carry the time)."""

    def requests(self, n: Notification, now: float,
                 ticket_of: Callable[[str], str | None]) -> list[tuple[str | None, Request]]:
        """Every request that delivers ``n``, each with the alert it is about: here one message for the whole
        notification (None); a ticket tracker's one per alert (receivers/ticket.py), ``ticket_of`` giving the key
        of the ticket the tracker made for it before."""
        return [(None, self.request(n, now))]

    def key_of(self, response: Response) -> str | None:
        """A tracker's key of the ticket its answer made (kept, so later changes update it); None here."""
        return None

    def outcome(self, resp: Response) -> Outcome:
        """Whether the platform took it; platforms that answer 200 with an error code override this."""
        return http_outcome(resp)

    def title(self, n: Notification) -> str:
        return self.renderer.render("title", n, self.type)

    def body(self, n: Notification) -> str:
        return self.renderer.render("body", n, self.type)

    def option_fields(self) -> dict[str, Any]:
        """The type-specific options the operator set (channel, username, ...), for the payload."""
        return {k: self.config.options[k] for k in self.options if self.config.options.get(k)}

    def listed(self, n: Notification) -> tuple[Notification, int]:
        """``n`` with at most ``max_alerts`` alerts (firing first) and how many were left out."""
        keep = (n.firing + n.resolved)[: self.config.max_alerts]
        return Notification(n.group_key, n.seq, n.created_at, keep, n.status_url), len(n.alerts) - len(keep)


def errcode_outcome(resp: Response, code_key: str, message_key: str, retry_codes: set[int]) -> Outcome:
    """Platforms that answer HTTP 200 with ``{code_key: 0}`` on success and another code on failure."""
    base = http_outcome(resp)
    if not base.ok:
        return base
    data = resp.json()
    if not isinstance(data, dict) or code_key not in data:
        return base  # an empty or non-JSON 2xx: taken
    code = data.get(code_key)
    if code in (0, None):
        return Outcome(True)
    error = f"{code_key} {code}: {data.get(message_key, '')}"
    if code in retry_codes:
        return Outcome(False, retry=True, retry_after=60.0, error=error)
    return Outcome(False, error=error)
