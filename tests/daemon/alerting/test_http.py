"""One POST's outcome against real sockets on loopback: a 200 whose body breaks off is no delivery (issue 54)."""

import socket
import threading

from daemon.alerting.http import Request, http_outcome, post


def one_answer(raw: bytes) -> tuple[str, threading.Thread]:
    """A server on loopback that reads one request, sends ``raw`` and closes; its URL."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(raw)
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/hook", t


def test_a_200_that_closes_mid_body_is_retried_not_delivered():
    url, t = one_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nabc")
    resp = post(Request(url, {"text": "GPU sn01-b02/gpu5 failed"}), timeout=10)
    t.join(10)
    outcome = http_outcome(resp)
    assert resp.status == 0 and "broke off after 3 bytes" in resp.error
    assert not outcome.ok and outcome.retry


def test_a_whole_answer_is_delivered_and_a_long_body_read_to_its_end():
    body = b"x" * 200_000
    url, t = one_answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    resp = post(Request(url, {"text": "ok"}), timeout=10)
    t.join(10)
    assert resp.status == 200 and len(resp.body) == 65536 and http_outcome(resp).ok
