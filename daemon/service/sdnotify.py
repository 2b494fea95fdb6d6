"""systemd's notification protocol (sd_notify(3)): READY, STATUS, WATCHDOG, STOPPING, RELOADING.

One datagram per call to the ``AF_UNIX`` socket named by ``$NOTIFY_SOCKET`` (an abstract socket when it
starts with ``@``). Without the variable (not run by systemd) every call does nothing. The watchdog
interval is ``$WATCHDOG_USEC`` (set by ``WatchdogSec=``) when ``$WATCHDOG_PID`` is unset or this process.

A datagram socket whose reader has fallen behind (Linux queues ten datagrams, ``net.unix.max_dgram_qlen``) makes a
blocking send wait until it reads. A state change (READY, RELOADING, STOPPING) is what systemd waits for (a reload
that never hears READY=1 times out), so it is sent blocking, for at most ``state_timeout_s``, and only then dropped
and logged; WATCHDOG and STATUS never hold the daemon: sent non-blocking, one that finds the queue full is dropped
(a later one says the same) and counted (``raswarden_sdnotify_dropped_total``). Issue 54: under load a READY=1
after a reload was lost.
"""

from __future__ import annotations

import logging
import os
import socket

from daemon import metrics

log = logging.getLogger("raswarden.sdnotify")


class Notifier:
    """Sends state changes to systemd; a no-op outside a ``Type=notify`` unit."""

    #: fields whose message systemd waits for: never dropped while the reader catches up within the timeout
    STATE_FIELDS = frozenset({"READY", "RELOADING", "STOPPING"})

    def __init__(self, environ: dict[str, str] | None = None, state_timeout_s: float = 10.0):
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address = ("\0" + address[1:]) if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and (not pid or pid == str(os.getpid())) else 0.0
        self._sock: socket.socket | None = None
        self.state_timeout_s = state_timeout_s

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` lines (``notify(READY=1, STATUS="...")``); False when not sent."""
        if not self.address:
            return False
        message = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        state = not self.STATE_FIELDS.isdisjoint(fields)
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            if state:  # wait for the reader, within the timeout: systemd waits for this one
                self._sock.settimeout(self.state_timeout_s)
                try:
                    self._sock.sendto(message, self.address)
                finally:
                    self._sock.setblocking(False)
            else:
                self._sock.sendto(message, socket.MSG_DONTWAIT, self.address)
            return True
        except (BlockingIOError, TimeoutError):
            metrics.SDNOTIFY_DROPPED.inc()
            if state:
                log.warning("sd_notify to %s: the reader took over %.0f s, %s dropped", self.address,
                            self.state_timeout_s, ",".join(fields))
            else:
                log.debug("sd_notify to %s: the reader is behind, %s dropped", self.address, ",".join(fields))
            return False
        except OSError as exc:
            log.warning("sd_notify to %s failed: %s", self.address, exc)
            return False

    def ready(self, status: str) -> bool:
        return self.notify(READY=1, STATUS=status)

    def status(self, text: str) -> bool:
        return self.notify(STATUS=text)

    def watchdog(self) -> bool:
        return self.notify(WATCHDOG=1)

    def stopping(self, status: str = "stopping") -> bool:
        return self.notify(STOPPING=1, STATUS=status)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
