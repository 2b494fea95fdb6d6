"""``raswarden run`` as systemd runs it: a subprocess with a real NOTIFY_SOCKET datagram socket, its HTTP
endpoints, SIGHUP and ``raswarden reload`` with a bad and a good config, SIGKILL and a restart without a repeated alert, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from daemon.store import OutboxRow, Store
from tests.daemon.alerting.receiver_server import ChatServer
from tests.daemon.service.conftest import free_port, get


class NotifySocket:
    """The datagram socket systemd listens on for a Type=notify unit, read all the time as systemd reads it (a test
    that read it only when it looked let the queue fill while it waited on something else, and the daemon's READY=1
    then waited for room: the flaky reload of issue 54 item 8 was the harness, not the daemon)."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._drain, name="notify-socket", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.messages.append(dict(line.split("=", 1) for line in data.splitlines() if "=" in line))

    def read(self) -> list[dict[str, str]]:
        """Every message received so far."""
        with self._lock:
            return list(self.messages)

    def wait_for(self, key: str, value: str | None = None, timeout: float = 60.0, after: int = 0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.read()[after:]:
                if key in m and (value is None or m[key] == value):
                    return m
            time.sleep(0.05)
        raise AssertionError(f"no {key}={value} from the daemon; got {self.read()[-5:]}")

    def close(self) -> None:
        self._stop.set()
        self._reader.join(5)
        self.sock.close()


def post(url: str, body: dict, token: str | None = None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def chat():
    server = ChatServer()
    yield server
    server.close()


def start(config, notify: NotifySocket, log, runtime=None):
    env = dict(os.environ, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="2000000")
    if runtime is not None:
        env["RUNTIME_DIRECTORY"] = str(runtime)
    return subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(config)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def reload_command(pid: int, runtime) -> subprocess.CompletedProcess:
    """``raswarden reload --pid`` as systemd's ExecReload= runs it."""
    return subprocess.run([sys.executable, "-m", "daemon", "reload", "--pid", str(pid), "--timeout", "60"],
                          env=dict(os.environ, RUNTIME_DIRECTORY=str(runtime)), capture_output=True, text=True,
                          timeout=120)


def test_run_under_a_notify_socket_reload_kill_restart_and_stop(live, chat, tmp_path):
    port = free_port()
    receivers = f"""
[alerting]
group_wait_s = 0
group_interval_s = 1
[[alerting.receivers]]
name = "chat"
type = "webhook"
url = "{chat.url()}"
"""
    config = live.config(extra=receivers, port=port)
    base = f"http://127.0.0.1:{port}"
    notify = NotifySocket(tmp_path / "notify.sock")
    log = open(tmp_path / "run.log", "wb")
    runtime = tmp_path / "run"
    runtime.mkdir()
    proc = start(config, notify, log, runtime)
    try:
        ready = notify.wait_for("READY", "1")
        assert "listening on" in ready["STATUS"]
        notify.wait_for("WATCHDOG", "1")  # petted while cycles finish (WatchdogSec=2 s)
        notify.wait_for("STATUS")
        # HTTP: health, metrics, the page, the API
        deadline = time.monotonic() + 30
        while get(f"{base}/healthz")[0] != 200:
            assert time.monotonic() < deadline, get(f"{base}/healthz")
            time.sleep(0.5)
        status, body = get(f"{base}/metrics")
        assert status == 200 and b"raswarden_ticks_total" in body and b'raswarden_scrape_up{collector="exporters"' in body
        status, page = get(f"{base}/")
        assert status == 200 and b"<svg" in page and b"sn01-b01" in page
        assert post(f"{base}/api/v1/silences", {"matchers": ["rack=r99"]})[0] == 401
        code, answer = post(f"{base}/api/v1/silences", {"matchers": ["rack=r99"], "duration": "1h", "by": "test"},
                            token="test-token-123")
        assert code == 201 and answer["id"]
        assert post(f"{base}/api/v1/incidents/inc-nope/approve", {}, token="test-token-123")[0] == 404
        # the GPU falls off the bus: an incident, and a chat message for it
        deadline = time.monotonic() + 60
        while not any(b"gpu_bus" in r.body for r in chat.received):
            assert proc.poll() is None and time.monotonic() < deadline, "no chat message for the fault"
            time.sleep(0.5)
        status, incidents = get(f"{base}/api/v1/incidents?status=open")
        assert any(i["entity"] == "sn01-b02/gpu5" for i in json.loads(incidents))
        # SIGHUP with a broken file keeps the running config; a good one is applied
        good = config.read_text()
        config.write_text(good + "\n[bogus]\n")
        mark = len(notify.read())
        proc.send_signal(signal.SIGHUP)
        time.sleep(2)
        assert proc.poll() is None and not any("RELOADING" in m for m in notify.read()[mark:])
        config.write_text(good)
        proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", "1", after=mark)
        notify.wait_for("READY", "1", after=mark)
        # the unit's ExecReload=: returns once the daemon answered, failing with the reason when it refused
        config.write_text(good + "\n[bogus]\n")
        refused = reload_command(proc.pid, runtime)
        assert refused.returncode == 1 and "bogus" in refused.stderr and proc.poll() is None, refused
        config.write_text(good)
        mark = len(notify.read())
        applied = reload_command(proc.pid, runtime)
        assert applied.returncode == 0 and "runs the new config" in applied.stdout, applied
        # its READY=1 was sent (before the answer the command waited for): systemd's unit is active, not
        # 'reloading'; it is on the socket already, read as soon as the reader thread runs
        notify.wait_for("READY", "1", after=mark, timeout=10)
        # SIGKILL, then a restart: the lease runs out, the new process takes over and repeats nothing
        sent = len(chat.received)
        proc.kill()
        proc.wait()
        proc = start(config, notify, log)
        notify.wait_for("READY", "1", after=len(notify.read()))
        deadline = time.monotonic() + 30
        while json.loads(get(f"{base}/healthz")[1]).get("active") is not True:
            assert time.monotonic() < deadline, "the restarted daemon did not take over"
            time.sleep(0.5)
        time.sleep(3)
        keys = [r.headers.get("idempotency-key") for r in chat.received]
        assert len(keys) == len(set(keys)), "a notification was delivered twice"
        assert len(chat.received) >= sent
        # SIGTERM: finishes the job in flight, says STOPPING, exits 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        notify.wait_for("STOPPING", "1")
        store = Store(f"sqlite:///{tmp_path / 'state.db'}")
        from sqlmodel import select

        with store.session() as s:
            pending = s.exec(select(OutboxRow).where(OutboxRow.status == "pending")).all()
        store.close()
        assert not pending
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
        notify.close()
