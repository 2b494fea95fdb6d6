"""A live simulated supernode for the service tests: ``raswarden simulate --serve`` on loopback, with a GPU
that falls off the bus a few wall-clock seconds in, and a config file that points raswarden at it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ports, spawn

SCENARIO = """name: live
seed: 3
topology: {preset: scalex640, accelerators: 16}
start: "2026-03-02T00:00:00Z"
duration: %(duration)s
resolution: 30s
profile: full
jobs: {nodes_per_job: [2, 2], duration: [3h, 3h], gap: [1m, 1m], partial_share: 0.0}
faults:
  - {entity: sn01-b02/gpu5, fault: gpu_off_bus, template: a, onset: %(onset)s, failure: %(failure)s}
"""


def get(url: str) -> tuple[int, bytes]:
    """GET a URL: (status, body), also for error statuses."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dead_target_config(tmp_path: Path, http_port: int | None = None) -> tuple[Path, str]:
    """A config with one exposition collector whose target nothing listens on: (its path, the target)."""
    target = f"127.0.0.1:{free_port()}"
    config = tmp_path / "raswarden.toml"
    config.write_text(f"""[store]
url = "sqlite:///{tmp_path / 'state.db'}"
[service]
interval_s = 1
[http]
listen = "127.0.0.1:{http_port or free_port()}"
[[collectors]]
type = "exposition"
name = "exporters"
targets = ["{target}"]
timeout_s = 1
""")
    return config, target


class Live:
    """The simulator process and the files it serves."""

    def __init__(self, root: Path, failure: str = "10m", speed: float = 60.0, duration: str = "2h",
                 onset: str = "2m"):
        self.root = root
        self.sim_dir = root / "sim"
        (root / "scenario.yaml").write_text(SCENARIO % {"failure": failure, "duration": duration, "onset": onset})
        self.log = root / "sim.log"
        self.proc = spawn([sys.executable, "-m", "daemon", "simulate", str(root / "scenario.yaml"), "--serve",
                           "--out", str(self.sim_dir), "--speed", str(speed), "--port-offset", str(ports())], self.log)
        # serving once the targets are written and an exporter answers (a port another process holds stops it)
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the simulator did not start: {self.said()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        targets = self.sim_dir / "prometheus-targets.json"
        if not targets.exists():
            return False
        try:
            first = json.loads(targets.read_text())[0]["targets"][0]
            urllib.request.urlopen(f"http://{first}/metrics", timeout=2).close()
            return True
        except (OSError, ValueError, LookupError):
            return False

    def said(self) -> str:
        """Whether the simulator still runs, and the end of what it printed."""
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return f"simulator {state}: {self.log.read_text()[-2000:] if self.log.exists() else ''}"

    def config(self, name: str = "raswarden.toml", extra: str = "", interval: float = 1.0, port: int | None = None,
               db: Path | None = None, service_extra: str = "") -> Path:
        path = self.root / name
        path.write_text(f"""[store]
url = "sqlite:///{db or self.root / 'state.db'}"
[service]
interval_s = {interval}
topology = "{self.sim_dir / 'topology.yaml'}"
{service_extra}
[http]
listen = "127.0.0.1:{port or free_port()}"
token = "test-token-123"
[[collectors]]
type = "exposition"
name = "exporters"
file_sd = ["{self.sim_dir / 'prometheus-targets.json'}"]
timeout_s = 2
[[collectors]]
type = "journald"
name = "kernel"
file = "{self.sim_dir / 'kernel.journal.json'}"
{extra}
""")
        return path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def live(tmp_path):
    sim = Live(tmp_path)
    yield sim
    sim.stop()
