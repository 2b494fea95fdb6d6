"""raswarden → a real Alertmanager (Debian's prometheus-alertmanager) → a local webhook receiver.

Alertmanager is started by this fixture on loopback with a route to a webhook on a local server; the
test checks that raswarden's API v2 alerts are accepted, grouped and routed on, firing then resolved.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from daemon.alerting.alert_pipeline import AlertingConfig, AlertPipeline
from daemon.alerting.outbox import Outbox
from daemon.alerting.receivers import build
from daemon.alerting.receivers.receiver import ReceiverConfig
from tests.conftest import require
from tests.daemon.alerting.conftest import close, make_incident
from tests.daemon.alerting.receiver_server import ChatServer

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def alertmanager(tmp_path):
    require(BINARY is not None, "no Alertmanager: scripts/test.sh installs prometheus-alertmanager (as root)")
    hook = ChatServer()
    port = free_port()
    (tmp_path / "am.yml").write_text(f"""
route:
  receiver: hook
  group_by: ['rack', 'category']
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: '{hook.url("/am")}'
        send_resolved: true
""")
    proc = subprocess.Popen([BINARY, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"Alertmanager did not start: {proc.stderr.read().decode()[-500:]}")
    yield url, hook
    proc.terminate()
    proc.wait(10)
    hook.close()


def wait_for(cond, timeout: float = 20.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.2)
    return False


def test_alerts_routed_on_by_a_real_alertmanager(store, alertmanager):
    url, hook = alertmanager
    receiver = build(ReceiverConfig(name="am", type="alertmanager", url=url))
    pipeline = AlertPipeline(store, AlertingConfig(group_wait_s=0, group_interval_s=0, default_receivers=["am"],
                                                   status_url="http://mgmt01:9470"))
    outbox = Outbox(store, {"am": receiver})
    now = time.time()
    inc = make_incident("sn01-b07/gpu3", at=now)
    store.record_tick([], [inc, make_incident("sn01-b08/gpu1", at=now)])
    pipeline.step(now)
    assert outbox.deliver(now)["delivered"] == 1
    assert wait_for(lambda: any(r.json()["status"] == "firing" for r in hook.received))
    body = next(r.json() for r in hook.received if r.json()["status"] == "firing")
    assert body["version"] == "4" and body["groupLabels"] == {"rack": "r01", "category": "gpu_memory"}
    assert sorted(a["labels"]["entity"] for a in body["alerts"]) == ["sn01-b07/gpu3", "sn01-b08/gpu1"]
    assert body["alerts"][0]["generatorURL"].startswith("http://mgmt01:9470/incidents/inc-")
    assert "raswarden silence add" in body["alerts"][0]["annotations"]["commands"]

    store.record_tick([], [close(inc, now + 1)])
    pipeline.step(now + 2)
    assert outbox.deliver(now + 2)["delivered"] == 1
    assert wait_for(lambda: any(a["status"] == "resolved" and a["labels"]["entity"] == "sn01-b07/gpu3"
                                for r in hook.received for a in r.json()["alerts"]))
