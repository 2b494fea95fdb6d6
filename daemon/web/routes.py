"""The endpoint's routes: a table of (method, path pattern, handler), each handler a small function of one request.

A handler takes a :class:`Request` (the service, the path's named parts, the query, the JSON body and who sent it)
and returns a :data:`Reply`: a status, a body (``str`` or ``bytes`` sent as is, anything else as JSON) and its
content type. :func:`answer` finds the route, checks a write's bearer token and reads its body, and turns what a
handler raises into a status: :class:`~daemon.operations.operator.OperatorError` its own, anything else 500 with one log
line.
"""

from __future__ import annotations

import hmac
import html
import io
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from daemon import metrics
from daemon.alerting.silences import DEFAULT_SILENCE
from daemon.operations.operator import OperatorError, add_silence, approve, node_action
from daemon.web.pages import incident_page, repair_page, status_page
from daemon.web.server import MAX_BODY
from daemon.web.state import (actions_json, advice_json, entities_json, idle_checks_json, incidents_json,
                              repairs_json, silences_json)

log = logging.getLogger("raswarden.web")

HTML, JSON = "text/html; charset=utf-8", "application/json"
Reply = tuple[int, Any, str]
"""A status, a body (``str``/``bytes`` as is, anything else as JSON) and its content type."""


@dataclass(frozen=True)
class Request:
    """One request as a handler sees it."""

    service: Any
    params: dict[str, str]
    query: dict[str, list[str]] = field(default_factory=dict)
    body: dict = field(default_factory=dict)
    who: str = "api"

    def arg(self, name: str, default: str | None = None) -> str | None:
        return self.query.get(name, [default])[0]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern
    handle: Callable[[Request], Reply]


def _page(render: Callable[[Any, str], str | None], what: str) -> Callable[[Request], Reply]:
    def handle(r: Request) -> Reply:
        page = render(r.service, r.params["id"])
        if page is None:
            return 404, f"no {what} {html.escape(r.params['id'])}\n", "text/plain"
        return 200, page, HTML
    return handle


def _healthz(r: Request) -> Reply:
    ok, detail = r.service.healthz()
    return (200 if ok else 503), detail, JSON


def _one_advice(r: Request) -> Reply:
    one = advice_json(r.service, r.params["job"])
    if one is None:
        return 404, {"error": "no advice for that job (not running, not opted in, or not advised yet)"}, JSON
    return 200, one, JSON


def _approve(r: Request) -> Reply:
    return 200, {"approved": approve(r.service.remediation, r.params["id"], r.who)}, JSON


def _add_silence(r: Request) -> Reply:
    matchers = r.body.get("matchers")
    if not isinstance(matchers, list) or not matchers:
        raise OperatorError("matchers: a non-empty list such as [\"rack=r07\"]", 400)
    sil = add_silence(r.service.store, [str(m) for m in matchers], str(r.body.get("duration", DEFAULT_SILENCE)),
                      r.who, str(r.body.get("comment", "")))
    return 201, {"id": sil.id, "ends_at": sil.ends_at}, JSON


def _repair(r: Request) -> Reply:
    from daemon.operations.repairs import RepairError

    book, note, what = r.service.remediation.repairs, str(r.body.get("note", "")), r.params["what"]
    try:
        order_id = int(r.params["id"])
        row = book.start(order_id, r.who, note) if what == "start" else \
            book.give_back(order_id, r.who, note) if what == "give-back" else \
            book.done(order_id, r.who, str(r.body.get("part_serial", "")), note)
    except ValueError as exc:  # RepairError is one; so is a non-numeric id
        raise OperatorError(str(exc) if isinstance(exc, RepairError) else f"no repair order {r.params['id']}",
                            409 if "can go to" in str(exc) else 404) from None
    return 200, row.model_dump(), JSON


def _node(r: Request) -> Reply:
    from daemon.operations.remediation import scheduler_from_config

    what = r.params["what"]
    text = node_action(scheduler_from_config(r.service.cfg), r.service.store, what, r.params["node"],
                       str(r.body.get("reason", "")), r.who, bool(r.body.get("force", False)),
                       repaired=what == "resume" and bool(r.body.get("repaired", False)))
    return 200, {"done": text}, JSON


def _json(read: Callable[[Request], Any]) -> Callable[[Request], Reply]:
    return lambda r: (200, read(r), JSON)


_ROUTES = [
    ("GET", r"/metrics", lambda r: (200, generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST)),
    ("GET", r"/healthz", _healthz),
    ("GET", r"/|/incidents", lambda r: (200, status_page(r.service), HTML)),
    ("GET", r"/incidents/(?P<id>[^/]+)", _page(incident_page, "incident")),
    ("GET", r"/repairs/(?P<id>[^/]+)", _page(repair_page, "repair order")),
    ("GET", r"/api/v1/entities", _json(lambda r: entities_json(r.service))),
    ("GET", r"/api/v1/incidents", _json(lambda r: incidents_json(r.service, r.arg("status")))),
    ("GET", r"/api/v1/actions", _json(lambda r: actions_json(r.service))),
    ("GET", r"/api/v1/silences", _json(lambda r: silences_json(r.service))),
    ("GET", r"/api/v1/repairs", _json(lambda r: repairs_json(r.service, r.arg("state", "") == "all"))),
    ("GET", r"/api/v1/idle-checks", _json(lambda r: idle_checks_json(r.service))),
    ("GET", r"/api/v1/advice", _json(lambda r: advice_json(r.service))),
    ("GET", r"/api/v1/advice/(?P<job>[^/]+)", _one_advice),
    ("POST", r"/api/v1/incidents/(?P<id>[^/]+)/approve", _approve),
    ("POST", r"/api/v1/silences", _add_silence),
    ("POST", r"/api/v1/repairs/(?P<id>[^/]+)/(?P<what>start|done|give-back)", _repair),
    ("POST", r"/api/v1/nodes/(?P<node>[^/]+)/(?P<what>drain|resume)", _node),
]
ROUTES: tuple[Route, ...] = tuple(Route(m, re.compile(p), h) for m, p, h in _ROUTES)
"""Every path the endpoint answers (the module docstring of :mod:`daemon.web` lists them for operators)."""


def route(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route of ``method`` and ``path`` and the path's named parts; None when there is none."""
    for r in ROUTES:
        if r.method == method and (m := r.pattern.fullmatch(path)):
            return r, m.groupdict()
    return None


def _writes_allowed(service, token: str | None, headers) -> Reply | None:
    """None when a write may go ahead; else the refusal."""
    if token is None:
        why = getattr(getattr(getattr(service, "cfg", None), "http", None), "token_error", None)
        return 403, {"error": "the API's write calls are off: " + (why or "set [http] token_file or "
                                                                          "token_credential")}, JSON
    if not hmac.compare_digest(headers.get("Authorization", "").encode(), f"Bearer {token}".encode()):
        return 401, {"error": "missing or wrong bearer token"}, JSON
    return None


def handler(service, token: str | None) -> type[BaseHTTPRequestHandler]:
    """The request handler for ``service``: parses one whole request (read by the server) and answers by
    :data:`ROUTES`; the response collects in its ``wfile``."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "raswarden"

        def __init__(self, raw: bytes, client_address: tuple):
            self.raw = raw
            super().__init__(None, client_address, None)  # runs setup, handle and finish

        def setup(self) -> None:
            self.rfile, self.wfile = io.BytesIO(self.raw), io.BytesIO()

        def finish(self) -> None:
            pass  # the response stays in wfile for the server to send

        def _send(self, status: int, body: Any, ctype: str) -> None:
            if not isinstance(body, (str, bytes)):
                body = json.dumps(body, default=str, indent=1) + "\n"
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            path = "/" + "/".join(p for p in url.path.split("/") if p)
            found = route(method, path)
            if found is None:
                self._send(404, {"error": f"no such path {url.path}"}, JSON)
                return
            body: dict = {}
            if method == "POST":
                refused = _writes_allowed(service, token, self.headers)
                if refused is not None:
                    self._send(*refused)
                    return
                try:  # the server read the body whole, its length checked: the rest of rfile is the body
                    body = json.loads(self.rfile.read(MAX_BODY) or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("expected a JSON object")
                except ValueError as exc:
                    self._send(400, {"error": f"bad JSON body: {exc}"}, JSON)
                    return
            request = Request(service, found[1], parse_qs(url.query), body, str(body.get("by") or "api"))
            try:
                self._send(*found[0].handle(request))
            except OperatorError as exc:
                self._send(exc.status, {"error": str(exc)}, JSON)
            except Exception as exc:
                log.exception("%s %s failed", method, url.path)
                self._send(500, {"error": type(exc).__name__}, JSON)

        def do_GET(self):  # noqa: N802 (http.server's name)
            self._serve("GET")

        def do_POST(self):  # noqa: N802
            self._serve("POST")

        def log_message(self, fmt, *args):
            log.debug("%s %s", self.address_string(), fmt % args)

    return Handler


def answer_with(handler_class: type[BaseHTTPRequestHandler]) -> Callable[[bytes, tuple], bytes]:
    """The server's application: one whole request's bytes in, the handler's whole response out."""

    def answer(raw: bytes, peer: tuple) -> bytes:
        return handler_class(raw, peer).wfile.getvalue()

    return answer
