"""docs/install.md §4 on a real Slurm with accounting (slurmdbd on a MariaDB of the lab's own): the ``raswarden``
user may do none of what raswarden does to Slurm before the doc's ``sacctmgr`` line, all of it after, and Slurm's
Operator level is not enough (it signals and requeues others' jobs and makes reservations, but drains nothing).

Every action runs as the ``raswarden`` system user through :class:`playbooks.slurm.SlurmScheduler` itself, from a copy
of the package that user can read (the checkout may sit in root's home)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, require

INSTALL_MD = ROOT / "docs" / "install.md"
SYSTEM_PYTHON = "/usr/bin/python3"  # the raswarden user may not read this suite's interpreter (a venv in /root)

# Run as the raswarden user: each operation through SlurmScheduler, each one's outcome ("ok" or the error) as JSON.
OPERATIONS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from playbooks.slurm import SlurmScheduler
from playbooks.scheduler import SchedulerError
s = SlurmScheduler(sys.argv[2])
out = {}
for name, call in json.loads(sys.argv[3]):
    try:
        result = getattr(s, call[0])(*call[1:])
        out[name] = "ok" if call[0] != "nodes" else sorted(result)
    except SchedulerError as exc:
        out[name] = "error: " + str(exc)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def raswarden_user():
    """The system user the package makes (its sysusers.d file, as the package's postinst runs it)."""
    require(os.access(SYSTEM_PYTHON, os.X_OK), f"no {SYSTEM_PYTHON} for the raswarden user")
    if subprocess.run(["id", "raswarden"], capture_output=True).returncode != 0:
        require(shutil.which("systemd-sysusers") is not None, "no raswarden user and no systemd-sysusers to make it")
        subprocess.run(["systemd-sysusers", str(ROOT / "systemd" / "raswarden.sysusers")], check=True, timeout=30)
    code = Path(tempfile.mkdtemp(prefix="raswarden-perm-"))
    shutil.copytree(ROOT / "playbooks", code / "playbooks", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [code, *code.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield code
    shutil.rmtree(code, ignore_errors=True)


def as_raswarden(code: Path, lab, operations: list[tuple[str, list]]) -> dict[str, object]:
    """Run ``operations`` (name, [method, args...]) as the raswarden user; what each did."""
    out = subprocess.run(["runuser", "-u", "raswarden", "--", SYSTEM_PYTHON, "-I", "-c", OPERATIONS, str(code),
                          lab.conf, json.dumps(operations)], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def install_md_sacctmgr() -> list[str]:
    """§4's sacctmgr command, as the doc prints it (its comment left off)."""
    block = INSTALL_MD.read_text().split("## 4. Slurm permissions", 1)[1].split("## 5.", 1)[0]
    lines = [ln for ln in re.findall(r"```sh\n(.*?)```", block, re.S)[0].splitlines() if ln.startswith("sacctmgr")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0], comments=True)


def fresh(lab) -> None:
    """No job, both nodes in service, and no raswarden user in Slurm's accounting (whatever a test before left)."""
    subprocess.run(["scancel", "--user", "root"], env=lab.env, capture_output=True, timeout=30)
    lab.wait(lambda: not lab.run("squeue", "-h").strip(), 30)
    for node in ("node1", "node2"):
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=lab.env, capture_output=True,
                       timeout=30)
    lab.wait(lambda: all(node_state(lab, n) == "idle" for n in ("node1", "node2")), 30)
    subprocess.run(["sacctmgr", "-i", "delete", "user", "raswarden"], env=lab.env, capture_output=True, timeout=30)


def node_state(lab, node: str) -> str:
    return lab.run("sinfo", "-h", "-n", node, "-o", "%T").strip()


def restarts(lab, job: str) -> int:
    return int(re.search(r"Restarts=(\d+)", lab.run("scontrol", "show", "job", job)).group(1))


def test_admin_level_as_install_md_says(slurm_accounting, raswarden_user):
    lab = slurm_accounting
    fresh(lab)
    job = lab.submit()  # a training job of another user (root), opted in
    node = lab.job_node(job)
    other = "node2" if node == "node1" else "node1"
    lab.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=raswarden test")  # for resume to act
    actions = [("nodes", ["nodes"]), ("drain", ["drain", other, "raswarden test"]), ("resume", ["resume", node]),
               ("signal", ["signal_job", job, "USR1"]), ("requeue", ["requeue", job]),
               ("reserve", ["reserve", other, "raswarden-perm", 600]), ("release", ["release", "raswarden-perm"])]

    before = as_raswarden(raswarden_user, lab, actions)
    assert before.pop("nodes") == ["node1", "node2"]  # §4's check: `sudo -u raswarden sinfo --json` works
    assert before.pop("release") == "ok"  # a reservation already gone is no error
    for name, said in before.items():
        assert "raswarden needs Slurm's Admin level, docs/install.md §4" in said, (name, said)
    assert (node_state(lab, other), node_state(lab, node)) == ("idle", "draining")
    assert not lab.log(job, "ckpt") and restarts(lab, job) == 0

    # the doc's line exactly (a prompt would hang here: the doc must say -i for a non-interactive commit)
    cmd = install_md_sacctmgr()
    done = subprocess.run(cmd, env=lab.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "Administrator" in lab.run("sacctmgr", "-n", "-P", "list", "user", "raswarden", "format=adminlevel")

    # (the checkpoint signal, then the requeue once the job confirmed it, as the playbook does: a TERM right
    # behind the USR1 can end the script before its USR1 trap runs)
    after = as_raswarden(raswarden_user, lab, [a for a in actions if a[0] != "requeue"])
    assert after == dict.fromkeys(after, "ok") | {"nodes": ["node1", "node2"]}, after
    assert node_state(lab, other) == "drained"
    lab.wait(lambda: "step=" in lab.log(job, "ckpt"), 30)  # the job's USR1 trap ran: its checkpoint
    assert as_raswarden(raswarden_user, lab, [("requeue", ["requeue", job])]) == {"requeue": "ok"}
    assert restarts(lab, job) == 1
    assert "raswarden-perm" not in lab.run("scontrol", "show", "reservation")
    fresh(lab)


def test_operator_level_cannot_drain(slurm_accounting, raswarden_user):
    lab = slurm_accounting
    fresh(lab)
    lab.run("sacctmgr", "-i", "add", "user", "raswarden", "account=root", "adminlevel=Operator")
    job = lab.submit()
    node = lab.job_node(job)
    other = "node2" if node == "node1" else "node1"
    got = as_raswarden(raswarden_user, lab, [
        ("drain", ["drain", other, "raswarden test"]), ("signal", ["signal_job", job, "USR1"]),
        ("reserve", ["reserve", other, "raswarden-op", 600]), ("release", ["release", "raswarden-op"])])
    assert "raswarden needs Slurm's Admin level" in got["drain"], got
    assert (got["signal"], got["reserve"], got["release"]) == ("ok", "ok", "ok"), got
    assert node_state(lab, other) == "idle"
    lab.wait(lambda: "step=" in lab.log(job, "ckpt"), 30)
    fresh(lab)
