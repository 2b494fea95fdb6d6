"""An HTTP/1.0 server that a slow or stuck client cannot hold: requests are read whole before any thread sees them.

``http.server``'s ``ThreadingHTTPServer`` gives each connection a thread as soon as it is accepted, so clients that
send a byte a second hold every thread, and a socket timeout (which each byte resets) never fires. Production servers
bound the *request*, not the socket: Apache's ``mod_reqtimeout``, Go's ``ReadHeaderTimeout``. uvicorn's keep-alive
timeout is reset by each byte, as xorbitsai/inference PR 5213 found; waitress reads requests in its event loop but
stops accepting at ``connection_limit``, which leaves a health check waiting in the listen backlog. So this server:

- reads every request (head and body) in one asyncio event loop, where a waiting client costs a coroutine, under one
  deadline for the whole request (``deadline_s``): past it the client gets ``408`` and is closed;
- hands only a complete request to a thread pool; ``/healthz`` and ``/metrics`` have threads of their own
  (``PROBE_PATHS``), so no amount of other work delays a health check or a scrape;
- caps open connections in all (``max_connections``) and per peer address (``max_per_peer``); at a cap, the
  connection that has spent longest sending its request is closed with ``503`` to make room, so a quick request
  always gets in; only when every open connection is being answered is the new one refused ``503`` at once;
- refuses what it cannot read with one status and one log line: a head over ``MAX_HEAD`` (``431``), a bad or
  over-large ``Content-Length`` (``400``/``413``), a chunked body (``411``).

``answer(raw, peer) -> bytes`` is the application: one complete request in, one complete response out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from daemon import metrics

log = logging.getLogger("raswarden.web")

MAX_HEAD = 64 * 1024
"""The request line and headers, in bytes; more is answered 431."""
MAX_BODY = 64 * 1024
"""A request body, in bytes; more is answered 413 (the API's bodies are small JSON objects)."""
PROBE_PATHS = ("/healthz", "/metrics")
"""Paths answered by threads of their own: the health check and Prometheus' scrape never wait behind pages."""
WORKERS, PROBE_WORKERS = 4, 2

_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*(.*?)[ \t\r]*$", re.I | re.M)
_CHUNKED = re.compile(rb"^transfer-encoding[ \t]*:", re.I | re.M)
_DIGITS = re.compile(rb"\d{1,12}")


def status_only(code: int, reason: str, retry_after: bool = False) -> bytes:
    """A complete response with a status line, a plain-text reason and ``Connection: close``."""
    body = (reason + "\n").encode()
    head = (f"HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            + ("Retry-After: 1\r\n" if retry_after else "") + "Connection: close\r\n\r\n")
    return head.encode() + body


class Refused(Exception):
    """A request the server answers itself, with ``status`` and ``reason`` (counted by ``why``)."""

    def __init__(self, status: int, reason: str, why: str):
        super().__init__(reason)
        self.status, self.reason, self.why = status, reason, why


def body_length(head: bytes) -> int:
    """The body's length from a request head; :class:`Refused` for what this server does not read."""
    if _CHUNKED.search(head):
        raise Refused(411, "Length Required (chunked bodies are not read)", "malformed")
    values = {m.group(1) for m in _LENGTH.finditer(head)}
    if not values:
        return 0
    if len(values) > 1 or not _DIGITS.fullmatch(next(iter(values))):
        raise Refused(400, "Bad Request (Content-Length must be one whole number)", "malformed")
    length = int(next(iter(values)))
    if length > MAX_BODY:
        raise Refused(413, f"Payload Too Large (at most {MAX_BODY} bytes)", "too_large")
    return length


def request_path(head: bytes) -> str:
    """The path of a request head's request line, without its query ('' when there is none)."""
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    return parts[1].split(b"?", 1)[0].decode("latin-1").rstrip("/") if len(parts) >= 2 else ""


@dataclass(eq=False)
class _Connection:
    peer: str
    since: float
    task: asyncio.Task
    reading: bool = True
    evicted: bool = field(default=False)


class BoundedHTTPServer:
    """Listens on ``address`` at construction (so a taken port fails at once); serves from :meth:`start`."""

    def __init__(self, address: tuple[str, int], answer: Callable[[bytes, tuple], bytes], *,
                 max_connections: int = 256, max_per_peer: int = 64, deadline_s: float = 10.0):
        self.answer, self.deadline_s = answer, deadline_s
        self.max_connections, self.max_per_peer = max_connections, max_per_peer
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.sock = socket.create_server(address, family=family, backlog=128)
        self.server_address = self.sock.getsockname()
        self.pools = {False: ThreadPoolExecutor(WORKERS, thread_name_prefix="http"),
                      True: ThreadPoolExecutor(PROBE_WORKERS, thread_name_prefix="http-probe")}
        self.open: list[_Connection] = []  # touched only in the event loop's thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="http", daemon=True)

    # -- life ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """Serve in a thread of its own; returns once the event loop accepts connections."""
        self.thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        """Stop accepting, close every open connection, and wait (a little) for the thread."""
        if self._loop is not None and self._stopping is not None and self.thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self.thread.join(10)
        for pool in self.pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        self.sock.close()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._serve, sock=self.sock, limit=MAX_HEAD)
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for conn in list(self.open):
            conn.task.cancel()
        await asyncio.gather(*(c.task for c in list(self.open)), return_exceptions=True)

    # -- one connection -----------------------------------------------------------------------------
    def _admit(self, conn: _Connection) -> bool:
        """Make room for ``conn`` under both caps by closing the slowest senders; False when none can go."""
        for cap, scope in ((self.max_per_peer, lambda c: c.peer == conn.peer), (self.max_connections, None)):
            others = [c for c in self.open if not c.evicted and (scope is None or scope(c))]  # evicted: leaving
            while len(others) >= cap:
                waiting = [c for c in others if c.reading]
                if not waiting:
                    return False
                victim = min(waiting, key=lambda c: c.since)
                victim.evicted = True
                victim.task.cancel()
                others.remove(victim)
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_address = writer.get_extra_info("peername") or ("?", 0)
        loop = asyncio.get_running_loop()
        conn = _Connection(str(peer_address[0]), loop.time(), asyncio.current_task())
        if not self._admit(conn):
            metrics.HTTP_REFUSED.inc()
            await self._finish(writer, status_only(503, "Service Unavailable", retry_after=True))
            return
        self.open.append(conn)
        try:
            try:
                async with asyncio.timeout(self.deadline_s):
                    head = await reader.readuntil(b"\r\n\r\n")
                    body = await reader.readexactly(body_length(head))
            except asyncio.CancelledError:
                if not conn.evicted:
                    raise
                conn.task.uncancel()  # this server cancelled it, to answer it
                metrics.HTTP_DROPPED.labels("evicted").inc()
                await self._finish(writer, status_only(503, "Service Unavailable", retry_after=True))
                return
            conn.reading = False
            probe = request_path(head) in PROBE_PATHS
            response = await loop.run_in_executor(self.pools[probe], self.answer, head + body, peer_address)
            await self._finish(writer, response)
        except TimeoutError:
            metrics.HTTP_DROPPED.labels("deadline").inc()
            log.debug("%s: no whole request within %.0f s: 408", conn.peer, self.deadline_s)
            await self._finish(writer, status_only(408, "Request Timeout"))
        except asyncio.LimitOverrunError:
            metrics.HTTP_DROPPED.labels("too_large").inc()
            await self._finish(writer, status_only(431, "Request Header Fields Too Large"))
        except Refused as exc:
            metrics.HTTP_DROPPED.labels(exc.why).inc()
            log.debug("%s: %s", conn.peer, exc.reason)
            await self._finish(writer, status_only(exc.status, exc.reason))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()  # the client left before its request was whole
        finally:
            with contextlib.suppress(ValueError):
                self.open.remove(conn)

    async def _finish(self, writer: asyncio.StreamWriter, response: bytes) -> None:
        """Send ``response`` within the deadline (a client that does not read it is cut off) and close."""
        try:
            writer.write(response)
            async with asyncio.timeout(self.deadline_s):
                await writer.drain()
            writer.close()
        except (TimeoutError, ConnectionError, RuntimeError):
            writer.transport.abort()
