"""Live, time-accelerated exporters for a simulation (``raswarden simulate SCENARIO --serve``).

Per node, a dcgm-exporter-like endpoint (``http://127.0.X.Y:9400/metrics``) and a node_exporter-like one
(``:9100``) on a loopback address of its own, serving the Prometheus text format (HELP, TYPE, no
timestamps) with the exporters' metric and label names, and the kernel log growing as a journald JSON
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


from daemon.sim.engine import GPU_COUNTERS, PORT_COUNTERS, SimChunk, Simulator, emitted_metrics
from daemon.sim.exposition import dcgm_labels, port_labels, reverse_names, to_source
from daemon.sim.topology import host_octets

log = logging.getLogger("raswarden.sim.serve")
DCGM_PORT, NODE_PORT = 9400, 9100
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
        dcgm, node = reverse_names("dcgm_exporter.csv"), reverse_names("node_exporter.csv")
        gpu_metrics, port_metrics = emitted_metrics(sim.scenario.profile)
        self.gpu_families = [(m, *dcgm[m]) for m in gpu_metrics]
        self.port_families = [(m, *node[m]) for m in port_metrics]
        # Exporters publish no instance/job: Prometheus attaches those when it scrapes.
        self.gpu_labels = [dcgm_labels(sim, i, scraped=False) for i in range(sim.topo.n_gpus)]
        self.port_labels = [port_labels(sim, i, scraped=False) for i in range(sim.topo.n_ports)]

    def set(self, chunk: SimChunk, step: int) -> None:
        with self.lock:
            self.chunk, self.step, self.now = chunk, step, float(chunk.ts[step])

    def dcgm_text(self, n: int) -> str:
        topo = self.sim.topo
        with self.lock:
            chunk, j = self.chunk, self.step
        if chunk is None:
            return ""
        rows = [i for i in range(n * topo.gpus_per_node, (n + 1) * topo.gpus_per_node) if chunk.gpu_present[i, j]]
        out = []
        for metric, name, mask in self.gpu_families:
            kind = "counter" if metric in GPU_COUNTERS else "gauge"
            out.append(f"# HELP {name} {metric} (raswarden simulator).\n# TYPE {name} {kind}\n")
            values = to_source(chunk.gpu[metric][rows, j], mask)
            out.extend(f"{name}{{{self.gpu_labels[i]}}} {v:.15g}\n" for i, v in zip(rows, values.tolist()))
        return "".join(out)

    def node_text(self, n: int) -> str:
        topo = self.sim.topo
        with self.lock:
            chunk, j = self.chunk, self.step
        if chunk is None:
            return ""
        rows = [i for i in range(n * topo.ports_per_node, (n + 1) * topo.ports_per_node) if chunk.port_present[i, j]]
        out = []
        for metric, name, _ in self.port_families:
            kind = "counter" if metric in PORT_COUNTERS else "gauge"
            out.append(f"# HELP {name} {metric} (raswarden simulator).\n# TYPE {name} {kind}\n")
            out.extend(f"{name}{{{self.port_labels[i]}}} {float(chunk.port[metric][i, j]):.15g}\n" for i in rows)
        return "".join(out)

    def node_present(self, n: int, exporter: str) -> bool:
        """False while the node's exporter is down (reboot, maintenance, exporter gap)."""
        topo = self.sim.topo
        with self.lock:
            chunk, j = self.chunk, self.step
        if chunk is None:
            return True
        if exporter == "dcgm":
            return bool(chunk.gpu_present[n * topo.gpus_per_node : (n + 1) * topo.gpus_per_node, j].any())
        return bool(chunk.port_present[n * topo.ports_per_node : (n + 1) * topo.ports_per_node, j].any())


def _handler(state: LiveState, n: int, exporter: str):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            if not state.node_present(n, exporter):
                # An exporter that is down does not answer; closing the connection is the closest.
                self.close_connection = True
                return
            body = (state.dcgm_text(n) if exporter == "dcgm" else state.node_text(n)).encode()
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

    def __init__(self, sim: Simulator, out: Path, speed: float = 60.0):
        if sim.topo.n_nodes > MAX_NODES:
            raise ValueError(f"--serve supports up to {MAX_NODES} nodes")
        if sim.topo.vendors != ("nvidia",):
            raise ValueError("--serve serves dcgm-exporter and node_exporter endpoints; a topology with "
                             f"{', '.join(sim.topo.vendors)} accelerators is simulated with --format parquet")
        self.sim, self.out, self.speed = sim, out, speed
        self.state = LiveState(sim)
        self.servers: list[ThreadingHTTPServer] = []
        self.stop = threading.Event()
        self.epoch0 = time.time()

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
        targets = [{"targets": [f"{loopback(i)}:{DCGM_PORT}" for i in range(topo.n_nodes)],
                    "labels": {"job": "dcgm"}},
                   {"targets": [f"{loopback(i)}:{NODE_PORT}" for i in range(topo.n_nodes)], "labels": {"job": "node"}}]
        (out / "prometheus-targets.json").write_text(json.dumps(targets, indent=1))
        with open(out / "labels.jsonl", "w") as fh:
            for label in self.sim.labels():
                label = dict(label, onset=self.wall_of(label["onset"]))
                if label.get("failure") is not None:
                    label["failure"] = self.wall_of(label["failure"])
                fh.write(json.dumps(label) + "\n")

    def start(self) -> None:
        self.epoch0 = time.time()
        self.write_files()
        for i in range(self.sim.topo.n_nodes):
            for port, exporter in ((DCGM_PORT, "dcgm"), (NODE_PORT, "node")):
                srv = _ExporterServer((loopback(i), port), _handler(self.state, i, exporter))
                threading.Thread(target=srv.serve_forever, daemon=True, name=f"{exporter}-{i}").start()
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
                    while not self.stop.is_set() and time.monotonic() < due:
                        time.sleep(min(0.05, due - time.monotonic()))
                    if self.stop.is_set():
                        return
                    while lines and lines[0][0] <= ts:
                        t, node, line = lines.pop(0)
                        stamp = str(int(round(self.wall_of(t) * 1e6)))
                        journal.write(json.dumps({"__REALTIME_TIMESTAMP": stamp, "_HOSTNAME": node,
                                                  "_TRANSPORT": "kernel", "SYSLOG_IDENTIFIER": "kernel",
                                                  "MESSAGE": line}) + "\n")
                    self.state.set(chunk, j)

    def shutdown(self) -> None:
        self.stop.set()
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()


def serve(sim: Simulator, out: Path, speed: float) -> None:
    """Serve until the scenario ends or the process is interrupted."""
    server = SimServer(sim, out, speed)
    server.start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
