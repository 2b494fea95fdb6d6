"""scripts/slurm-lab.sh itself: a lab that cannot come up says why and leaves nothing running."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from tests.conftest import require
from tests.playbooks.conftest import LAB

# ports of this test alone, under the ephemeral range (the other labs: 16817/17000, 23817/24000, 26817/27000)
CTLD_PORT, NODE_PORT_BASE = 21817, 22000


def processes_of(lab_dir: Path) -> list[str]:
    """The processes whose command line or environment names ``lab_dir`` (munged by its paths, the Slurm daemons by
    their SLURM_CONF)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            text = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(lab_dir).encode() in text:
            found.append(f"{proc.name} {(proc / 'comm').read_text().strip()}")
    return found


def test_up_with_a_taken_node_port_fails_and_stops_what_it_started(tmp_path):
    """A slurmd that cannot bind its port (another program holds it) fails `up` with the node's own log line, and
    munged and slurmctld, already started, are stopped (they would hold their ports and sockets for the next lab)."""
    require(os.geteuid() == 0 and shutil.which("slurmctld") is not None,
            "no Slurm: scripts/test.sh installs and starts it (as root)")
    lab_dir = tmp_path / "lab"
    env = {**os.environ, "LAB_DIR": str(lab_dir), "LAB_CTLD_PORT": str(CTLD_PORT),
           "LAB_NODE_PORT_BASE": str(NODE_PORT_BASE)}
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", NODE_PORT_BASE + 1))
        holder.listen()
        try:
            out = subprocess.run([str(LAB), "up", "1"], env=env, capture_output=True, text=True, timeout=120)
        finally:
            left = processes_of(lab_dir)
            subprocess.run([str(LAB), "down"], env=env, capture_output=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert "nodes not idle" in out.stderr
    assert f"Unable to bind listen port ({NODE_PORT_BASE + 1})" in out.stderr, out.stderr
    assert left == [], f"still running after a failed up: {left}"
