"""The unit started by a real systemd: the Debian package installed in a container that boots systemd 252 as its
PID 1, ``raswarden init`` as docs/install.md says, ``systemctl enable --now``-style boot, then the unit checked as
an operator would: active after its READY notification under the full sandbox with an empty credentials directory
(the receiver without its secret off), its secret delivered by ``LoadCredential=`` once added, ticking against the
live simulator, install.md's status commands and reload, a clean stop; then three instances of ``raswarden@.service``
on one store, a pool member handing a shard back to the shard's own instance.

The container's root is an overlay of this machine's own root with a tmpfs on top (no debootstrap: seconds, not
minutes), so everything it writes, its ``systemd-tmpfiles --boot`` emptying /tmp included, lands in the tmpfs and
the machine is untouched. It shares the machine's network (the simulator's exporters and the daemon's port are on
127.0.0.1). Needs root, systemd-nspawn (systemd-container) and overlayfs: scripts/test.sh installs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ports, require

MACHINE = "raswarden-boot-test"


def run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


class Container:
    """A container booted from an overlay of the machine's root; ``sh`` runs a command inside it."""

    def __init__(self, base: Path):
        self.base = base
        self.root = base / "root"
        self.proc: subprocess.Popen | None = None
        self.init = 0

    def mount(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        assert run("mount", "-t", "tmpfs", "-o", "size=2g", "tmpfs", str(self.base)).returncode == 0
        for d in ("upper", "work", "root"):
            (self.base / d).mkdir()
        got = run("mount", "-t", "overlay", "overlay", "-o",
                  f"lowerdir=/,upperdir={self.base}/upper,workdir={self.base}/work", str(self.root))
        assert got.returncode == 0, got.stderr
        (self.root / "etc" / "machine-id").write_text(os.urandom(16).hex() + "\n")  # a machine of its own
        # the machine's own enabled services (PostgreSQL, Slurm, Prometheus, ...) stay off in the container
        for wants in (self.root / "etc" / "systemd" / "system").glob("*.wants"):
            for unit in wants.iterdir():
                mask = self.root / "etc" / "systemd" / "system" / unit.name
                if unit.name != "raswarden.service" and not unit.name.endswith(".target"):
                    mask.unlink(missing_ok=True)
                    mask.symlink_to("/dev/null")

    def chroot(self, script: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``script`` in the container's root before it boots (nspawn's own /proc, /dev, /sys)."""
        return run("systemd-nspawn", "-q", "-D", str(self.root), "--register=no", "--keep-unit", "--pipe",
                   "/bin/sh", "-ec", script, timeout=timeout)

    def boot(self, timeout: float = 60) -> None:
        os.makedirs("/run/systemd/nspawn", exist_ok=True)
        if run("mountpoint", "-q", "/run/systemd/nspawn").returncode != 0:
            # without it nspawn stops with "Attempted to remove disk file system under /run/systemd/nspawn/propagate"
            run("mount", "-t", "tmpfs", "tmpfs", "/run/systemd/nspawn")
        self.proc = subprocess.Popen(["systemd-nspawn", "-q", "-D", str(self.root), "--register=no", "--keep-unit",
                                      "-b", "-M", MACHINE], stdin=subprocess.DEVNULL,
                                     stdout=open(self.base / "boot.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            children = run("pgrep", "-P", str(self.proc.pid)).stdout.split()
            if children:
                self.init = int(children[0])
                state = self.sh("systemctl is-system-running").stdout.strip()
                if state in ("running", "degraded"):
                    return
            time.sleep(0.5)
        raise AssertionError(f"the container did not boot (state {state!r}): {self.log()[-3000:]}")

    def sh(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return run("nsenter", "--target", str(self.init), "--mount", "--uts", "--ipc", "--pid", "/bin/sh", "-c",
                   command, timeout=timeout)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def log(self) -> str:
        path = self.base / "boot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.init:
                self.sh("systemctl poweroff", timeout=30)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        for path in (self.root, self.base):
            if run("mountpoint", "-q", str(path)).returncode == 0:
                run("umount", "-l", str(path))
        try:
            self.base.rmdir()
        except OSError:
            pass


@pytest.fixture
def container(tmp_path):
    require(os.geteuid() == 0 and bool(shutil.which("systemd-nspawn")) and os.path.exists("/lib/systemd/systemd"),
            "booting the unit needs root, systemd-nspawn (apt-get install systemd-container) and systemd")
    box = Container(Path("/run") / f"raswarden-boot-{os.getpid()}")
    try:
        box.mount()
    except AssertionError as exc:
        box.close()
        require(False, f"overlayfs over / is not available here: {exc}")
    yield box
    box.close()


def test_the_unit_starts_under_systemd_and_stops_cleanly(container, debian_package, tmp_path):
    from lab.bundled import FAULTS, SCENARIOS
    from lab.sim.faults import load_library
    from lab.sim.scenario import Scenario
    from lab.sim.serve import SimServer
    from lab.sim.simulator import Simulator
    from tests.daemon.service.conftest import free_port, get

    server = SimServer(Simulator(Scenario.load(SCENARIOS / "mini.yaml"), load_library(FAULTS)), tmp_path / "live",
                       speed=60.0, port_offset=ports(331))
    server.start()
    server.state.set(next(server.sim.chunks()), 0)
    try:
        # (nspawn gives the container a /tmp of its own: files for it go to /var/tmp)
        shutil.copy(debian_package, container.root / "var" / "tmp" / debian_package.name)
        # the file_sd list where Prometheus keeps it (the unit's PrivateTmp= hides /tmp and /var/tmp from it)
        targets = container.root / "etc" / "prometheus" / "targets"
        targets.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "live" / "prometheus-targets.json", targets / "gpu-nodes.json")
        port = free_port()
        # docs/install.md: install, init against the exporters, enable; the credentials directory left empty
        # a minimal Debian may have python3.11 (the package's Depends) without python3-minimal's /usr/bin/python3
        prepared = container.chroot(f"""
            rm -f /usr/bin/python3
            dpkg -i /var/tmp/{debian_package.name}
            raswarden --version
            rm -f /etc/raswarden/topology.yaml   # an older run's, in the machine's root under the overlay
            raswarden init --file-sd /etc/prometheus/targets/gpu-nodes.json --out /etc/raswarden
            printf '\\n[http]\\nlisten = "127.0.0.1:{port}"\\n' >> /etc/raswarden/raswarden.toml
            sed -i 's/^interval_s = 30$/interval_s = 5/' /etc/raswarden/raswarden.toml   # ticks sooner
            systemctl enable raswarden.service
            install -d -m 2755 -g systemd-journal /var/log/journal/remote   # systemd-journal-remote's, empty yet
        """)
        assert prepared.returncode == 0, prepared.stdout[-3000:] + prepared.stderr[-3000:]
        assert not any((container.root / "etc" / "raswarden" / "credentials").iterdir())
        container.boot()

        def running_and_ticking(after: float = 0.0) -> str:
            """Wait for the unit to be active (Type=notify: only once the daemon said READY=1, under its whole
            sandbox) and to tick past ``after`` on the exporters' telemetry; its /healthz warnings."""
            deadline = time.monotonic() + 150
            state: dict[str, str] = {}
            while time.monotonic() < deadline:
                state = container.show("raswarden.service", "ActiveState", "SubState")
                if state.get("ActiveState") == "active":
                    break
                assert state.get("ActiveState") != "failed", container.sh("journalctl -u raswarden --no-pager").stdout
                time.sleep(1)
            assert state == {"ActiveState": "active", "SubState": "running"}, state
            ticks, samples, deadline = 0.0, 0.0, time.monotonic() + 120
            while (ticks < after + 2 or not samples) and time.monotonic() < deadline:
                try:
                    status, body = get(f"http://127.0.0.1:{port}/metrics")
                    found = re.search(rb"^raswarden_ticks_total (\S+)$", body, re.M) if status == 200 else None
                    ticks = float(found.group(1)) if found else 0.0
                    samples = sum(float(v) for v in re.findall(
                        rb"^raswarden_samples_ingested_total\{[^}]*\} (\S+)$", body, re.M)) if status == 200 else 0.0
                except OSError:
                    pass
                time.sleep(1)
            journal = container.sh("journalctl -u raswarden --no-pager -o cat").stdout
            assert ticks >= after + 2 and samples > 0, journal[-3000:]
            return " ".join(json.loads(get(f"http://127.0.0.1:{port}/healthz")[1]).get("warnings", []))

        # an empty credentials directory never stops the unit: the receiver whose secret is missing is off
        assert "receiver chat is off" in running_and_ticking()
        # the operator adds the secret (docs/install.md §2) and restarts: LoadCredential= delivers it
        added = container.sh("umask 077; printf 'http://127.0.0.1:9/hook' > /etc/raswarden/credentials/slack_url && "
                             "systemctl restart raswarden", timeout=120)
        assert added.returncode == 0, added.stderr
        assert "receiver chat is off" not in running_and_ticking()
        # docs/install.md §5: the status line, the CLI beside the service, a reload
        status = container.sh("systemctl status raswarden --no-pager").stdout
        assert re.search(r"Status: \"tick \d+:", status), status
        for command in ("raswarden status --config /etc/raswarden/raswarden.toml", "raswarden incidents"):
            got = container.sh(command, timeout=120)
            assert got.returncode == 0, (command, got.stdout[-2000:], got.stderr[-2000:])
        # systemctl reload returns once the daemon runs the new config (ExecReload= waits for its answer)
        reloaded = container.sh("systemctl reload raswarden", timeout=150)
        assert reloaded.returncode == 0, reloaded.stderr + container.sh("journalctl -u raswarden -n 20 -o cat").stdout
        assert container.show("raswarden.service", "ActiveState", "NRestarts") == \
            {"ActiveState": "active", "NRestarts": "0"}
        # a refused file fails the reload, with its reason in the journal, and the old config runs on
        container.sh("cp /etc/raswarden/raswarden.toml /var/tmp/good.toml && "
                     "printf '\\n[bogus]\\n' >> /etc/raswarden/raswarden.toml")
        assert container.sh("systemctl reload raswarden", timeout=150).returncode != 0
        assert container.show("raswarden.service", "ActiveState", "NRestarts") == \
            {"ActiveState": "active", "NRestarts": "0"}
        assert "reload refused" in container.sh("journalctl -u raswarden -n 20 -o cat").stdout
        container.sh("cp /var/tmp/good.toml /etc/raswarden/raswarden.toml")
        assert container.sh("systemctl stop raswarden.service", timeout=120).returncode == 0
        stopped = container.show("raswarden.service", "ActiveState", "Result", "ExecMainStatus")
        assert stopped == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, stopped
        journal = container.sh("journalctl -u raswarden --no-pager -o cat").stdout
        assert "Traceback" not in journal, journal[-3000:]
        assert "Permission denied" not in journal and "Operation not permitted" not in journal, journal[-3000:]
        several_instances_hand_a_shard_back(container)
    finally:
        server.shutdown()


def metric(port: int, name: str) -> float | None:
    """One unlabelled sample of the daemon on ``port`` (None while it does not answer)."""
    from tests.daemon.service.conftest import get

    try:
        status, body = get(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return None
    found = re.search(rb"^" + name.encode() + rb" (\S+)$", body, re.M) if status == 200 else None
    return float(found.group(1)) if found else None


def several_instances_hand_a_shard_back(container: Container) -> None:
    """raswarden@NAME (docs/install.md): three instances on one management node and one store, shard a's, shard
    b's and a pool member. While b's own instance is not there the pool member serves b; once it starts, the pool
    member hands b over (real processes under systemd, their leases in the store) and waits again."""
    from daemon.topology import Topology
    from tests.daemon.service.conftest import free_port

    etc = container.root / "etc" / "raswarden"
    nodes = sorted(Topology.load(etc / "topology.yaml").node_rack)
    half = len(nodes) // 2
    shards = f"\n[shards.a]\nnodes = {json.dumps(nodes[:half])}\n[shards.b]\nnodes = {json.dumps(nodes[half:])}\n"
    base = (etc / "raswarden.toml").read_text()
    port = {}
    for name, shard in (("a", "a"), ("b", "b"), ("pool", "*")):
        port[name] = free_port()
        text = re.sub(r'listen = "127.0.0.1:\d+"', f'listen = "127.0.0.1:{port[name]}"', base)
        (etc / f"{name}.toml").write_text(text.replace("[service]\n", f'[service]\nshard = "{shard}"\n', 1) + shards)
    assert container.sh("cd /etc/raswarden && chgrp raswarden a.toml b.toml pool.toml && "
                        "chmod 0640 a.toml b.toml pool.toml").returncode == 0

    def until(check, what: str, timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(1)
        journal = container.sh("journalctl -u 'raswarden@*' --no-pager -o cat -n 60").stdout
        raise AssertionError(f"{what}: not in {timeout:.0f} s\n{journal[-4000:]}")

    for name in ("a", "pool"):  # a first: a pool member started with it might take a before a's own instance asks
        started = container.sh(f"systemctl start raswarden@{name}", timeout=150)
        assert started.returncode == 0, started.stderr
        until(lambda n=name: metric(port[n], "raswarden_active") == 1, f"raswarden@{name} active")
    assert metric(port["pool"], "raswarden_shard_handovers_total") == 0  # it took b, nobody's
    assert container.sh("test -d /run/raswarden-a && test -d /run/raswarden-pool").returncode == 0
    started = container.sh("systemctl start raswarden@b", timeout=150)
    assert started.returncode == 0, started.stderr
    until(lambda: metric(port["b"], "raswarden_active") == 1 and metric(port["pool"], "raswarden_active") == 0
          and metric(port["pool"], "raswarden_shard_handovers_total") == 1, "b handed over to its own instance")
    assert metric(port["a"], "raswarden_active") == 1  # a untouched
    assert "asked for it back; handed over" in container.sh("journalctl -u raswarden@pool -o cat").stdout
    stopped = container.sh("systemctl stop raswarden@a raswarden@b raswarden@pool", timeout=150)
    assert stopped.returncode == 0, stopped.stderr
    for name in ("a", "b", "pool"):
        state = container.show(f"raswarden@{name}.service", "ActiveState", "Result")
        # (its journal with it: once, under a whole suite's load, the pool member took over 90 s to stop)
        assert state == {"ActiveState": "inactive", "Result": "success"}, (
            name, state, container.sh(f"journalctl -u raswarden@{name} --no-pager -o short-monotonic -n 80").stdout)
    journal = container.sh("journalctl -u 'raswarden@*' --no-pager -o cat").stdout
    assert "Traceback" not in journal, journal[-3000:]
