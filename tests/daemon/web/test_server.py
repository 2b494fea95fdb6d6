"""The bounded HTTP server (daemon/web/server.py) on loopback: trickling, idle and stuck clients never hold it, and
what it cannot read is answered with its status in one line, never a traceback (issue 54, probe 3)."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from daemon import metrics
from daemon.web.server import MAX_BODY, MAX_HEAD, BoundedHTTPServer
from lab.slowclients import Tricklers
from tests.daemon.service.conftest import get


def _dropped(why: str) -> float:
    return metrics.HTTP_DROPPED.labels(why)._value.get()


class _App:
    """An application that answers 200 with its path, or holds a request until ``release`` is set."""

    def __init__(self):
        self.release, self.holding = threading.Event(), threading.Semaphore(0)

    def __call__(self, raw: bytes, peer: tuple) -> bytes:
        path = raw.split(b" ", 2)[1]
        if path == b"/hold":
            self.holding.release()
            self.release.wait(30)
        return b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(path), path)


@pytest.fixture
def served():
    """A started server factory; every server made is stopped after the test."""
    made = []

    def make(**kw) -> tuple[BoundedHTTPServer, _App]:
        app = _App()
        server = BoundedHTTPServer(("127.0.0.1", 0), app, **kw)
        server.start()
        made.append((server, app))
        return server, app

    yield make
    for server, app in made:
        app.release.set()
        server.stop()


def _url(server: BoundedHTTPServer, path: str) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}{path}"


def _exchange(server: BoundedHTTPServer, request: bytes) -> bytes:
    """Send ``request`` whole, then read the response to its end."""
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_two_hundred_trickling_clients_leave_healthz_answered_by_the_service(tmp_path):
    """200 connections each sending a header byte every 0.2 s (each byte on time for a socket timeout) to a
    running service: /healthz and /metrics are answered by the service itself throughout, not 503."""
    from daemon.config import load
    from daemon.service.service import Service
    from tests.daemon.service.conftest import dead_target_config, free_port

    port = free_port()
    config, _ = dead_target_config(tmp_path, port)
    svc = Service(load(config))
    svc.start()
    try:
        with Tricklers(("127.0.0.1", port), count=200, every_s=0.2):
            answers = []
            for _ in range(10):
                code, body = get(f"http://127.0.0.1:{port}/healthz")
                answers.append((code, body[:1]))
                code, body = get(f"http://127.0.0.1:{port}/metrics")
                answers.append((code, b"raswarden_http_connections_refused_total" in body))
        # the service's own answers: JSON for /healthz (200 or 503 with its problems), the metrics page
        assert all(a in ((200, b"{"), (503, b"{"), (200, True)) for a in answers), answers
    finally:
        svc.stop()


def test_a_client_sending_a_byte_at_a_time_gets_408_at_the_deadline(served):
    server, _ = served(deadline_s=1.0)
    before = _dropped("deadline")
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"GET / HTTP/1.0\r\n")
        answer = b""
        for _ in range(100):  # a byte every 0.1 s: a socket timeout of 1 s would never fire
            try:
                s.send(b"X")
            except OSError:
                break
            s.settimeout(0.1)
            try:
                answer += s.recv(4096)
            except TimeoutError:
                continue
            if answer.endswith(b"\n\n") or b"Timeout\n" in answer:
                break
    assert answer.startswith(b"HTTP/1.0 408 Request Timeout"), answer
    assert _dropped("deadline") == before + 1


def test_at_the_cap_the_slowest_sender_makes_room_for_a_quick_request(served):
    """Four connections that send nothing fill the cap: a fifth, complete request is answered, and the connection
    that had waited longest is answered 503 with Retry-After and closed."""
    server, _ = served(max_connections=4, deadline_s=30.0)
    idle = [socket.create_connection(server.server_address[:2], timeout=10) for _ in range(4)]
    try:
        deadline = time.monotonic() + 10
        while len(server.open) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = _dropped("evicted")
        assert get(_url(server, "/metrics")) == (200, b"/metrics")
        evicted = idle[0].recv(4096)
        assert evicted.startswith(b"HTTP/1.0 503 Service Unavailable\r\n") and b"\r\nRetry-After: 1\r\n" in evicted
        assert _dropped("evicted") == before + 1
        # the other three still wait, inside the deadline (the evicted one leaves the list a moment after its 503
        # is out, and the quick request's once it is answered)
        deadline = time.monotonic() + 10
        while len(server.open) != 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(server.open) == 3
    finally:
        for s in idle:
            s.close()


def test_the_cap_per_peer_evicts_within_the_peer(served):
    server, _ = served(max_connections=100, max_per_peer=2, deadline_s=30.0)
    idle = [socket.create_connection(server.server_address[:2], timeout=10) for _ in range(2)]
    try:
        deadline = time.monotonic() + 10
        while len(server.open) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert get(_url(server, "/a")) == (200, b"/a")
        assert idle[0].recv(4096).startswith(b"HTTP/1.0 503")
    finally:
        for s in idle:
            s.close()


def test_when_every_open_connection_is_being_answered_a_new_one_is_refused_at_once(served):
    server, app = served(max_connections=2, deadline_s=30.0)
    holders = [threading.Thread(target=get, args=(_url(server, "/hold"),)) for _ in range(2)]
    for t in holders:
        t.start()
    for _ in range(2):
        assert app.holding.acquire(timeout=10)
    before = metrics.HTTP_REFUSED._value.get()
    code, body = get(_url(server, "/x"))
    assert code == 503 and body == b"Service Unavailable\n"
    assert metrics.HTTP_REFUSED._value.get() == before + 1
    app.release.set()
    for t in holders:
        t.join(10)
    assert get(_url(server, "/x")) == (200, b"/x")


def test_health_and_metrics_have_threads_of_their_own(served):
    """Every page thread is held by a slow answer: /healthz and /metrics are still answered."""
    from daemon.web.server import WORKERS

    server, app = served(deadline_s=30.0)
    holders = [threading.Thread(target=get, args=(_url(server, "/hold"),)) for _ in range(WORKERS)]
    for t in holders:
        t.start()
    for _ in range(WORKERS):
        assert app.holding.acquire(timeout=10)
    assert get(_url(server, "/healthz")) == (200, b"/healthz")
    assert get(_url(server, "/metrics?x=1")) == (200, b"/metrics?x=1")
    app.release.set()
    for t in holders:
        t.join(10)


@pytest.mark.parametrize("request_bytes, status, why", [
    (b"POST /a HTTP/1.0\r\nContent-Length: abc\r\n\r\n{}", 400, "malformed"),
    (b"POST /a HTTP/1.0\r\nContent-Length: 1.5\r\n\r\n{}", 400, "malformed"),
    (b"POST /a HTTP/1.0\r\nContent-Length: -1\r\n\r\n{}", 400, "malformed"),
    (b"POST /a HTTP/1.0\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\n{}", 400, "malformed"),
    (b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411, "malformed"),
    (b"POST /a HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1), 413, "too_large"),
    (b"GET /a HTTP/1.0\r\nX-Big: " + b"a" * MAX_HEAD + b"\r\n\r\n", 431, "too_large"),
])
def test_what_the_server_cannot_read_is_answered_with_its_status_and_no_traceback(served, caplog, request_bytes,
                                                                                   status, why):
    server, _ = served()
    before = _dropped(why)
    with caplog.at_level(logging.DEBUG, logger="raswarden.web"):
        answer = _exchange(server, request_bytes)
    assert answer.startswith(b"HTTP/1.0 %d " % status), answer[:200]
    assert _dropped(why) == before + 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_a_body_within_its_length_reaches_the_application_whole(served):
    """A body sent in pieces, slower than a single read, arrives whole with its head."""
    seen = []

    def app(raw, peer):
        seen.append(raw)
        return b"HTTP/1.0 204 No Content\r\n\r\n"

    server = BoundedHTTPServer(("127.0.0.1", 0), app, deadline_s=10.0)
    server.start()
    try:
        with socket.create_connection(server.server_address[:2], timeout=10) as s:
            s.sendall(b"POST /p HTTP/1.0\r\nContent-Length: 10\r\n\r\n01234")
            time.sleep(0.1)
            s.sendall(b"56789")
            assert s.recv(4096).startswith(b"HTTP/1.0 204")
        assert seen == [b"POST /p HTTP/1.0\r\nContent-Length: 10\r\n\r\n0123456789"]
    finally:
        server.stop()


def test_a_taken_port_fails_at_construction():
    server = BoundedHTTPServer(("127.0.0.1", 0), _App())
    try:
        with pytest.raises(OSError):
            BoundedHTTPServer(server.server_address[:2], _App())
    finally:
        server.stop()
