"""A real local HTTP server standing in for a chat platform: records every request, answers as scripted."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    raw_query: str = ""

    def json(self):
        return json.loads(self.body)


@dataclass
class ChatServer:
    """Serves on 127.0.0.1:<port>; ``answers`` is a queue of (status, headers, body) replies (default 200 ok)."""

    default: tuple[int, dict, bytes] = (200, {}, b"ok")
    answers: list[tuple[int, dict, bytes]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)

    port: int = 0

    @classmethod
    def on_port(cls, port: int) -> ChatServer:
        """A server on a given port (a platform coming back where it was)."""
        return cls(port=port)

    def __post_init__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                self._answer("POST")

            def do_PATCH(self):  # noqa: N802 (a ticket tracker's update)
                self._answer("PATCH")

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                parts = urlsplit(self.path)
                with server.lock:
                    server.received.append(Received(method, parts.path, parse_qs(parts.query),
                                                    {k.lower(): v for k, v in self.headers.items()}, body,
                                                    parts.query))
                    status, headers, reply = server.answers.pop(0) if server.answers else server.default
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.lock = threading.Lock()
        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
