"""raswarden's HTTP endpoint (loopback by default): metrics, health, the status page and the JSON API.

| method | path | what |
|---|---|---|
| GET | ``/metrics`` | raswarden's own Prometheus metrics |
| GET | ``/healthz`` | 200 when the store is writable and the collectors answer, else 503 (JSON says why) |
| GET | ``/``, ``/incidents`` | the status page: heatmap, open incidents, the repair queue, actions, silences |
| GET | ``/incidents/{id}``, ``/repairs/{id}`` | an incident's page, a repair order's page (the links in alerts) |
| GET | ``/api/v1/entities``, ``/api/v1/incidents[?status=open]``, ``/api/v1/actions``, ``/api/v1/silences`` | JSON |
| POST | ``/api/v1/incidents/{id}/approve`` ``{"by"}`` | approve an action waiting for an operator |
| POST | ``/api/v1/silences`` ``{"matchers", "duration", "comment", "by"}`` | add a silence |
| POST | ``/api/v1/nodes/{node}/resume`` ``{"reason", "by", "force", "repaired"}`` (``/drain``) | by hand |
| GET | ``/api/v1/repairs[?state=all]`` | repair orders: the queue (open to validating), or all |
| GET | ``/api/v1/idle-checks`` | the active checks of idle nodes: each node's running or last one |
| GET | ``/api/v1/advice``, ``/api/v1/advice/{job}`` | checkpoint advice: the foresight and every job's, or one |
| POST | ``/api/v1/repairs/{id}/start`` ``{"by", "note"}`` (``/done`` + ``"part_serial"``, ``/give-back``) | by hand |

Writes need ``Authorization: Bearer <token>`` (``[http] token_file``/``token_credential``); without a
configured token they are refused. The page is plain HTML and inline SVG: no script, no external asset.

A long-running service cannot let one client hold it: requests are read whole by ``server`` under a deadline
(``request_timeout_s``) before a thread sees them, with caps on connections in all and per peer, and threads of their
own for ``/healthz`` and ``/metrics``, so a slow or stuck client never starves Prometheus' scrape or the API.

The wing: ``server`` (the bounded HTTP server, knows nothing of raswarden), ``routes`` (the table of paths and their
handlers), ``pages`` (the HTML), ``state`` (what pages and API read of the service); the service hands itself over,
and nothing outside the service imports the wing.

May import: itself, ``daemon.alerting``, ``daemon.operations``, the floor (``daemon.metrics``, ``daemon.timetext``,
``daemon.topology``), ``daemon.store``; never the service it serves.
"""
from __future__ import annotations

from daemon.web.routes import answer_with, handler
from daemon.web.server import BoundedHTTPServer

__all__ = ["WebServer"]


class WebServer:
    """The HTTP endpoint: :class:`BoundedHTTPServer` answering with raswarden's routes."""

    def __init__(self, service, http_cfg):
        host, _, port = http_cfg.listen.rpartition(":")
        address = (host.strip("[]") or "127.0.0.1", int(port))
        self.server = BoundedHTTPServer(address, answer_with(handler(service, http_cfg.token)),
                                        max_connections=http_cfg.max_connections,
                                        max_per_peer=http_cfg.max_connections_per_peer,
                                        deadline_s=http_cfg.request_timeout_s)

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
