"""``raswarden playbook run`` on Kubernetes (the real kube-apiserver of scripts/kube-lab.sh) killed with SIGKILL at
every step boundary of a checkpoint-drain-requeue, then started again; and stopped while the API server does not
answer (SIGSTOP), then started again once it does. Nothing is done twice, nothing is left half done, and the
journal says every step once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from daemon.judgement.incidents import Incident
from daemon.store import Store
from daemon.store.journal import StoreJournal
from detectors.schema import State
from playbooks.kubernetes import CHECKPOINT_ACK, CHECKPOINT_OPT_IN, CHECKPOINT_REQUEST
from playbooks.kubernetes_nodes import TAINT_KEY
from tests.conftest import spawn, wait_stopped
from tests.playbooks.conftest import ROOT
from tests.playbooks.test_crash_slurm import FAULTS
from tests.playbooks.test_kubernetes import _events, _going, _namespace, _node, _pod


def kube_config(path: Path, kubeconfig: Path, timeout_s: float = 30.0) -> Path:
    path.write_text(f"""
[store]
url = "sqlite:///{path.parent / 'state.db'}"
[playbooks]
max_drained_nodes = 1000
max_cluster_fraction = 1.0
max_rack_fraction = 1.0
[scheduler]
type = "kubernetes"
kubeconfig = "{kubeconfig}"
timeout_s = {timeout_s}
namespace_policies = {{ "k8s-x-train" = "wait" }}
""")
    return path


def follow(config: Path, fault: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "RASWARDEN_FAULT": fault or ""}
    return spawn([sys.executable, "-m", "daemon", "-v", "playbook", "run", "--follow", "--interval", "0.3",
                  "--lease-ttl", "1", "--config", str(config)], config.parent / "follow.log", cwd=ROOT, env=env)


def follow_until_ended(config: Path, journal: StoreJournal) -> None:
    """``playbook run --follow`` until the journal's first action is done or failed (90 s at most)."""
    proc = follow(config)
    try:
        _wait(lambda: journal.actions() and journal.actions()[0].status in ("done", "failed"), 90)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


class Launcher(threading.Thread):
    """What a training job's launcher does: it sees raswarden's request on its pod (the downward API) and answers
    once its checkpoint is written."""

    def __init__(self, kube_lab, ns: str, pod: str):
        super().__init__(daemon=True)
        self.kube_lab, self.ns, self.pod, self.done = kube_lab, ns, pod, threading.Event()
        self.answered: list[str] = []

    def run(self) -> None:
        while not self.done.wait(0.2):
            try:
                annotations = self.kube_lab.core.read_namespaced_pod(self.pod, self.ns).metadata.annotations or {}
            except Exception:  # gone (evicted) or the API server stopped meanwhile: look again
                continue
            request = annotations.get(CHECKPOINT_REQUEST)
            if request and request not in self.answered:
                self.kube_lab.core.patch_namespaced_pod(self.pod, self.ns, {"metadata": {"annotations": {
                    CHECKPOINT_ACK: f"raswarden:checkpointed {request.split()[-1]}"}}})
                self.answered.append(request)


def _incident(store: Store, iid: str, node: str, severity: State) -> None:
    now = time.time()
    store.record_tick([], [Incident(id=iid, fingerprint=f"{node}/gpu3|gpu_memory", entity=f"{node}/gpu3",
                                    kind="accelerator", category="gpu_memory", severity=severity, opened_at=now,
                                    updated_at=now, evidence=["gpu3 HBM correctable ECC 41/h (peers 0.2/h)"])])


def _wait(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.25)
    raise AssertionError(f"condition not met within {timeout} s")


def test_sigkill_at_every_step_boundary_then_restart_on_kubernetes(kube_lab, tmp_path):
    _namespace(kube_lab, "k8s-x-train")
    _node(kube_lab, "kx-1")
    _pod(kube_lab, "k8s-x-train", "gpt-0", "kx-1", ("Job", "gpt"), annotations={CHECKPOINT_OPT_IN: "true"})
    config = kube_config(tmp_path / "raswarden.toml", kube_lab.kubeconfig)
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    _incident(store, "inc-kcrash", "kx-1", State.SUBHEALTHY)
    journal = StoreJournal(store)
    launcher = Launcher(kube_lab, "k8s-x-train", "gpt-0")
    launcher.start()
    killed = []
    try:
        for fault in FAULTS:
            proc = follow(config, fault)
            try:
                rc = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait(10) and -999
            killed.append((fault, rc))
            if journal.actions() and journal.actions()[0].status == "done":
                break
        follow_until_ended(config, journal)
    finally:
        launcher.done.set()
    log = (tmp_path / "follow.log").read_text()
    assert all(rc == -signal.SIGKILL for _, rc in killed), (killed, log[-3000:])  # each fault point was reached
    action = journal.actions()[0]
    assert len(journal.actions()) == 1 and action.status == "done", [(s.type, s.status, s.detail)
                                                                     for s in action.steps]
    assert [s.type for s in action.steps] == ["notify", "checkpoint", "wait_checkpoint", "drain", "requeue"]
    assert action.steps[1].detail["signalled"] == ["k8s-x-train/Job/gpt"]
    node = kube_lab.core.read_node("kx-1")
    assert node.spec.unschedulable and [t.key for t in node.spec.taints].count(TAINT_KEY) == 1
    assert _going(kube_lab, "k8s-x-train", "gpt-0")
    events = _events(kube_lab, "kx-1")
    assert events.count("Drain") == 1 and events.count("Requeue") == 1 and "Evict" not in events, events
    store.close()


def test_a_stopped_api_server_holds_nothing_and_the_step_goes_on_when_it_answers(kube_lab, tmp_path):
    """The API server stopped (SIGSTOP) while a failed node's playbook runs: the pass gives up on it within its
    timeout and does nothing wrong; SIGTERM stops the process promptly; started again with the server back, the
    node is drained once."""
    _node(kube_lab, "ky-1")
    config = kube_config(tmp_path / "raswarden.toml", kube_lab.kubeconfig, timeout_s=3.0)
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    _incident(store, "inc-kstop", "ky-1", State.FAILED)
    journal = StoreJournal(store)
    apiserver = int((kube_lab.dir / "apiserver.pid").read_text())
    os.kill(apiserver, signal.SIGSTOP)
    try:
        out = tmp_path / "stopped.log"
        proc = spawn([sys.executable, "-m", "daemon", "-v", "playbook", "run", "--follow", "--interval", "0.3",
                      "--config", str(config)], out, cwd=ROOT)
        _wait(lambda: "did not answer within 3 s" in out.read_text(), 60)  # a pass met the silent server
        assert not [a for a in journal.actions() if a.status == "failed"]
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        wait_stopped(proc, out, 25, "raswarden playbook run")
        took = time.monotonic() - sent
    finally:
        os.kill(apiserver, signal.SIGCONT)
    text = out.read_text()
    assert proc.returncode == 0, text[-2000:]
    assert took < 15, (took, text[-2000:])
    assert not kube_lab.core.read_node("ky-1").spec.unschedulable  # nothing was done while it did not answer
    follow_until_ended(config, journal)
    action = journal.actions()[0]
    assert action.status == "done", [(s.type, s.status, s.detail) for s in action.steps]
    assert kube_lab.core.read_node("ky-1").spec.unschedulable and _events(kube_lab, "ky-1").count("Drain") == 1
    store.close()
