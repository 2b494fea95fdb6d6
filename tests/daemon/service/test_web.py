"""The HTTP side of a running service: JSON API, /healthz turning 503, and the status page in a real
headless Chromium (a screenshot is taken and kept beside the test's files)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

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
