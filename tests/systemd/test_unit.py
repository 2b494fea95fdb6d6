"""The systemd unit: it verifies, its sandbox rates 2.0 or lower, and the sandbox still grants what the
service needs — checked against the system calls, sockets and paths a real ``raswarden run`` uses (traced
with strace against the live simulator and a real journal), not only read off the unit file.

PID 1 on the test machines is not systemd, so here ``systemd-analyze`` reads the unit offline and the sandbox is
checked against systemd's own definitions of the system-call groups; tests/systemd/test_boot.py starts the packaged
unit under a real systemd in a container.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, require
from tests.daemon.service.conftest import Live, free_port, get

UNIT = ROOT / "systemd" / "raswarden.service"
SYSUSERS = ROOT / "systemd" / "raswarden.sysusers"
TMPFILES = ROOT / "systemd" / "raswarden.tmpfiles"


def ticks_after(port: int, n: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until the daemon on ``port`` has run ``n`` ticks (its /metrics says so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status, body = get(f"http://127.0.0.1:{port}/metrics")
        except OSError:
            status, body = 0, b""
        found = re.search(rb"^raswarden_ticks_total (\S+)$", body, re.M) if status == 200 else None
        if found and float(found.group(1)) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"the daemon did not run {n} ticks within {timeout:.0f} s")


def instance_unit() -> str:
    """raswarden@.service as the package installs it (written from the unit by systemd/instance-unit.sh)."""
    done = subprocess.run(["sh", str(ROOT / "systemd" / "instance-unit.sh"), str(UNIT)], capture_output=True,
                          text=True, check=True)
    return done.stdout


def unit_settings(text: str | None = None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (UNIT.read_text() if text is None else text).splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def local_unit(tmp_path: Path, name: str = "raswarden.service", text: str | None = None) -> Path:
    """The unit (or ``text``, as ``name``) with ExecStart pointing at this checkout's raswarden (verify checks that
    the binary exists)."""
    raswarden = Path(sys.executable).parent / "raswarden"
    path = tmp_path / name
    path.write_text((UNIT.read_text() if text is None else text).replace("/opt/raswarden/bin/raswarden",
                                                                          str(raswarden)))
    return path


def analyze(*args: str) -> subprocess.CompletedProcess:
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed (Debian package systemd)")
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True)


@pytest.mark.parametrize("instance", [False, True], ids=["unit", "instance"])
def test_unit_verifies(tmp_path, instance):
    unit = local_unit(tmp_path, "raswarden@sn01.service", instance_unit()) if instance else local_unit(tmp_path)
    done = analyze("verify", str(unit))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("instance", [False, True], ids=["unit", "instance"])
def test_unit_exposure_is_2_0_or_lower(tmp_path, instance):
    unit = local_unit(tmp_path, "raswarden@sn01.service", instance_unit()) if instance else local_unit(tmp_path)
    done = analyze("security", "--offline=true", str(unit))
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", done.stdout)
    assert m, done.stdout[-2000:] + done.stderr
    assert float(m.group(1)) <= 2.0, done.stdout


def test_the_instance_unit_is_the_unit_with_a_config_and_runtime_directory_of_its_own():
    """raswarden@NAME: /etc/raswarden/NAME.toml and /run/raswarden-NAME; every other setting the unit's."""
    unit, instance = unit_settings(), unit_settings(instance_unit())
    changed = {k for k in unit.keys() | instance.keys() if unit.get(k) != instance.get(k)}
    assert changed == {"Description", "ExecStartPre", "ExecStart", "RuntimeDirectory"}
    assert instance["ExecStart"] == ["/opt/raswarden/bin/raswarden run --config /etc/raswarden/%i.toml"]
    assert instance["ExecStartPre"] == ["/opt/raswarden/bin/raswarden check-config --config /etc/raswarden/%i.toml"]
    assert instance["RuntimeDirectory"] == ["raswarden-%i"]  # not inside raswarden.service's /run/raswarden


def test_unit_has_what_the_issue_asks_for():
    s = unit_settings()
    assert s["Type"] == ["notify"] and s["Restart"] == ["on-failure"] and s["WatchdogSec"]
    assert s["User"] == ["raswarden"] and s["StateDirectory"] == ["raswarden"]
    assert s["ConfigurationDirectory"] == ["raswarden"]
    # the whole credentials directory, which tmpfiles.d creates: no secret can be missing from the unit's view
    assert s["LoadCredential"] == ["raswarden:/etc/raswarden/credentials"]
    assert any(v.endswith("check-config --config /etc/raswarden/raswarden.toml") for v in s["ExecStartPre"])
    # systemctl reload waits for the daemon's answer, in the runtime directory (daemon/service/reloadanswer.py)
    assert s["ExecReload"] == ["/opt/raswarden/bin/raswarden reload --pid $MAINPID"]
    assert s["RuntimeDirectory"] == ["raswarden"]


def test_sysusers_and_tmpfiles_create_what_they_say(tmp_path):
    for tool in ("systemd-sysusers", "systemd-tmpfiles"):
        require(shutil.which(tool) is not None, f"{tool} is not installed (Debian package systemd)")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group", "shadow", "gshadow"):
        (root / "etc" / name).write_text("")
    (root / "etc" / "group").write_text("systemd-journal:x:101:\n")
    done = subprocess.run(["systemd-sysusers", f"--root={root}", str(SYSUSERS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    passwd = (root / "etc" / "passwd").read_text()
    assert re.search(r"^raswarden:x:\d+:\d+:raswarden fault-recovery daemon:/var/lib/raswarden:/usr/sbin/nologin$",
                     passwd, re.M), passwd
    assert re.search(r"^systemd-journal:x:101:raswarden$", (root / "etc" / "group").read_text(), re.M)
    done = subprocess.run(["systemd-tmpfiles", "--create", f"--root={root}", str(TMPFILES)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert (root / "etc/raswarden/playbooks").is_dir()
    assert oct((root / "etc/raswarden/credentials").stat().st_mode)[-3:] == "700"
    assert (root / "var/lib/raswarden/models").is_dir()


# -- the sandbox still grants what the service needs ----------------------------------------------
def syscall_groups() -> dict[str, set[str]]:
    out = analyze("syscall-filter").stdout
    groups: dict[str, set[str]] = {}
    current = None
    for line in out.splitlines():
        text = line.strip()
        if line.startswith("@"):
            current = text
            groups[current] = set()
        elif current and text and not text.startswith("#"):
            groups[current].add(text)
    return groups


def allowed_syscalls(filters: list[str]) -> set[str]:
    """What the unit's SystemCallFilter= lines allow (the first line is an allow list here, as systemd reads
    it; later ``~`` lines remove, later plain lines add back)."""
    groups = syscall_groups()

    def expand(name: str) -> set[str]:
        if not name.startswith("@"):
            return {name}
        return set().union(*(expand(x) for x in groups[name])) if groups.get(name) else set()

    assert not filters[0].startswith("~"), "the unit's first SystemCallFilter= should be an allow list"
    allowed: set[str] = set()
    for i, line in enumerate(filters):
        deny = line.startswith("~")
        names = set().union(*(expand(x) for x in line.lstrip("~").split()))
        if i == 0:
            allowed = names
        elif deny:
            allowed -= names
        else:
            allowed |= names
    return allowed


def test_sandbox_settings_leave_network_sockets_paths_and_groups_the_service_needs():
    s = unit_settings()
    families = set(" ".join(s["RestrictAddressFamilies"]).split())
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= families  # exporters, webhooks, slurmctld; munge, journal
    assert "PrivateNetwork" not in s and "IPAddressDeny" not in s
    assert "systemd-journal" in " ".join(s["SupplementaryGroups"])  # the forwarded journals
    hidden = " ".join(s.get("InaccessiblePaths", []) + s.get("TemporaryFileSystem", []))
    for needed in ("/etc/slurm", "/run/munge", "/var/log/journal", "/var/lib/rasdaemon", "/sys", "/etc/raswarden"):
        assert needed not in hidden
    assert s["ProtectSystem"] == ["strict"]  # everything readable; written: only the State- and RuntimeDirectory
    assert "ReadWritePaths" not in s


@pytest.fixture
def journal(tmp_path):
    remote = shutil.which("systemd-journal-remote") or "/lib/systemd/systemd-journal-remote"
    require(os.path.exists(remote), "systemd-journal-remote is not installed (scripts/test.sh installs it)")
    out = tmp_path / "remote.journal"
    export = (f"__REALTIME_TIMESTAMP={int(time.time() * 1e6)}\n__MONOTONIC_TIMESTAMP=1\n"
              "_BOOT_ID=0123456789abcdef0123456789abcdef\n_HOSTNAME=sn01-b01\n_TRANSPORT=kernel\n"
              "MESSAGE=EDAC MC0: 1 CE memory read error on DIMM_A1\n\n").encode()
    subprocess.run([remote, f"--output={out}", "--split-mode=none", "-"], input=export, check=True,
                   capture_output=True)
    return out


def test_every_system_call_of_a_real_run_is_allowed_by_the_unit(tmp_path, journal):
    require(shutil.which("strace") is not None, "strace is not installed (scripts/test.sh installs it)")
    live = Live(tmp_path)
    try:
        port = free_port()
        config = live.config(interval=1.0, port=port, extra=f"""
[[collectors]]
type = "journald"
name = "journal"
args = ["--file={journal}"]
since = "2000-01-01"
""")
        trace = tmp_path / "trace"
        proc = subprocess.Popen(["strace", "-f", "-qq", "-o", str(trace), sys.executable, "-m", "daemon", "run",
                                 "--config", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ticks_after(port, 3, proc)  # three cycles under strace: it scraped, ran journalctl, told systemd
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        for pid in children:  # the daemon itself (strace passes no signal on to it)
            os.kill(int(pid), signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        live.stop()
    used = set(re.findall(r"^\d+ +([a-z0-9_]+)\(", trace.read_text(), re.M))
    assert {"connect", "execve", "sendto", "clone3"} & used  # it did talk to exporters, run journalctl, notify
    if os.geteuid() == 0:
        # SQLite gives its WAL files the database's owner, and only when running as root (os_unix.c
        # robustFchown); the unit runs as the raswarden user.
        used.discard("fchown")
    denied = used - allowed_syscalls(unit_settings()["SystemCallFilter"])
    assert not denied, f"the unit's SystemCallFilter= would refuse {sorted(denied)}"
