"""Automatic reboots on Kubernetes, on a real kube-apiserver, through the daemon's own Remediation: a node whose Xid
asks for a reboot is rebooted by a privileged Job pinned to it, seen back by its kubelet's new boot id, validated, and
uncordoned with no technician; a node whose boot id never moves is cordoned for a technician expecting an inspection;
a reboot asked whose Job was never made is asked again, as is one lost before it was asked; a cluster without a
reboot command leaves it to a technician.
No kubelet runs in the lab: the tests write what one would (a new boot id, Ready again) and what the Job controller
would."""

from __future__ import annotations

import time

from daemon.config import Config
from daemon.judgement.incidents import Incident
from daemon.operations.remediation import Remediation
from daemon.store import Store
from detectors.schema import State
from playbooks.kubernetes import KubernetesScheduler
from playbooks.kubernetes_reboot import REBOOT_ASKED_AT, REBOOT_FROM, REBOOT_LABEL
from playbooks.scheduler import REBOOT, SchedulerError
from tests.playbooks.test_kubernetes import STAMP, _job_status, _namespace, _node

NS = "k8s-rb"
COMMAND = "chroot /host systemctl reboot"
DONE = {"active": 0, "succeeded": 1, "startTime": STAMP, "completionTime": STAMP,
        "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": STAMP},
                       {"type": "Complete", "status": "True", "lastTransitionTime": STAMP}]}


def _boot(kube_lab, node: str, boot_id: str, ready_at: str = STAMP) -> None:
    """What a kubelet writes as its node starts: its boot id, and Ready since ``ready_at``."""
    info = {"architecture": "amd64", "bootID": boot_id, "containerRuntimeVersion": "containerd://1.7.0",
            "kernelVersion": "6.1.0", "kubeProxyVersion": "", "kubeletVersion": "v1.30.0", "machineID": node,
            "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12", "systemUUID": node}
    kube_lab.core.patch_node_status(node, {"status": {"nodeInfo": info, "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": ready_at,
         "lastTransitionTime": ready_at}]}})


def _xid_79(iid: str, gpu: str, at: float) -> Incident:
    return Incident(iid, f"fp-{iid}", gpu, "accelerator", "gpu_bus", State.FAILED, at, at, evidence=[
        f"Xid 79 on {gpu}: GPU has fallen off the bus (NVIDIA: RESTART_BM; repair: reboot)"])


def _remediation(kube_lab, tmp_path, ns: str, reboot_command: str = COMMAND, timeout_s: float = 1800.0):
    cfg = Config()
    cfg.guards.max_cluster_fraction = 0.5
    cfg.repairs.reboot = True
    cfg.repairs.reboot_timeout_s = timeout_s
    cfg.repairs.validation_command = "dcgmi diag -r 2"
    store = Store(f"sqlite:///{tmp_path / f'{ns}.db'}")
    sched = KubernetesScheduler(kube_lab.api, validation_namespace=ns, validation_image="diag:1",
                                reboot_command=reboot_command)
    return store, sched, Remediation.from_config(cfg, store, sched)


def _until(rem, cond) -> None:
    for _ in range(20):
        rem.step()
        if cond():
            return
    raise AssertionError([(o.state, o.history[-1]) for o in rem.repairs.orders(None)])


def _first_boot(node: str) -> str:
    """The boot id a test's node starts with."""
    return f"{node[-1]}0000000-aaaa-4bbb-8ccc-{node.encode().hex()[-12:]:0>12}"


def _cluster(kube_lab, ns: str, prefix: str) -> None:
    """A namespace for raswarden's Jobs and four nodes ``prefix-1..4``, each booted once."""
    _namespace(kube_lab, ns)
    for n in range(1, 5):
        _node(kube_lab, f"{prefix}-{n}")
        _boot(kube_lab, f"{prefix}-{n}", _first_boot(f"{prefix}-{n}"))


def _reboot_jobs(kube_lab, ns: str = NS) -> list:
    return kube_lab.batch.list_namespaced_job(ns, label_selector=REBOOT_LABEL).items


def test_reboot_by_a_job_on_the_node_validated_and_returned(kube_lab, tmp_path):
    _cluster(kube_lab, NS, "rba")
    store, sched, rem = _remediation(kube_lab, tmp_path, NS)
    store.record_tick([], [_xid_79("inc-k1", "rba-1/gpu2", time.time())], now=time.time())
    _until(rem, lambda: bool(_reboot_jobs(kube_lab)))
    (job,) = _reboot_jobs(kube_lab)
    pod = job.spec.template.spec
    assert pod.node_name == "rba-1" and pod.host_pid and pod.containers[0].security_context.privileged
    assert pod.containers[0].command == ["/bin/sh", "-c", COMMAND]
    assert pod.containers[0].volume_mounts[0].mount_path == "/host" and pod.volumes[0].host_path.path == "/"
    assert job.spec.backoff_limit == 0
    node = kube_lab.core.read_node("rba-1")
    assert node.spec.unschedulable and node.metadata.annotations[REBOOT_FROM] == _first_boot("rba-1")
    assert REBOOT in sched.snapshot().nodes["rba-1"].states
    rem.step()
    rem.step()
    assert len(_reboot_jobs(kube_lab)) == 1  # asked once while it reboots
    (order,) = rem.repairs.orders()
    assert order.state == "in_progress"

    _job_status(kube_lab, NS, job.metadata.name, DONE)  # the pod ran the command; the host went down and came back
    back = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    _boot(kube_lab, "rba-1", "1bbbbbbb-aaaa-4bbb-8ccc-000000000000", ready_at=back)
    _until(rem, lambda: rem.repairs.order(order.id).state == "validating")
    assert "rebooted by raswarden" in rem.repairs.order(order.id).history[2]["note"]
    validation = rem.repairs.order(order.id).history[-1]["job_name"]
    _job_status(kube_lab, NS, validation, DONE)
    _until(rem, lambda: rem.repairs.order(order.id).state == "closed")
    assert [(h["to"], h["by"]) for h in rem.repairs.order(order.id).history] == [
        (s, "raswarden") for s in ("open", "in_progress", "repaired", "validating", "closed")]
    node = kube_lab.core.read_node("rba-1")
    assert not node.spec.unschedulable  # back in service, no technician
    assert not {REBOOT_FROM, REBOOT_ASKED_AT} & set(node.metadata.annotations or {})
    for other in ("rba-2", "rba-3", "rba-4"):
        assert not kube_lab.core.read_node(other).spec.unschedulable
    store.close()


def test_a_node_that_does_not_reboot_is_left_for_a_technician_and_a_lost_request_is_asked_again(kube_lab, tmp_path):
    ns = NS + "-2"
    _cluster(kube_lab, ns, "rbb")
    store, sched, rem = _remediation(kube_lab, tmp_path, ns, timeout_s=3.0)
    # a request whose Job was never made (raswarden stopped between the two): not pending, so asked again
    kube_lab.core.patch_node("rbb-2", {"metadata": {"annotations": {
        REBOOT_FROM: _first_boot("rbb-2"), REBOOT_ASKED_AT: f"{time.time() - 60:.0f}"}}})
    info = sched.snapshot().nodes["rbb-2"]
    assert REBOOT not in info.states and info.reboot_asked is False and info.boot_time is None  # asked again
    sched.reboot("rbb-2")
    assert [j.spec.template.spec.node_name for j in _reboot_jobs(kube_lab, ns)] == ["rbb-2"]
    assert REBOOT in sched.snapshot().nodes["rbb-2"].states
    kube_lab.batch.delete_namespaced_job(_reboot_jobs(kube_lab, ns)[0].metadata.name, ns)

    # a node whose boot id never moves: cordoned again for a technician once the timeout passes
    store.record_tick([], [_xid_79("inc-k2", "rbb-1/gpu0", time.time())], now=time.time())
    _until(rem, lambda: any(j.spec.template.spec.node_name == "rbb-1" for j in _reboot_jobs(kube_lab, ns)))
    deadline = time.monotonic() + 30
    while not any(o.expected == "inspect" for o in rem.repairs.orders()) and time.monotonic() < deadline:
        rem.step()
        time.sleep(0.5)
    (order,) = rem.repairs.orders()
    assert order.state == "open" and order.expected == "inspect" and "not back" in order.evidence[-1]
    node = kube_lab.core.read_node("rbb-1")
    assert node.spec.unschedulable
    assert "raswarden: reboot failed" in node.metadata.annotations["raswarden.io/drain-reason"]
    store.close()


def test_a_cluster_without_a_reboot_command_leaves_the_reboot_to_a_technician(kube_lab, tmp_path):
    _namespace(kube_lab, "k8s-rb-3")
    for n in range(1, 5):
        _node(kube_lab, f"rbc-{n}")
    cfg = Config()
    cfg.guards.max_cluster_fraction = 0.5
    cfg.repairs.reboot = True
    store = Store(f"sqlite:///{tmp_path / 'none.db'}")
    sched = KubernetesScheduler(kube_lab.api, validation_namespace="k8s-rb-3", validation_image="diag:1")
    rem = Remediation.from_config(cfg, store, sched)
    store.record_tick([], [_xid_79("inc-k3", "rbc-1/gpu1", time.time())], now=time.time())
    _until(rem, lambda: any("no automatic reboot" in o.expected_why for o in rem.repairs.orders()))
    (order,) = rem.repairs.orders()
    assert order.state == "open" and order.expected == "reboot"
    assert "[scheduler] reboot_command" in order.expected_why
    assert kube_lab.core.read_node("rbc-1").spec.unschedulable
    assert not kube_lab.batch.list_namespaced_job("k8s-rb-3").items
    store.close()


class _LostFirstRequest(KubernetesScheduler):
    """The first reboot request is lost before it reaches the API server (raswarden stopped between moving the
    orders and asking): a retryable error, the orders already in progress."""

    lost = 0

    def reboot(self, node: str) -> None:
        if not self.lost:
            self.lost += 1
            raise SchedulerError(f"reboot {node}: the API server did not answer within 30 s", retryable=True)
        super().reboot(node)


def test_a_reboot_request_lost_after_the_orders_moved_is_asked_again(kube_lab, tmp_path):
    ns = NS + "-4"
    _cluster(kube_lab, ns, "rbd")
    cfg = Config()
    cfg.guards.max_cluster_fraction = 0.5
    cfg.repairs.reboot = True
    store = Store(f"sqlite:///{tmp_path / 'lost.db'}")
    sched = _LostFirstRequest(kube_lab.api, validation_namespace=ns, validation_image="diag:1", reboot_command=COMMAND)
    rem = Remediation.from_config(cfg, store, sched)
    store.record_tick([], [_xid_79("inc-k4", "rbd-1/gpu5", time.time())], now=time.time())
    _until(rem, lambda: sched.lost == 1)
    (order,) = rem.repairs.orders()
    assert order.state == "in_progress"  # moved, the request lost
    info = sched.snapshot().nodes["rbd-1"]
    assert info.reboot_asked is False and info.boot_time is None
    _until(rem, lambda: bool(_reboot_jobs(kube_lab, ns)))  # asked again on a later pass, once
    rem.step()
    assert [j.spec.template.spec.node_name for j in _reboot_jobs(kube_lab, ns)] == ["rbd-1"]
    assert REBOOT in sched.snapshot().nodes["rbd-1"].states
    store.close()
