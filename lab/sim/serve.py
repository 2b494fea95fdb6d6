"""Live, time-accelerated exporters for a simulation (``raswarden simulate SCENARIO --serve``).

Per node, on a loopback address of its own, its vendor's exporter (dcgm-exporter ``http://127.0.X.Y:9400/metrics``,
AMD's device-metrics-exporter ``:5000``, Ascend's npu-exporter ``:8082``, which also carries the NPUs' own
ports) and, for nodes with host NICs, a node_exporter (``:9100``), serving the Prometheus text format (HELP,
TYPE, no timestamps) with the exporters' metric and label names, and the kernel log growing as a journald JSON
export. Simulated time runs ``speed`` times faster than the wall clock; an endpoint serves the values of
the latest simulated step. What is served is live: kernel log records and ``labels.jsonl`` are stamped with
the wall-clock time at which the simulated moment is played (``start + (t - scenario start) / speed``), as a
real node's journal would be, so a live raswarden takes them as current. ``topology.yaml`` maps the
loopback addresses to node names (aliases) and ``prometheus-targets.json`` lists the endpoints in
Prometheus' file_sd format.
"""

from __future__ import annotations

import json
import logging
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


import numpy as np

from lab.sim.batches import emission
from lab.sim.simulator import GPU_COUNTERS, PORT_COUNTERS, STILL_REPORTED, SimChunk, Simulator
from lab.sim.exporter_names import EXPORTER_PORTS, published_families
from lab.sim.layout import host_octets

log = logging.getLogger("raswarden.sim.serve")
DCGM_PORT, NODE_PORT = EXPORTER_PORTS["dcgm-exporter.om"], EXPORTER_PORTS["node-exporter.om"]
JOBS = {"dcgm-exporter.om": "dcgm", "amd-device-metrics-exporter.om": "amd", "npu-exporter.om": "npu",
        "node-exporter.om": "node"}
MAX_NODES = 65_000


def loopback(node_index: int) -> str:
    """The loopback address of a node's exporters: 127.1.0.1 .. 127.1.0.254, 127.1.1.1, ..."""
    a, b, c = host_octets(node_index).split(".")
    return f"127.{1 + int(a)}.{b}.{c}"


class LiveState:
    """The latest simulated step, shared between the clock thread and the HTTP handlers."""

    def __init__(self, sim: Simulator):
        self.sim = sim
        self.lock = threading.Lock()
        self.chunk: SimChunk | None = None
        self.step = 0
        self.now = sim.scenario.start
        # Exporters publish no instance/job: Prometheus attaches those when it scrapes.
        self.families, _ = published_families(sim, emission(sim, sim.scenario.profile), scraped=False)
        topo = sim.topo
        # node -> exporter file -> [(family, positions of the node's rows in family.rows)]
        self.by_node: list[dict[str, list]] = [{} for _ in range(topo.n_nodes)]
        for f in self.families:
            node = f.rows // (topo.gpus_per_node if f.is_gpu else topo.ports_per_node)
            for n in np.unique(node):
                self.by_node[int(n)].setdefault(f.path, []).append((f, np.flatnonzero(node == n)))

    def set(self, chunk: SimChunk, step: int) -> None:
        with self.lock:
            self.chunk, self.step, self.now = chunk, step, float(chunk.ts[step])

    def exporters(self, n: int) -> list[str]:
        """The exporter files (kinds) node ``n`` serves, in a stable order."""
        return list(self.by_node[n])

    def text(self, n: int, path: str) -> str:
        """Node ``n``'s exporter ``path`` at the current step, in the Prometheus text format."""
        with self.lock:
            chunk, j = self.chunk, self.step
        if chunk is None:
            return ""
        out = []
        for f, at in self.by_node[n].get(path, []):
            rows = f.rows[at]
            values, present = ((chunk.gpu[f.metric], chunk.gpu_present) if f.is_gpu
                               else (chunk.port[f.metric], chunk.port_present))
            keep = np.ones(len(rows), dtype=bool) if f.metric in STILL_REPORTED else present[rows, j]
            published = f.source.values(values[rows, j].astype(np.float64))
            keep &= ~np.isnan(published)
            kind = "counter" if f.metric in GPU_COUNTERS or f.metric in PORT_COUNTERS else "gauge"
            out.append(f"# HELP {f.source.name} {f.metric} (raswarden simulator).\n# TYPE {f.source.name} {kind}\n")
            out.extend(f"{p}{v:.15g}\n" for p, v in zip(f.prefixes[at][keep], published[keep].tolist()))
        return "".join(out)

    def node_present(self, n: int, path: str) -> bool:
        """False while the node's exporter is down (reboot, maintenance, exporter gap)."""
        topo = self.sim.topo
        with self.lock:
            chunk, j = self.chunk, self.step
        if chunk is None:
            return True
        if path != "node-exporter.om":
            return bool(chunk.gpu_present[n * topo.gpus_per_node : (n + 1) * topo.gpus_per_node, j].any())
        return bool(chunk.port_present[n * topo.ports_per_node : (n + 1) * topo.ports_per_node, j].any())


def _handler(state: LiveState, n: int, path: str):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            if not state.node_present(n, path):
                # An exporter that is down does not answer; closing the connection is the closest.
                self.close_connection = True
                return
            body = state.text(n, path).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            log.debug("%s %s", self.address_string(), fmt % args)

    return Handler


class _ExporterServer(ThreadingHTTPServer):
    """An HTTP server that does not look its own address up: ``HTTPServer.server_bind`` calls
    ``socket.getfqdn``, a reverse-DNS query per server, which made starting 2,500 endpoints take minutes."""

    daemon_threads = True

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class SimServer:
    """Runs the simulation against the wall clock and serves it."""

    def __init__(self, sim: Simulator, out: Path, speed: float = 60.0, port_offset: int = 0):
        if sim.topo.n_nodes > MAX_NODES:
            raise ValueError(f"--serve supports up to {MAX_NODES} nodes")
        if not 0 <= port_offset <= 65535 - max(EXPORTER_PORTS.values()):
            raise ValueError(f"--port-offset {port_offset}: the exporters' ports would leave 1-65535")
        self.sim, self.out, self.speed = sim, out, speed
        self.ports = {path: port + port_offset for path, port in EXPORTER_PORTS.items()}
        self.state = LiveState(sim)
        self.servers: list[ThreadingHTTPServer] = []
        self.stop = threading.Event()
        self.epoch0 = time.time()
        self.max_lag_s = 0.0
        """The most a simulated step was played after its wall-clock time (a loaded machine falls behind)."""
        self.ended = False
        """True once the scenario was played to its end (not stopped)."""

    def wall_of(self, t: float) -> float:
        """The wall-clock time at which simulated time ``t`` is played."""
        return self.epoch0 + (t - self.sim.scenario.start) / self.speed

    def write_files(self) -> None:
        topo, out = self.sim.topo, self.out
        out.mkdir(parents=True, exist_ok=True)
        doc = topo.to_dict(lambda n, g: f"GPU-{self.sim.uuids[n * topo.gpus_per_node + g]}")
        index = {name: i for i, name in enumerate(topo.nodes)}
        for rack in doc["racks"]:
            for node in rack["nodes"]:
                node["aliases"] = [loopback(index[node["name"]])]
        import yaml

        (out / "topology.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
        # one target group per exporter and rack, labelled as operators label theirs (file_sd or relabelling), so
        # a shard's PromQL matchers can select its part of the cluster (supernode="sn01")
        groups: dict[tuple[str, int], list[str]] = {}
        for i in range(topo.n_nodes):
            for path in self.state.exporters(i):
                groups.setdefault((path, int(topo.node_rack[i])), []).append(f"{loopback(i)}:{self.ports[path]}")
        targets = [{"targets": t, "labels": {"job": JOBS[path], "rack": topo.racks[r],
                                             "supernode": topo.supernode_of_rack[r]}}
                   for (path, r), t in groups.items()]
        (out / "prometheus-targets.json").write_text(json.dumps(targets, indent=1))
        with open(out / "labels.jsonl", "w") as fh:
            for label in self.sim.labels():
                label = dict(label, onset=self.wall_of(label["onset"]))
                if label.get("failure") is not None:
                    label["failure"] = self.wall_of(label["failure"])
                fh.write(json.dumps(label) + "\n")

    def start(self) -> None:
        """Write the files and start every endpoint; an address that cannot be bound (another simulator or exporter
        holds it) stops the ones started and is a ValueError naming it."""
        self.epoch0 = time.time()
        self.write_files()
        for i in range(self.sim.topo.n_nodes):
            for path in self.state.exporters(i):
                address = (loopback(i), self.ports[path])
                try:
                    srv = _ExporterServer(address, _handler(self.state, i, path))
                except OSError as exc:
                    self.shutdown()
                    raise ValueError(f"cannot serve {address[0]}:{address[1]}: {exc.strerror or exc} (another "
                                     "simulator or exporter holds it? --port-offset moves every exporter's port)"
                                     ) from None
                threading.Thread(target=srv.serve_forever, daemon=True, name=f"{JOBS[path]}-{i}").start()
                self.servers.append(srv)

    def run(self) -> None:
        """Advance simulated time with the wall clock until the scenario ends or :attr:`stop` is set."""
        sc = self.sim.scenario
        wall0 = time.monotonic()
        with open(self.out / "kernel.journal.json", "w", buffering=1) as journal:
            for chunk in self.sim.chunks():
                lines = list(chunk.lines)
                for j, ts in enumerate(chunk.ts):
                    due = wall0 + (ts - sc.start) / self.speed
                    # the clock is read once per wait: read twice, it can pass `due` between the reads and
                    # leave a negative sleep (which ended a live simulator, and a CI run, on a loaded machine)
                    ahead = due - time.monotonic()
                    self.max_lag_s = max(self.max_lag_s, -ahead)
                    if ahead > 0 and self.stop.wait(ahead) or self.stop.is_set():
                        return
                    while lines and lines[0][0] <= ts:
                        t, node, line = lines.pop(0)
                        stamp = str(int(round(self.wall_of(t) * 1e6)))
                        journal.write(json.dumps({"__REALTIME_TIMESTAMP": stamp, "_HOSTNAME": node,
                                                  "_TRANSPORT": "kernel", "SYSLOG_IDENTIFIER": "kernel",
                                                  "MESSAGE": line}) + "\n")
                    self.state.set(chunk, j)
        self.ended = True

    def shutdown(self) -> None:
        self.stop.set()
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()


def serve(sim: Simulator, out: Path, speed: float, port_offset: int = 0) -> SimServer:
    """Serve until the scenario ends or the process is interrupted; the server, stopped."""
    server = SimServer(sim, out, speed, port_offset)
    server.start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return server
