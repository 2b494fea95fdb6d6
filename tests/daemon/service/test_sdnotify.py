"""systemd's notify protocol: a state change (READY, RELOADING, STOPPING) waits for a reader that is behind, a STATUS
or WATCHDOG never does (issue 54: under load a READY=1 after a reload was lost and 'systemctl reload' would time
out)."""

import socket
import threading

from daemon import metrics
from daemon.service.sdnotify import Notifier


def reader(tmp_path) -> tuple[socket.socket, str]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    return sock, path


def fill(notifier: Notifier) -> int:
    """Send WATCHDOG=1 until the reader's queue is full; how many went."""
    sent = 0
    while notifier.watchdog():
        sent += 1
    return sent


def test_ready_waits_for_a_reader_that_is_behind_and_status_is_dropped_and_counted(tmp_path):
    sock, path = reader(tmp_path)
    n = Notifier({"NOTIFY_SOCKET": path}, state_timeout_s=30.0)
    queued = fill(n)
    assert queued >= 1
    dropped = metrics.SDNOTIFY_DROPPED._value.get()
    assert not n.status("busy") and metrics.SDNOTIFY_DROPPED._value.get() == dropped + 1
    sent = []
    sender = threading.Thread(target=lambda: sent.append(n.ready("reloaded")))
    sender.start()
    sender.join(0.3)
    assert sender.is_alive()  # waiting on the full queue, not dropped
    messages = [sock.recv(4096).decode() for _ in range(queued + 1)]  # the reader catches up
    sender.join(10)
    assert sent == [True] and messages[-1] == "READY=1\nSTATUS=reloaded"
    n.close()
    sock.close()


def test_a_state_change_gives_up_after_its_timeout(tmp_path):
    sock, path = reader(tmp_path)
    n = Notifier({"NOTIFY_SOCKET": path}, state_timeout_s=0.2)
    fill(n)
    assert not n.stopping()  # nobody reads: dropped after 0.2 s, logged, the daemon goes on
    n.close()
    sock.close()
