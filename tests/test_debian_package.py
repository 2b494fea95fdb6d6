"""The Debian package, built by packaging/build-deb.sh and installed with apt on this machine, then used as
docs/install.md says: the CLI on PATH, the user and directories made, ``raswarden init`` against live exporters,
``check-config`` on what it wrote, the daemon run as the raswarden user for a few ticks; then purged.

It installs into the machine's own root (/opt/raswarden, /etc/raswarden, the raswarden user), so it needs root,
dpkg and apt: present in CI (scripts/test.sh runs as root), skipped elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import ports, require

DEB = "raswarden"


def run(*argv: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def installed(debian_package):
    require(bool(shutil.which("apt-get")), "the Debian package test needs apt-get")
    require(run("dpkg-query", "-W", DEB).returncode != 0, "a raswarden package is already installed here")
    shutil.rmtree("/etc/raswarden", ignore_errors=True)  # what an older test run's purge left (it did not remove it)
    deb = str(debian_package)
    listing = run("dpkg-deb", "-c", deb).stdout
    for path in ("./usr/lib/systemd/system/raswarden.service", "./usr/lib/systemd/system/raswarden@.service",
                 "./usr/lib/sysusers.d/raswarden.conf",
                 "./usr/lib/tmpfiles.d/raswarden.conf", "./etc/raswarden/raswarden.toml",
                 "./usr/share/doc/raswarden/copyright", "./usr/share/doc/raswarden/kubernetes/rbac.yaml",
                 "./usr/share/doc/raswarden/kubernetes/deployment.yaml",
                 "./usr/bin/raswarden -> /opt/raswarden/bin/raswarden"):
        assert path in listing, path
    depends = run("dpkg-deb", "-f", deb, "Depends").stdout
    assert depends.startswith("python3.")
    # the venv's interpreter is a file of the package it depends on (python3.11's /usr/bin/python3.11), not
    # python3-minimal's /usr/bin/python3, which a minimal Debian may lack (test_boot.py installs it without one)
    python_package = depends.split(",")[0].split()[0]
    owner = run("dpkg", "-S", f"/usr/bin/{python_package}").stdout.split(":")[0]  # python3.11-minimal
    needs = run("dpkg-query", "-W", "-f", "${Depends}", python_package).stdout
    assert owner == python_package or owner in needs, (owner, needs)
    got = run("apt-get", "install", "-y", "-q", deb, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    yield deb
    purged = run("dpkg", "--purge", DEB)
    assert purged.returncode == 0 and not os.path.exists("/opt/raswarden"), purged.stderr[-2000:]
    assert not os.path.exists("/etc/raswarden")  # its configuration too (what init wrote, the credentials)


def test_installed_as_install_md_says(installed, tmp_path):
    from lab.bundled import FAULTS, SCENARIOS
    from lab.sim.faults import load_library
    from lab.sim.scenario import Scenario
    from lab.sim.serve import SimServer
    from lab.sim.simulator import Simulator
    from tests.daemon.service.conftest import free_port, get

    assert run("raswarden", "--version").stdout.strip() == "raswarden 0.1.0"  # on PATH, from /opt/raswarden
    python_package = run("dpkg-query", "-W", "-f", "${Depends}", DEB).stdout.split(",")[0].split()[0]
    assert os.path.realpath("/opt/raswarden/bin/python3") == os.path.realpath(f"/usr/bin/{python_package}")
    # every dependency imports from the venv the package carries (their own test suites were left out)
    imports = run("/opt/raswarden/bin/python", "-c", "import numpy, pandas, pyarrow.parquet, scipy.stats, "
                  "sklearn.ensemble, sqlmodel, alembic, psycopg, ijson, yaml, rich, jinja2, apscheduler, zstandard, "
                  "prometheus_client; import detectors.learned, lab.sim.simulator")
    assert imports.returncode == 0, imports.stderr[-2000:]
    assert "systemd-journal" in run("id", "raswarden").stdout
    assert oct(os.stat("/etc/raswarden/credentials").st_mode)[-3:] == "700"
    unit = open("/usr/lib/systemd/system/raswarden.service").read()
    doc = next(line.split("=", 1)[1].split()[0] for line in unit.splitlines() if line.startswith("Documentation="))
    assert doc.startswith("file://") and os.path.exists(doc[len("file://"):])  # the unit's doc is installed
    assert run("raswarden", "check-config", "--config", "/etc/raswarden/raswarden.toml").returncode == 0
    server = SimServer(Simulator(Scenario.load(SCENARIOS / "mini.yaml"), load_library(FAULTS)), tmp_path / "live",
                       speed=60.0, port_offset=ports(317))
    server.start()
    server.state.set(next(server.sim.chunks()), 0)  # what the exporters serve before the clock runs
    proc = None
    try:
        sd = tmp_path / "live" / "prometheus-targets.json"
        os.chmod(tmp_path, 0o755)
        os.chmod(tmp_path / "live", 0o755)
        # docs/install.md §3 as written: no --force, the package's unedited minimal config is init's to replace
        init = run("raswarden", "init", "--file-sd", str(sd), "--out", "/etc/raswarden")
        topo = server.sim.topo
        assert init.returncode == 0 and f"{topo.n_nodes} nodes, {topo.n_gpus} accelerators" in init.stdout, \
            init.stdout + init.stderr
        checked = run("raswarden", "check-config", "--config", "/etc/raswarden/raswarden.toml")
        assert checked.returncode == 0 and "receiver chat is off" in checked.stderr, checked.stderr
        port = free_port()
        config = "/etc/raswarden/raswarden.toml"
        with open(config, "a") as fh:
            fh.write(f'\n[http]\nlisten = "127.0.0.1:{port}"\n')
        proc = subprocess.Popen(["runuser", "-u", "raswarden", "--", "raswarden", "run", "--config", config],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        ticks = 0.0
        while time.monotonic() < deadline and proc.poll() is None and ticks < 1:
            time.sleep(1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    ticks = next((float(line.split()[-1]) for line in r.read().decode().splitlines()
                                  if line.startswith("raswarden_ticks_total ")), 0.0)
            except OSError:
                pass
        assert ticks >= 1, proc.stdout.read().decode()[-3000:] if proc.poll() is not None else "no tick"
        _status, body = get(f"http://127.0.0.1:{port}/healthz")  # 503 here: no forwarded journal on this host
        warning = json.loads(body)["warnings"][0]
        # the service's user cannot read root's credentials outside systemd: its receiver is off, it runs
        assert "receiver chat is off" in warning and "not readable by this user" in warning, warning
        assert os.stat("/var/lib/raswarden/raswarden.db").st_uid == int(run("id", "-u", "raswarden").stdout)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        server.shutdown()
