"""A real Prometheus scrapes the simulator's live exporters; series and labels look like the real exporters'."""

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from daemon.ingest.naming import host_of_instance
from daemon.topology import Topology
from tests.conftest import ports, require
from tests.lab.sim.conftest import SCENARIOS

DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def live(tmp_path):
    prometheus = shutil.which("prometheus")
    require(prometheus is not None, "prometheus is not installed (Debian package; scripts/test.sh installs it)")
    out = tmp_path / "live"
    sim = subprocess.Popen([sys.executable, "-m", "daemon", "simulate", str(SCENARIOS / "mini.yaml"), "--serve",
                            "--out", str(out), "--speed", "60", "--port-offset", str(ports())],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    port = free_port()
    prom = None
    try:
        deadline = time.monotonic() + 20
        while not (out / "prometheus-targets.json").exists():
            assert time.monotonic() < deadline, "the simulator did not start"
            time.sleep(0.1)
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 900ms}\n"
            "scrape_configs:\n"
            "  - job_name: sim\n"
            f"    file_sd_configs: [{{files: ['{out / 'prometheus-targets.json'}'], refresh_interval: 1s}}]\n")
        prom = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield out, f"http://127.0.0.1:{port}", sim
    finally:
        for proc in (prom, sim):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def test_prometheus_scrapes_the_live_exporters(live):
    out, api, sim = live
    deadline = time.monotonic() + 40
    while True:
        if sim.poll() is not None:
            pytest.fail(f"the simulator exited: {sim.stdout.read().decode()[-2000:]}")
        try:
            targets = get(f"{api}/api/v1/targets")["data"]["activeTargets"]
            if len(targets) == 8 and all(t["health"] == "up" for t in targets):
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "targets did not come up"
        time.sleep(0.5)
    deadline = time.monotonic() + 20
    while True:
        temps = get(f"{api}/api/v1/query?query=DCGM_FI_DEV_GPU_TEMP")["data"]["result"]
        ports = get(f"{api}/api/v1/query?query=node_infiniband_state_id")["data"]["result"]
        if len(temps) == 32 and len(ports) == 16:
            break
        assert time.monotonic() < deadline, (len(temps), len(ports))
        time.sleep(0.5)
    topo = Topology.load(out / "topology.yaml")
    for series in temps:
        labels = series["metric"]
        assert DCGM_LABELS <= set(labels)
        assert labels["job"] == "dcgm" and labels["pci_bus_id"].startswith("00000000:")
        assert topo.resolve_host(host_of_instance(labels["instance"])) == labels["Hostname"]
        assert 20 < float(series["value"][1]) < 100
    for series in ports:
        labels = series["metric"]
        assert {"device", "port", "instance", "job"} <= set(labels) and labels["device"].startswith("mlx5_")
        assert topo.resolve_host(host_of_instance(labels["instance"])).startswith("sn01-b0")
    counters = get(f"{api}/api/v1/query?query=node_infiniband_port_data_received_bytes_total")["data"]["result"]
    assert len(counters) == 16


def test_every_served_node_gets_a_valid_address_of_its_own():
    """(Node 256 was served on 127.1.0.256, so --serve failed beyond 255 blades.)"""
    import ipaddress

    from lab.sim.serve import MAX_NODES, loopback
    from lab.sim.layout import SimTopology

    addresses = [loopback(i) for i in range(MAX_NODES)]
    assert len(set(addresses)) == MAX_NODES
    assert all(ipaddress.ip_address(a).is_loopback and not a.endswith((".0", ".255")) for a in addresses)
    assert all(ipaddress.ip_address(SimTopology.address(None, i)).is_private for i in (0, 255, 256, 70000))


def test_a_mixed_vendor_rack_serves_each_vendors_own_exporter(tmp_path):
    """NVIDIA blades serve dcgm-exporter and node_exporter, AMD blades AMD's exporter and node_exporter, Ascend
    blades npu-exporter alone; the live scrape reader names every series through the name tables."""
    import numpy as np

    from daemon.ingest.formats import ReadContext
    from daemon.ingest.formats.openmetrics import parse_scrape_arrays
    from daemon.ingest.naming import SeriesMapper
    from lab.sim.simulator import Simulator
    from lab.sim.faults import load_library
    from lab.sim.scenario import Scenario
    from lab.sim.serve import JOBS, SimServer, loopback
    from tests.detectors.sim_helpers import LIBRARY

    sc = Scenario.from_dict({"name": "m", "seed": 5, "topology": {"preset": "scalex640-mixed", "accelerators": 72},
                             "duration": "10m", "resolution": "30s",
                             "jobs": {"nodes_per_job": [3, 3], "duration": ["1h", "1h"], "gap": ["1m", "1m"]}})
    server = SimServer(Simulator(sc, load_library(LIBRARY)), tmp_path / "live", speed=600.0, port_offset=ports())
    server.start()
    try:
        chunk = next(server.sim.chunks())
        server.state.set(chunk, 0)
        targets = json.loads((tmp_path / "live" / "prometheus-targets.json").read_text())
        jobs: dict[str, list[str]] = {}
        for group in targets:  # one group per exporter and rack, labelled with both
            assert group["labels"]["supernode"] == "sn01" and group["labels"]["rack"] == "r01"
            jobs.setdefault(group["labels"]["job"], []).extend(group["targets"])
        assert set(jobs) == set(JOBS.values()) and len(jobs["npu"]) == 3 and len(jobs["node"]) == 6
        topo = Topology.load(tmp_path / "live" / "topology.yaml")
        entities = set()
        for job, urls in jobs.items():
            for target in urls:
                raw = urllib.request.urlopen(f"http://{target}/metrics", timeout=5).read()
                ctx = ReadContext(mapper=SeriesMapper(topology=topo), target_labels={"instance": target, "job": job})
                sid, _, value = parse_scrape_arrays(raw, ctx, {}, target, 0.0)
                assert ctx.rejects.total == 0 and len(sid) and np.isfinite(value).all()
                ent_of, _, _ = ctx.mapper.series_table()
                entities |= {ctx.mapper.entities[e] for e in ent_of[sid]}
        assert loopback(0) in jobs["dcgm"][0] and "sn01-b09/npu7" in entities and "sn01-b09/hccn7:1" in entities
        assert "sn01-b04/gpu0" in entities and "sn01-b04/mlx5_7:1" in entities
    finally:
        server.shutdown()


def test_a_taken_port_is_a_clear_error_and_the_ports_can_move(tmp_path, capsys):
    from daemon.cli import main
    from lab.sim.serve import loopback

    scenario = tmp_path / "one-node.yaml"
    scenario.write_text("name: one\nseed: 3\ntopology: {preset: scalex640, accelerators: 8}\nduration: 2m\n"
                        "resolution: 30s\n")
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind((loopback(0), 9400 + ports(17)))
        taken.listen()
        assert main(["simulate", str(scenario), "--serve", "--out", str(tmp_path / "a"), "--speed", "600",
                     "--port-offset", str(ports(17))]) == 2
        err = capsys.readouterr().err
        assert f"cannot serve {loopback(0)}:{9400 + ports(17)}" in err and "--port-offset" in err
        assert "Traceback" not in err
        assert main(["simulate", str(scenario), "--serve", "--out", str(tmp_path / "b"), "--speed", "600",
                     "--port-offset", str(ports(27))]) == 0
    # the end is said, and how far a loaded machine left the simulated clock behind (a live test's evidence)
    assert re.search(r"one: played to its end; the simulated clock fell behind the wall clock by up to \d+\.\d s",
                     capsys.readouterr().out)
    targets = json.loads((tmp_path / "b" / "prometheus-targets.json").read_text())
    assert {t.rsplit(":", 1)[1] for group in targets for t in group["targets"]} == {str(9400 + ports(27)),
                                                                                     str(9100 + ports(27))}


def test_the_clock_passing_a_step_between_two_reads_does_not_end_the_simulator(tmp_path, monkeypatch):
    """The player read the clock twice per wait; a loaded machine passed the step's time between the two reads and
    the simulator ended on a negative sleep (CI, stop 51). A clock that moves on every read plays to the end."""
    from lab.sim.faults import load_library
    from lab.sim.scenario import Scenario
    from lab.sim.serve import SimServer
    from lab.sim.simulator import Simulator
    from tests.detectors.sim_helpers import LIBRARY

    sc = Scenario.from_dict({"name": "c", "seed": 2, "topology": {"accelerators": 8}, "duration": "5m",
                             "resolution": "30s"})
    server = SimServer(Simulator(sc, load_library(LIBRARY)), tmp_path / "live", speed=600.0)
    server.write_files()
    reads = iter(range(10**6))
    monkeypatch.setattr("lab.sim.serve.time.monotonic", lambda: next(reads) * 0.013)  # each read 13 ms on
    server.run()
    assert server.ended and server.max_lag_s >= 0.0
