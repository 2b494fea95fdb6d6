"""A real Slurm for the playbook tests: scripts/slurm-lab.sh starts munged, slurmctld and four slurmd (and, for the
permission tests, a second lab with slurmdbd on a MariaDB of its own)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "scripts" / "slurm-lab.sh"
LAB_DIR = Path("/tmp/raswarden-slurm-test")
ACCOUNTING_DIR = Path("/tmp/raswarden-slurm-accounting-test")

JOB_SCRIPT = """#!/bin/bash
# A training job that checkpoints on USR1 and records each start (restart count, node). The traps are set
# before anything else, so a signal never finds the script unprepared.
D={jobs}
# On USR1: save a checkpoint, then tell raswarden through the job comment (the built-in playbook waits for it).
checkpoint() {{
  echo "step=$i node=$SLURMD_NODENAME" >> $D/ckpt-$SLURM_JOB_ID
  scontrol update JobId=$SLURM_JOB_ID Comment="raswarden:checkpointed $(date +%s)"
}}
trap checkpoint USR1
trap 'echo "TERM" >> $D/log-$SLURM_JOB_ID; exit 143' TERM
if [ -f $D/ckpt-$SLURM_JOB_ID ]; then resumed="resumed from $(tail -1 $D/ckpt-$SLURM_JOB_ID)"; fi
echo "start restart=${{SLURM_RESTART_COUNT:-0}} node=$SLURMD_NODENAME" >> $D/log-$SLURM_JOB_ID
[ -n "$resumed" ] && echo "$resumed" >> $D/log-$SLURM_JOB_ID
for i in $(seq 1 600); do sleep 1 & wait $!; done
"""


class Lab:
    def __init__(self, conf: str, lab_dir: Path = LAB_DIR):
        self.conf = conf
        self.dir = lab_dir
        self.env = {**os.environ, "SLURM_CONF": conf}
        self.jobs = lab_dir / "jobs"
        self.script = self.jobs / "train.sh"
        self.script.write_text(JOB_SCRIPT.format(jobs=self.jobs))
        self.script.chmod(0o755)

    def run(self, *args: str) -> str:
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, check=True,
                              timeout=30).stdout

    def submit(self, comment: str = "raswarden:checkpoint", exclude: str = "") -> str:
        args = ["sbatch", "--parsable", "--requeue", "--time=10", "-N1", "--exclusive",
                f"--comment={comment}", "-o", str(self.jobs / "out-%j"), str(self.script)]
        if exclude:
            args.insert(1, f"--exclude={exclude}")
        job = self.run(*args).strip()
        self.wait(lambda: self.job_state(job) == "RUNNING", 20)
        self.wait(lambda: "start" in self.log(job), 20)  # the script runs and its traps are set
        return job

    def job_state(self, job: str) -> str:
        return self.run("squeue", "-h", "-j", job, "-o", "%T").strip()

    def job_node(self, job: str) -> str:
        return self.run("squeue", "-h", "-j", job, "-o", "%N").strip()

    def node_state(self, node: str) -> str:
        return self.run("sinfo", "-h", "-n", node, "-o", "%T").strip()

    def log(self, job: str, kind: str = "log") -> str:
        path = self.jobs / f"{kind}-{job}"
        return path.read_text() if path.exists() else ""

    @staticmethod
    def wait(cond, timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end:
            try:
                if cond():
                    return
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"condition not met within {timeout} s")

    def _slurmd_runs(self, node: str) -> bool:
        pidfile = self.dir / "run" / f"slurmd-{node}.pid"
        try:
            return Path(f"/proc/{int(pidfile.read_text())}/comm").read_text().strip() == "slurmd"
        except (OSError, ValueError):
            return False

    def boot_time(self, node: str) -> int:
        """When Slurm says ``node`` last booted (a reboot through the lab's RebootProgram moves it on); 0 while it
        does not say (BootTime=None: slurmctld shows that for a moment around a node's new registration)."""
        fields = dict(f.split("=", 1) for f in self.run("scontrol", "show", "node", "-o", node).split() if "=" in f)
        if fields.get("BootTime", "None") == "None":
            return 0
        return int(time.mktime(time.strptime(fields["BootTime"], "%Y-%m-%dT%H:%M:%S")))

    def reset(self) -> None:
        """Cancel every job and return every node to service (between tests), a node whose reboot a test made hang
        (LAB_DIR/reboot/NODE.hang) booted again."""
        subprocess.run(["scancel", "--user", "root"], env=self.env, capture_output=True, timeout=30)
        self.wait(lambda: not self.run("squeue", "-h").strip(), 30)
        for hang in (self.dir / "reboot").glob("*.hang"):
            hang.unlink()
        states = dict(line.split() for line in self.run("sinfo", "-h", "-N", "-o", "%N %T").splitlines())
        for n in range(1, 5):
            if "reboot" in states.get(f"node{n}", ""):  # (a reboot asked and not done: cancelled, so none comes)
                subprocess.run(["scontrol", "cancel_reboot", f"node{n}"], env=self.env, capture_output=True,
                               timeout=30)
            if not self._slurmd_runs(f"node{n}"):  # a node whose reboot hung: powered on again
                out = subprocess.run([str(LAB), "boot", f"node{n}"], env={**self.env, "LAB_DIR": str(self.dir)},
                                     capture_output=True, text=True, timeout=60)
                assert out.returncode == 0, out.stderr
        for n in range(1, 5):
            subprocess.run(["scontrol", "update", f"NodeName=node{n}", "State=RESUME"], env=self.env,
                           capture_output=True, timeout=30)
        self.wait(lambda: all(self.node_state(f"node{n}") == "idle" for n in range(1, 5)), 30)


def require_reboots() -> None:
    """The lab's reboots start a node's slurmd in a time namespace of its own (Linux 5.6, CAP_SYS_ADMIN): without
    one its boot time never moves and Slurm never sees the reboot done."""
    ok = shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--time", "--fork", "true"], capture_output=True, timeout=30).returncode == 0
    require(ok, "no time namespaces here (unshare --time): the Slurm lab's nodes cannot reboot")


@pytest.fixture(scope="session")
def slurm_lab():
    require(os.geteuid() == 0 and shutil.which("slurmctld") is not None,
            "no Slurm: scripts/test.sh installs and starts it (as root)")
    env = {**os.environ, "LAB_DIR": str(LAB_DIR), "LAB_CTLD_PORT": "26817", "LAB_NODE_PORT_BASE": "27000"}
    out = subprocess.run([str(LAB), "up", "4"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lab = Lab(out.stdout.strip().splitlines()[-1])
    yield lab
    subprocess.run([str(LAB), "down"], env=env, capture_output=True, timeout=120)


@pytest.fixture
def slurm(slurm_lab):
    slurm_lab.reset()
    yield slurm_lab


@pytest.fixture(scope="module")
def slurm_accounting():
    """A lab of two nodes with accounting (slurmdbd, MariaDB), on ports of its own beside the main lab."""
    require(os.geteuid() == 0 and all(shutil.which(c) for c in ("slurmctld", "slurmdbd", "mariadbd", "runuser")),
            "no Slurm with slurmdbd and MariaDB: scripts/test.sh installs them (as root)")
    env = {**os.environ, "LAB_DIR": str(ACCOUNTING_DIR), "LAB_CTLD_PORT": "23817", "LAB_NODE_PORT_BASE": "24000",
           "LAB_ACCOUNTING": "1"}
    out = subprocess.run([str(LAB), "up", "2"], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    yield Lab(out.stdout.strip().splitlines()[-1], ACCOUNTING_DIR)
    subprocess.run([str(LAB), "down"], env=env, capture_output=True, timeout=120)


KUBE_LAB = ROOT / "scripts" / "kube-lab.sh"


class KubeLab:
    """A running kube-apiserver (scripts/kube-lab.sh): its directory, the admin's kubeconfig and an API client."""

    def __init__(self, directory: str):
        from kubernetes import client, config

        self.dir = Path(directory)
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.api = config.new_client_from_config(str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)

    def token_for(self, namespace: str, account: str, seconds: int = 3600) -> str:
        """A token of service account ``account`` (made if missing), from the TokenRequest API."""
        from kubernetes import client

        try:
            self.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
                metadata=client.V1ObjectMeta(name=account)))
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=["https://kubernetes.default.svc"], expiration_seconds=seconds))
        return self.core.create_namespaced_service_account_token(account, namespace, request).status.token

    def kubeconfig_with(self, token: str, path: Path) -> Path:
        """A kubeconfig for the same server and CA with ``token`` (another identity than the admin)."""
        text = self.kubeconfig.read_text()
        admin = next(line.split('"')[1] for line in text.splitlines() if "token:" in line)
        path.write_text(text.replace(admin, token))
        path.chmod(0o600)
        return path


@pytest.fixture(scope="session")
def kube_lab():
    """A real kube-apiserver and etcd, built from their Go modules and started on loopback (TLS, tokens, RBAC)."""
    require(shutil.which("go") is not None or (ROOT / "build" / "kube" / "kube-apiserver").exists(),
            "no Go to build kube-apiserver with: scripts/kube-lab.sh build needs it")
    built = subprocess.run([str(KUBE_LAB), "build"], capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stderr[-3000:]
    out = subprocess.run([str(KUBE_LAB), "up"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lab = KubeLab(out.stdout.strip().splitlines()[-1])
    yield lab
    subprocess.run([str(KUBE_LAB), "down"], capture_output=True, timeout=120)
