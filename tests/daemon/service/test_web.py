"""The HTTP side of a running service: JSON API, /healthz turning 503, and the status page in a real
headless Chromium (a screenshot is taken and kept beside the test's files)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from daemon.config import load
from daemon.service import Service
from daemon.web import heatmap_svg
from tests.conftest import require
from tests.daemon.service.conftest import free_port, get
from tests.daemon.service.test_service import until



def test_heatmap_has_a_tile_per_node_and_a_cell_per_accelerator():
    entities = [{"id": "n1", "kind": "node", "node": "n1", "rack": "r1", "state": "subhealthy"}]
    entities += [{"id": f"n1/gpu{i}", "kind": "accelerator", "node": "n1", "rack": "r1",
                  "state": "failed" if i == 3 else "healthy"} for i in range(8)]
    svg = heatmap_svg(entities)
    assert svg.count("<title>n1/gpu") == 8 and "<title>n1/gpu3: failed</title>" in svg
    assert 'fill="#c62828"' in svg and "<title>n1: subhealthy</title>" in svg


def test_api_health_and_the_status_page_in_chromium(live, tmp_path):
    port = free_port()
    svc = Service(load(live.config(port=port)))
    svc.start()
    base = f"http://127.0.0.1:{port}"
    try:
        def gpu5_failed():
            h = svc.pipeline.health.entities.get("sn01-b02/gpu5")
            return h is not None and h.state.label == "failed"

        until(gpu5_failed, timeout=90)
        code, body = get(f"{base}/api/v1/entities")
        entities = {e["id"]: e for e in json.loads(body)}
        assert code == 200 and entities["sn01-b02/gpu5"]["state"] == "failed"
        assert entities["sn01-b01/gpu0"]["state"] in ("healthy", "suspect") and entities["sn01-b01"]["rack"]
        code, body = get(f"{base}/api/v1/incidents?status=open")
        assert code == 200 and any(i["entity"] == "sn01-b02/gpu5" for i in json.loads(body))
        # the incident's own page, the link in its alert: where, evidence, findings, what to do
        incident = next(i for i in json.loads(body) if i["entity"] == "sn01-b02/gpu5")
        code, page = get(f"{base}/incidents/{incident['id']}")
        page = page.decode()
        assert code == 200 and "sn01-b02/gpu5 has failed" in page and "<th>UUID</th><td>GPU-" in page, page[:2000]
        assert "<th>PCI</th>" in page and "reseat the GPU" in page and "raswarden silence add" in page
        assert re.search(r"Findings \([1-9]\d*, from an hour before it opened\)", page)
        assert get(f"{base}/incidents/inc-nope")[0] == 404
        assert get(f"{base}/api/v1/actions")[0] == 200 and get(f"{base}/nope")[0] == 404
        code, body = get(f"{base}/healthz")
        assert code == 200 and json.loads(body)["active"] is True

        chromium = shutil.which("chromium")
        require(chromium is not None, "chromium is not installed (Debian package; scripts/test.sh installs it)")
        shot = tmp_path / "status.png"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1280,900"]
        subprocess.run([chromium, *flags, f"--screenshot={shot}", f"{base}/"], capture_output=True, timeout=120)
        assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        dom = subprocess.run([chromium, *flags, "--dump-dom", f"{base}/"], capture_output=True, text=True,
                             timeout=120).stdout
        assert "sn01-b02/gpu5: failed" in dom and len(re.findall(r"<title>sn01-b0\d/gpu\d+:", dom)) == 16
        assert "Open incidents" in dom and "sn01-b02/gpu5" in dom

        # the exporters vanish: the collectors fail and /healthz says so
        live.stop()
        time.sleep(3)
        until(lambda: get(f"{base}/healthz")[0] == 503, timeout=30)
        assert "collector exporters" in json.loads(get(f"{base}/healthz")[1])["problems"][0]
    finally:
        svc.stop()


def test_idle_clients_cannot_starve_the_endpoint():
    """Connections that send nothing hold every slot: one more is answered 503 at once (not left waiting), and
    once the idle ones time out, the endpoint answers again."""
    import socket
    import time
    import urllib.error
    import urllib.request

    from daemon import metrics
    from daemon.config import HttpConfig
    from daemon.web import WebServer

    web = WebServer(None, HttpConfig(listen="127.0.0.1:0", max_connections=4, request_timeout_s=1.0))
    web.start()
    idle = []
    try:
        refused = metrics.HTTP_REFUSED._value.get()
        for _ in range(4):
            idle.append(socket.create_connection(tuple(web.server.server_address[:2])))
        time.sleep(0.2)
        started = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as busy:
            urllib.request.urlopen(f"http://{web.address}/metrics", timeout=5)
        assert busy.value.code == 503 and busy.value.headers["Retry-After"] == "1"
        assert time.monotonic() - started < 0.9 and metrics.HTTP_REFUSED._value.get() == refused + 1
        time.sleep(1.5)  # the idle ones are closed by the request timeout
        with urllib.request.urlopen(f"http://{web.address}/metrics", timeout=5) as r:
            assert r.status == 200 and b"raswarden_http_connections_refused_total" in r.read()
        assert all(s.recv(1) == b"" for s in idle)  # closed by the server
    finally:
        for s in idle:
            s.close()
        web.stop()
