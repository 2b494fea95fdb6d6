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
from daemon.service.service import Service
from daemon.web.pages import heatmap_svg
from tests.conftest import require
from tests.daemon.service.conftest import dead_target_config, free_port, get
from tests.daemon.service.test_service import until



def test_heatmap_has_a_tile_per_node_and_a_cell_per_accelerator():
    entities = [{"id": "n1", "kind": "node", "node": "n1", "rack": "r1", "state": "subhealthy"}]
    entities += [{"id": f"n1/gpu{i}", "kind": "accelerator", "node": "n1", "rack": "r1",
                  "state": "failed" if i == 3 else "healthy"} for i in range(8)]
    entities += [{"id": f"n1/mlx5_{i}:1", "kind": "port", "node": "n1", "rack": "r1",
                  "state": "healthy"} for i in range(8)]
    svg = heatmap_svg(entities)
    assert svg.count("<title>n1/gpu") == 8 and "<title>n1/gpu3: failed</title>" in svg
    assert svg.count("<title>n1/mlx5_") == 8
    # the tile's header is the worst of the node and its parts; its tooltip names the parts not healthy
    assert '<title>n1: subhealthy\nn1/gpu3: failed</title>' in svg


def test_a_failed_port_shows_on_its_blade_and_a_big_cluster_is_one_square_per_node():
    def blade(n: int, port_state: str = "healthy") -> list[dict]:
        node = f"sn{n // 80 + 1:02d}-b{n % 80 + 1:02d}"
        rack = f"r{n // 80 + 1:02d}"
        out = [{"id": node, "kind": "node", "node": node, "rack": rack, "state": "healthy"}]
        out += [{"id": f"{node}/gpu{i}", "kind": "accelerator", "node": node, "rack": rack, "state": "healthy"}
                for i in range(8)]
        out += [{"id": f"{node}/mlx5_{i}:1", "kind": "port", "node": node, "rack": rack,
                 "state": port_state if i == 2 else "healthy"} for i in range(8)]
        return out

    svg = heatmap_svg(blade(0) + blade(1, "failed"))
    red = 'height="5" fill="#c62828"/></g>'  # a tile's header in the failed colour
    assert svg.count(red) == 1 and "<title>sn01-b02: healthy\nsn01-b02/mlx5_2:1: failed</title>" in svg
    # 16 supernodes of 80 blades: one square per blade, racks labelled with their size
    big = heatmap_svg([e for n in range(16 * 80) for e in blade(n, "failed" if n == 700 else "healthy")])
    assert big.count("<rect") == 1280 and "r16 (80 nodes)" in big and big.count('fill="#c62828"') == 1
    assert "sn09-b61: healthy\nsn09-b61/mlx5_2:1: failed" in big


def test_api_health_and_the_status_page_in_chromium(live, tmp_path):
    port = free_port()
    svc = Service(load(live.config(port=port)))
    svc.start()
    base = f"http://127.0.0.1:{port}"
    try:
        def gpu5_open():
            # through the API, not the pipeline's memory: the tick's health changes before its store write
            code, body = get(f"{base}/api/v1/incidents?status=open")
            return code == 200 and any(i["entity"] == "sn01-b02/gpu5" for i in json.loads(body))

        until(gpu5_open, timeout=90)
        code, body = get(f"{base}/api/v1/entities")
        entities = {e["id"]: e for e in json.loads(body)}
        assert code == 200 and entities["sn01-b02/gpu5"]["state"] == "failed"
        assert entities["sn01-b01/gpu0"]["state"] in ("healthy", "suspect") and entities["sn01-b01"]["rack"]
        code, body = get(f"{base}/api/v1/incidents?status=open")
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


def _chromium(url: str, shot, profile) -> str:
    """A screenshot (checked to be a real PNG) and the DOM of ``url`` in headless Chromium."""
    chromium = shutil.which("chromium")
    require(chromium is not None, "chromium is not installed (Debian package; scripts/test.sh installs it)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1280,900"]
    subprocess.run([chromium, *flags, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    return subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout


@pytest.mark.parametrize("supernodes", [1, 16])
def test_the_status_page_at_one_and_at_sixteen_supernodes_in_chromium(tmp_path, supernodes):
    """80 blades, then 1,280 (16 scaleX640 supernodes), each with 8 GPUs and 8 fabric ports, one port failed and two
    nodes silent; the exporters' endpoint is dead. The page shows the failed port on its blade, the lost telemetry
    in a banner, and stays one screen wide."""
    port = free_port()
    config, _ = dead_target_config(tmp_path, port)
    svc = Service(load(config))
    rows, health = [], []
    for n in range(80 * supernodes):
        node, rack = f"sn{n // 80 + 1:02d}-b{n % 80 + 1:02d}", f"r{n // 80 + 1:02d}"
        rows.append({"id": node, "kind": "node", "node": node, "rack": rack, "first_seen": 0.0})
        rows += [{"id": f"{node}/gpu{i}", "kind": "accelerator", "node": node, "rack": rack, "first_seen": 0.0}
                 for i in range(8)]
        rows += [{"id": f"{node}/mlx5_{i}:1", "kind": "port", "node": node, "rack": rack, "first_seen": 0.0}
                 for i in range(8)]
    svc.store.upsert_entities(rows)
    failed_port = "sn01-b33/mlx5_2:1"
    health = [{"entity": failed_port, "state": "failed", "since": 0.0},
              {"entity": "sn01-b40", "state": "unknown", "since": 0.0},
              {"entity": "sn01-b41", "state": "unknown", "since": 0.0}]
    svc.store.record_tick([], [], health=health)
    svc.start()
    try:
        until(lambda: svc.last.finished_at > 0, timeout=30)  # a cycle ran: its collector failed
        dom = _chromium(f"http://127.0.0.1:{port}/", tmp_path / "status.png", tmp_path / "chromium")
        assert "TELEMETRY LOST" in dom and "collector exporters" in dom
        assert f"2 of {80 * supernodes} nodes report no telemetry: sn01-b40, sn01-b41" in dom
        assert f"sn01-b33: healthy\n{failed_port}: failed" in dom  # the blade shows its failed port
        width = int(re.search(r'<svg[^>]*width="(\d+)"', dom).group(1))
        assert width <= 1250, width  # one screen wide at either size
        if supernodes == 16:
            assert "r16 (80 nodes)" in dom and dom.count("<rect") == 1280
        else:
            assert len(re.findall(r"<title>sn01-b\d\d/gpu\d:", dom)) == 640
    finally:
        svc.stop()


def test_the_repair_queue_in_the_api_and_on_the_status_page(tmp_path):
    """Orders listed (the queue, or all), a technician's start and done through the API (the token asked for, a
    refused change a 409, an unknown order a 404), and the queue on the status page with its age and identity."""
    from daemon.judgement.incidents import Incident
    from detectors.schema import State
    from tests.daemon.service.test_run_process import post

    port = free_port()
    (tmp_path / "token").write_text("tok-42\n")
    (tmp_path / "token").chmod(0o600)
    (tmp_path / "rw.toml").write_text(f'[store]\nurl = "sqlite:///{tmp_path / "rw.db"}"\n'
                                      f'[http]\nlisten = "127.0.0.1:{port}"\ntoken_file = "{tmp_path / "token"}"\n')
    svc = Service(load(tmp_path / "rw.toml"))
    svc.start()
    base = f"http://127.0.0.1:{port}"
    try:
        svc.store.record_tick([], [Incident("inc-r1", "fp-r1", "sn01-b03/gpu4", "accelerator", "gpu_bus",
                                            State.FAILED, 100.0, 100.0, rack="r01", evidence=["Xid 79"])], now=100.0)
        (order,) = svc.remediation.repairs.open_for("inc-r1")
        code, body = get(f"{base}/api/v1/repairs")
        listed = json.loads(body)
        assert code == 200 and [(o["id"], o["part"], o["expected"]) for o in listed] == [
            (order.id, "sn01-b03/gpu4", "reseat")]
        assert post(f"{base}/api/v1/repairs/{order.id}/start", {"by": "dana"})[0] == 401  # no token
        code, row = post(f"{base}/api/v1/repairs/{order.id}/start", {"by": "dana"}, token="tok-42")
        assert code == 200 and row["state"] == "in_progress" and row["history"][-1]["by"] == "dana"
        code, row = post(f"{base}/api/v1/repairs/{order.id}/done", {"by": "dana", "part_serial": "1653"},
                         token="tok-42")
        assert code == 200 and row["state"] == "repaired" and row["new_serial"] == "1653"
        code, err = post(f"{base}/api/v1/repairs/{order.id}/start", {}, token="tok-42")
        assert code == 409 and "is repaired" in err["error"]
        assert post(f"{base}/api/v1/repairs/999/start", {}, token="tok-42")[0] == 404
        assert post(f"{base}/api/v1/repairs/x/start", {}, token="tok-42")[0] == 404
        code, page = get(f"{base}/")
        page = page.decode()
        assert "Repair queue (1)" in page and "sn01-b03/gpu4" in page and "reseat" in page
        assert "last 30 days: 1 repair orders, 0 % before failure" in page
        assert '<a href="/incidents/inc-r1">' in page
        code, own = get(f"{base}/repairs/{order.id}")  # the order's page, the link in its chat message
        own = own.decode()
        assert code == 200 and f"Repair order {order.id}: reseat sn01-b03/gpu4" in own and "reseat it" in own
        assert "in_progress → repaired" in own and "dana" in own and "new part serial 1653" in own
        assert get(f"{base}/repairs/999")[0] == 404 and get(f"{base}/repairs/x")[0] == 404
        assert "Idle checks" not in page  # off, and none ever ran
        from daemon.store import IdleCheckRow

        with svc.store.session() as s:
            s.add(IdleCheckRow(node="node3", checks=2, status="failed", job="41", reservation="raswarden-check-node3",
                               started_at=200.0, checked_at=260.0, result="dcgmi diag: exit status 1"))
            s.add(IdleCheckRow(node="node1", checks=1, status="running", job="42",
                               reservation="raswarden-check-node1", started_at=300.0))
            s.commit()
        assert [(c["node"], c["status"]) for c in json.loads(get(f"{base}/api/v1/idle-checks")[1])] == [
            ("node1", "running"), ("node3", "failed")]
        page = get(f"{base}/")[1].decode()
        assert "Idle checks (2 nodes, 1 failed)" in page and "dcgmi diag: exit status 1" in page
        svc.remediation.repairs.move(order.id, "validating", "raswarden")
        svc.remediation.repairs.move(order.id, "closed", "raswarden")
        assert json.loads(get(f"{base}/api/v1/repairs")[1]) == []
        assert [o["state"] for o in json.loads(get(f"{base}/api/v1/repairs?state=all")[1])] == ["closed"]
    finally:
        svc.stop()


def test_checkpoint_advice_in_the_api_on_metrics_and_in_files(tmp_path, http_server):
    """The service's advice job (daemon/operations/advice.py): every running opted-in job advised, on /api/v1/advice,
    its own
    path, /metrics, the status page and a file per job; when its exporter stops answering, the next cycle turns
    every job's advice to the safe interval at once (not at the next hourly advice), and back when it answers again.
    The scheduler is the project's simulated Slurm (tests/playbooks/test_slurm_advice.py has the real one)."""
    from lab.sim.cluster import SimJob, SimScheduler

    target, pages = http_server()
    pages.set("/metrics", "# TYPE node_boot_time_seconds gauge\nnode_boot_time_seconds 1.7e9\n")
    port = free_port()
    advice_dir = tmp_path / "advice"
    (tmp_path / "a.toml").write_text(f'[store]\nurl = "sqlite:///{tmp_path / "a.db"}"\n'
                                     f'[service]\ninterval_s = 0.5\n[http]\nlisten = "127.0.0.1:{port}"\n'
                                     f'[advice]\ndirectory = "{advice_dir}"\nevery_s = 3600.0\n'
                                     f'[[collectors]]\ntype = "exposition"\nname = "exporters"\n'
                                     f'targets = ["{target}"]\ntimeout_s = 5\n')
    svc = Service(load(tmp_path / "a.toml"))
    sched = SimScheduler([f"node{i}" for i in range(1, 5)])
    sched.submit(SimJob("j1", 2, 1e6, opt_in=True, comment="raswarden:checkpoint cost=90"))
    sched.submit(SimJob("j2", 1, 1e6, opt_in=False))
    sched.step(0.0)
    svc.remediation.engine.scheduler = sched
    svc.start()
    base = f"http://127.0.0.1:{port}"

    def advised() -> dict:
        code, body = get(f"{base}/api/v1/advice/j1")
        return json.loads(body) if code == 200 else {}

    try:
        until(lambda: svc.active and svc.last.outcomes.get("exporters") and svc.last.outcomes["exporters"].ok)
        until(lambda: advised().get("interval_s"))
        advice = svc.advise()
        assert set(advice) == {"j1"} and advice["j1"].checkpoint_cost_s == 90.0 and not advice["j1"].safe
        code, body = get(f"{base}/api/v1/advice")
        data = json.loads(body)
        assert code == 200 and data["jobs"]["j1"]["interval_s"] == round(advice["j1"].interval_s, 1)
        assert data["foresight"]["hard_failures"] == 0 and data["foresight"]["per_node_year"]["all"] == 1.4
        assert advised()["cost_from"] == "declared"
        assert get(f"{base}/api/v1/advice/j2")[0] == 404  # not opted in
        metrics = get(f"{base}/metrics")[1].decode()
        assert re.search(r'raswarden_checkpoint_advice_seconds\{task="j1"\} \d', metrics)
        assert "raswarden_checkpoint_advice_safe 0.0" in metrics
        assert json.loads((advice_dir / "j1.json").read_text())["job"] == "j1"
        page = get(f"{base}/")[1].decode()
        assert "Checkpoint advice (1 jobs)" in page and "<td>j1</td><td>2</td>" in page and "90 s (declared)" in page
        pages.set("/metrics", "exporter broken", status=500)
        safe = until(lambda: advised().get("safe") and advised(), timeout=20)
        assert "collector exporters failing" in safe["why"]
        assert safe["interval_s"] == round(advice["j1"].safe_interval_s, 1) <= round(advice["j1"].interval_s, 1)
        assert json.loads((advice_dir / "j1.json").read_text())["safe"] is True
        assert "raswarden_checkpoint_advice_safe 1.0" in get(f"{base}/metrics")[1].decode()
        pages.set("/metrics", "# TYPE node_boot_time_seconds gauge\nnode_boot_time_seconds 1.7e9\n")
        until(lambda: advised().get("safe") is False, timeout=20)
        # a directory that cannot be written (here: a file in its place): said and counted, the advice goes on
        svc.cfg.advice.directory = str(tmp_path / "a.toml")
        assert svc.advise()["j1"].interval_s > 0
        assert re.search(r"raswarden_checkpoint_advice_file_errors_total [1-9]", get(f"{base}/metrics")[1].decode())
    finally:
        svc.stop()


def test_advice_waits_quietly_for_a_scheduler_that_does_not_answer(tmp_path, caplog):
    """A Slurm that cannot be reached: no advice, one warning naming why, nothing raised out of the cycle (under
    systemd the advice job's traceback came every 5 minutes). The scheduler raises as the Slurm adapter does when
    its controller is gone (tests/playbooks/test_slurm.py test_unreachable_controller_is_retryable)."""
    import logging

    from playbooks.scheduler import SchedulerError

    class Unreachable:
        def snapshot(self):
            raise SchedulerError("squeue: slurm_load_jobs error: Unable to contact slurm controller", retryable=True)

    (tmp_path / "s.toml").write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n'
                                     f'[http]\nlisten = "127.0.0.1:{free_port()}"\n')
    svc = Service(load(tmp_path / "s.toml"))
    svc.remediation.engine.scheduler = Unreachable()
    try:
        with caplog.at_level(logging.WARNING, logger="raswarden.service"):
            assert svc.cycle() is not None and svc.active  # the cycle's first advice meets the refusal
            assert svc.advise() is None and svc.advise() is None
        said = [r.getMessage() for r in caplog.records if "checkpoint advice" in r.getMessage()]
        assert len(said) == 1 and "the scheduler did not answer: squeue" in said[0], said
        assert svc.advisor.last == {}
    finally:
        svc.stop()
