"""Slow HTTP clients on purpose: connections that send a request head one byte at a time (a slowloris)."""

from __future__ import annotations

import socket
import threading


class Tricklers:
    """``count`` connections to ``address``, each sending a header byte every ``every_s`` until closed.

    Use as a context manager: the connections open on entry and close on exit.
    """

    def __init__(self, address: tuple[str, int], count: int = 200, every_s: float = 1.0):
        self.address, self.count, self.every_s = address, count, every_s
        self.sockets: list[socket.socket] = []
        self._stop = threading.Event()

    def __enter__(self) -> Tricklers:
        for _ in range(self.count):
            s = socket.create_connection(self.address)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: slow\r\nX-Slow: ")
            self.sockets.append(s)
        threading.Thread(target=self._trickle, name="tricklers", daemon=True).start()
        return self

    def _trickle(self) -> None:
        while not self._stop.is_set():
            for s in self.sockets:
                try:
                    s.send(b"x")
                except OSError:  # closed by the server (evicted or past its deadline): that is the point
                    pass
            self._stop.wait(self.every_s)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for s in self.sockets:
            s.close()
