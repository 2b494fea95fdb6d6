"""Real HTTP servers on loopback for the collector tests: each serves what a test puts in ``pages``."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Pages:
    """path -> (status, body, delay seconds); what the server answers."""

    def __init__(self):
        self.routes: dict[str, tuple[int, bytes, float]] = {}
        self.hits: list[str] = []

    def set(self, path: str, body: bytes | str, status: int = 200, delay: float = 0.0) -> None:
        self.routes[path] = (status, body.encode() if isinstance(body, str) else body, delay)


@pytest.fixture
def http_server():
    """Start servers on demand: ``url, pages = http_server()`` (``http_server("127.0.0.2")``: another loopback
    address, another node to whoever groups targets by address)."""
    servers = []

    def start(host: str = "127.0.0.1"):
        pages = Pages()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                path = self.path.split("?")[0]
                pages.hits.append(self.path)
                status, body, delay = pages.routes.get(path, (404, b"not found", 0.0))
                if delay:
                    time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        srv = ThreadingHTTPServer((host, 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"{host}:{srv.server_address[1]}", pages

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
