"""The Kubernetes adapter (playbooks/kubernetes.py) on the real kube-apiserver of scripts/kube-lab.sh. No kubelet
runs: the tests write what one would (a pod's phase and readiness) and what the disruption controller would (a
PodDisruptionBudget's status), and an evicted pod stays with its deletion time, as a kubelet would find it."""

from __future__ import annotations

import pytest

from playbooks.kubernetes import (CHECKPOINT_ACK, CHECKPOINT_OPT_IN, CHECKPOINT_REQUEST, DRAINED_AT,
                                  KubernetesScheduler, NamespacePolicy)
from playbooks.kubernetes_nodes import REASON_ANNOTATION
from playbooks.scheduler import DRAIN, REBOOT, SchedulerError

STAMP = "2026-12-04T00:00:00Z"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _namespace(kube_lab, name: str) -> None:
    from kubernetes import client

    kube_lab.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))


def _node(kube_lab, name: str) -> None:
    from kubernetes import client

    kube_lab.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    kube_lab.core.patch_node_status(name, {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": STAMP,
         "lastTransitionTime": STAMP}]}})


def _pod(kube_lab, ns: str, name: str, node: str, owner: tuple[str, str] | None = None, labels=None,
         annotations=None, running: bool = True) -> None:
    """A pod bound to ``node`` (a scheduler would bind it), owned by ``owner`` (kind, name), its status what a
    kubelet would write: running and ready."""
    from kubernetes import client

    refs = None
    if owner is not None:
        refs = [client.V1OwnerReference(api_version="batch/v1" if owner[0] == "Job" else "apps/v1", kind=owner[0],
                                        name=owner[1], uid=f"uid-{owner[1]}", controller=True)]
    kube_lab.core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}, annotations=annotations or {},
                                     owner_references=refs),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="main", image="train:1")])))
    if running:
        kube_lab.core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": STAMP}]}})


def _budget(kube_lab, ns: str, name: str, app: str, allowed: int) -> None:
    """A PodDisruptionBudget over ``app``'s pods, with the status the disruption controller would give it."""
    from kubernetes import client

    try:
        kube_lab.policy.create_namespaced_pod_disruption_budget(ns, client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PodDisruptionBudgetSpec(min_available=1, selector=client.V1LabelSelector(
                match_labels={"app": app}))))
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    generation = kube_lab.policy.read_namespaced_pod_disruption_budget(name, ns).metadata.generation
    kube_lab.policy.patch_namespaced_pod_disruption_budget_status(name, ns, {"status": {
        "observedGeneration": generation, "disruptionsAllowed": allowed, "currentHealthy": 2,
        "desiredHealthy": 2 - allowed, "expectedPods": 2}})


def _going(kube_lab, ns: str, name: str) -> bool:
    from kubernetes import client

    try:
        return kube_lab.core.read_namespaced_pod(name, ns).metadata.deletion_timestamp is not None
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise


def test_jobs_are_pods_grouped_by_controller_and_a_checkpoint_is_asked_and_answered_through_annotations(kube_lab):
    _namespace(kube_lab, "k8s-a")
    for n in ("ka-1", "ka-2"):
        _node(kube_lab, n)
    opt = {CHECKPOINT_OPT_IN: "true"}
    _pod(kube_lab, "k8s-a", "train-0", "ka-1", ("Job", "train"), annotations=opt)
    _pod(kube_lab, "k8s-a", "train-1", "ka-2", ("Job", "train"), annotations=opt)
    _pod(kube_lab, "k8s-a", "exporter-x", "ka-1", ("DaemonSet", "exporter"))
    _pod(kube_lab, "k8s-a", "queued", "", ("Job", "later"), running=False)
    clock = Clock()
    sched = KubernetesScheduler(kube_lab.api, clock=clock)
    state = sched.snapshot()
    train = state.jobs["k8s-a/Job/train"]
    assert train.nodes == ("ka-1", "ka-2") and train.state == "running" and train.checkpoint_opt_in
    assert train.comment == "" and train.user == "namespace k8s-a"
    assert state.jobs["k8s-a/Job/later"].state == "pending" and not state.jobs["k8s-a/Job/later"].nodes
    assert not state.jobs["k8s-a/DaemonSet/exporter"].checkpoint_opt_in
    assert [j.id for j in state.jobs_on("ka-1")] == ["k8s-a/DaemonSet/exporter", "k8s-a/Job/train"]

    sched.signal_job("k8s-a/Job/train", "USR1")
    for pod in ("train-0", "train-1"):
        annotations = kube_lab.core.read_namespaced_pod(pod, "k8s-a").metadata.annotations
        assert annotations[CHECKPOINT_REQUEST] == f"USR1 {int(clock.now)}"
    # the job answers on its pods (its launcher, through the downward API and its own service account): one pod is
    # not yet an answer of the job's
    kube_lab.core.patch_namespaced_pod("train-0", "k8s-a", {"metadata": {"annotations": {
        CHECKPOINT_ACK: "raswarden:checkpointed 1800000060"}}})
    assert sched.snapshot().jobs["k8s-a/Job/train"].comment == ""
    kube_lab.core.patch_namespaced_pod("train-1", "k8s-a", {"metadata": {"annotations": {
        CHECKPOINT_ACK: "raswarden:checkpointed 1800000060"}}})
    assert sched.snapshot().jobs["k8s-a/Job/train"].comment == "raswarden:checkpointed 1800000060"
    with pytest.raises(SchedulerError, match="no running pod"):
        sched.signal_job("k8s-a/Job/none", "USR1")


def test_a_drain_evicts_as_the_budget_allows_and_leaves_daemonsets_and_waiting_namespaces(kube_lab):
    _namespace(kube_lab, "k8s-b")
    _namespace(kube_lab, "k8s-b-batch")
    _node(kube_lab, "kb-1")
    _pod(kube_lab, "k8s-b", "serve-0", "kb-1", ("ReplicaSet", "serve"), labels={"app": "serve"})
    _pod(kube_lab, "k8s-b", "serve-1", "kb-2", ("ReplicaSet", "serve"), labels={"app": "serve"})
    _pod(kube_lab, "k8s-b", "agent-kb-1", "kb-1", ("DaemonSet", "agent"))
    _pod(kube_lab, "k8s-b-batch", "sim-0", "kb-1", ("Job", "sim"))
    _budget(kube_lab, "k8s-b", "serve", "serve", allowed=0)
    clock = Clock()
    sched = KubernetesScheduler(kube_lab.api, policies={"k8s-b-batch": NamespacePolicy.parse("wait")},
                                eviction_deadline_s=600.0, clock=clock)
    reason = "raswarden: inc-7 gpu_memory"

    left = sched.drain("kb-1", reason)  # the budget refuses (429): the drain says so and waits
    assert left.startswith("1 pods held by a PodDisruptionBudget (k8s-b/serve-0)")
    node = sched.snapshot().nodes["kb-1"]
    assert DRAIN in node.states and node.draining.startswith("1 pods to evict (k8s-b/serve-0)")
    assert not _going(kube_lab, "k8s-b", "serve-0")
    clock.now += 2  # within the pause after a refusal: the API is not asked again
    assert sched.drain("kb-1", reason).startswith("1 pods to evict")

    _budget(kube_lab, "k8s-b", "serve", "serve", allowed=1)  # the other replica is healthy again
    clock.now += 10
    assert sched.drain("kb-1", reason) is None
    assert _going(kube_lab, "k8s-b", "serve-0")
    assert not _going(kube_lab, "k8s-b", "agent-kb-1") and not _going(kube_lab, "k8s-b-batch", "sim-0")
    node = sched.snapshot().nodes["kb-1"]
    assert node.draining == "" and node.reason == reason
    annotations = kube_lab.core.read_node("kb-1").metadata.annotations
    assert annotations[DRAINED_AT] == "1800000000"  # the first cordon's time, kept by the drains after it

    sched.requeue("k8s-b-batch/Job/sim")  # a playbook's requeue moves what the namespace's policy left
    assert _going(kube_lab, "k8s-b-batch", "sim-0")
    sched.resume("kb-1")
    assert _condition(kube_lab, "kb-1") == ("False", "Returned")
    assert _events(kube_lab, "kb-1") == ["Drain", "Evict", "Requeue", "Resume"]  # (sorted; the budget's 429: none)
    node = kube_lab.core.read_node("kb-1")
    assert not node.spec.unschedulable
    assert REASON_ANNOTATION not in (node.metadata.annotations or {})
    assert DRAINED_AT not in (node.metadata.annotations or {})


def test_a_budget_that_holds_past_the_deadline_fails_the_drain_and_evict_after_waits_its_time(kube_lab):
    _namespace(kube_lab, "k8s-c")
    _namespace(kube_lab, "k8s-c-slow")
    _node(kube_lab, "kc-1")
    _pod(kube_lab, "k8s-c", "db-0", "kc-1", ("StatefulSet", "db"), labels={"app": "db"})
    _pod(kube_lab, "k8s-c-slow", "etl-0", "kc-1", ("Job", "etl"))
    _budget(kube_lab, "k8s-c", "db", "db", allowed=0)
    clock = Clock()
    sched = KubernetesScheduler(kube_lab.api, policies={"k8s-c-slow": NamespacePolicy.parse("evict-after 1800")},
                                eviction_deadline_s=600.0, clock=clock)
    assert "held by a PodDisruptionBudget" in sched.drain("kc-1", "raswarden: inc-8 host")
    clock.now += 601
    with pytest.raises(SchedulerError, match="held by a PodDisruptionBudget for 601 s") as failed:
        sched.drain("kc-1", "raswarden: inc-8 host")
    assert not failed.value.retryable and not _going(kube_lab, "k8s-c-slow", "etl-0")
    assert kube_lab.core.read_node("kc-1").spec.unschedulable  # the node stays cordoned

    _budget(kube_lab, "k8s-c", "db", "db", allowed=1)
    assert sched.drain("kc-1", "raswarden: inc-8 host") == "1 pods left until their namespace's evict-after"
    assert not _going(kube_lab, "k8s-c-slow", "etl-0")
    clock.now += 1800
    assert sched.drain("kc-1", "raswarden: inc-8 host") is None and _going(kube_lab, "k8s-c-slow", "etl-0")


def test_namespace_policies_parse_or_say_what_is_wrong():
    assert NamespacePolicy.parse("evict") == NamespacePolicy("evict")
    assert NamespacePolicy.parse("evict-after 600").due(600.0) and not NamespacePolicy.parse("wait").due(1e9)
    for bad in ("drop", "evict-after soon", "wait 5"):
        with pytest.raises(ValueError, match="namespace policy"):
            NamespacePolicy.parse(bad)


def test_the_config_names_a_kubernetes_scheduler_with_its_policies(kube_lab, tmp_path):
    from daemon.config import ConfigError, parse
    from daemon.operations.remediation import scheduler_from_config

    cfg = parse({"scheduler": {"type": "kubernetes", "kubeconfig": str(kube_lab.kubeconfig),
                               "eviction_deadline_s": 300, "default_policy": "wait",
                               "namespace_policies": {"etl": "evict-after 1800"}}})
    sched = scheduler_from_config(cfg)
    assert isinstance(sched, KubernetesScheduler) and sched.eviction_deadline_s == 300.0
    assert sched.policy("etl") == NamespacePolicy("evict-after", 1800.0) and sched.policy("x").action == "wait"
    _node(kube_lab, "kd-1")
    assert "kd-1" in sched.snapshot().nodes  # it reaches the API server with the kubeconfig's identity
    with pytest.raises(ConfigError, match="namespace policy 'drop'"):
        parse({"scheduler": {"type": "kubernetes", "namespace_policies": {"etl": "drop"}}})


def test_a_playbook_checkpoints_drains_past_a_budget_and_requeues_on_kubernetes(kube_lab, tmp_path):
    """The engine's playbook on the real API server: the checkpoint asked and answered through annotations, the
    cordon and taint, an eviction the budget refuses and then allows (the drain step waits meanwhile), the training
    job (its namespace's policy: wait) moved by the requeue step; every step journaled."""
    from daemon.store import Store
    from daemon.store.journal import StoreJournal
    from playbooks.engine import Engine, IncidentRef
    from playbooks.guards import Guards
    from playbooks.model import parse

    _namespace(kube_lab, "k8s-e")
    _namespace(kube_lab, "k8s-e-train")
    _node(kube_lab, "ke-1")
    _pod(kube_lab, "k8s-e-train", "llm-0", "ke-1", ("Job", "llm"), annotations={CHECKPOINT_OPT_IN: "true"})
    _pod(kube_lab, "k8s-e", "api-0", "ke-1", ("ReplicaSet", "api"), labels={"app": "api"})
    _budget(kube_lab, "k8s-e", "api", "api", allowed=0)
    clock = Clock()
    sched = KubernetesScheduler(kube_lab.api, policies={"k8s-e-train": NamespacePolicy.parse("wait")}, clock=clock)
    playbook = parse({"name": "k8s", "match": {"states": ["subhealthy"]}, "steps": [
        {"step": "checkpoint"}, {"step": "wait_checkpoint", "confirm": "comment",
                                 "comment_pattern": "raswarden:checkpointed", "timeout": "30m"},
        {"step": "drain"}, {"step": "requeue"}]})
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    journal = StoreJournal(store)
    eng = Engine(sched, journal, [playbook], Guards(max_drained_nodes=4, max_cluster_fraction=1.0), clock=clock)
    action = eng.submit(IncidentRef("inc-k1", "ke-1/gpu2", "accelerator", "subhealthy", "gpu_memory"),
                        sched.snapshot())

    def steps():
        return [(s.type, s.status) for s in journal.get(action.key).steps]

    eng.run()
    assert steps()[:2] == [("checkpoint", "done"), ("wait_checkpoint", "started")]
    pod = kube_lab.core.read_namespaced_pod("llm-0", "k8s-e-train")
    assert pod.metadata.annotations[CHECKPOINT_REQUEST].startswith("USR1 ")
    assert not kube_lab.core.read_node("ke-1").spec.unschedulable  # no drain before the checkpoint is done

    kube_lab.core.patch_namespaced_pod("llm-0", "k8s-e-train", {"metadata": {"annotations": {
        CHECKPOINT_ACK: f"raswarden:checkpointed {int(clock.now) + 40}"}}})
    clock.now += 60
    eng.run()
    assert steps()[1:3] == [("wait_checkpoint", "done"), ("drain", "started")]
    assert "held by a PodDisruptionBudget" in journal.get(action.key).steps[2].detail["draining"]
    assert kube_lab.core.read_node("ke-1").spec.unschedulable and not _going(kube_lab, "k8s-e", "api-0")

    _budget(kube_lab, "k8s-e", "api", "api", allowed=1)
    clock.now += 60
    eng.run()
    assert steps() == [("checkpoint", "done"), ("wait_checkpoint", "done"), ("drain", "done"), ("requeue", "done")]
    assert journal.get(action.key).status == "done"
    assert _going(kube_lab, "k8s-e", "api-0") and _going(kube_lab, "k8s-e-train", "llm-0")
    node = sched.snapshot().nodes["ke-1"]
    assert DRAIN in node.states and node.reason.startswith("raswarden: inc-k1") and not node.draining
    # what kubectl describe node shows: raswarden's condition and an Event per action
    assert _condition(kube_lab, "ke-1") == ("True", "Drained")
    assert _events(kube_lab, "ke-1") == ["Checkpoint", "Drain", "Evict", "Requeue"]  # (sorted)
    store.close()


def _condition(kube_lab, node: str) -> tuple[str, str] | None:
    from playbooks.kubernetes import CONDITION

    found = [c for c in kube_lab.core.read_node(node).status.conditions or [] if c.type == CONDITION]
    return (found[0].status, found[0].reason) if found else None


def _events(kube_lab, node: str) -> list[str]:
    events = kube_lab.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    assert all(e.source.component == "raswarden" for e in events)
    return sorted(e.reason for e in events)


def test_the_shipped_cluster_role_is_enough_for_every_action_and_nothing_more(kube_lab, tmp_path):
    """packaging/kubernetes/rbac.yaml applied to the RBAC-enforcing API server: the adapter acts through all of its
    actions as that service account; what the role does not grant is refused by the API server, and the adapter
    says which role to give."""
    from kubernetes import client, utils

    from tests.conftest import ROOT

    _namespace(kube_lab, "raswarden")
    utils.create_from_yaml(kube_lab.api, str(ROOT / "packaging" / "kubernetes" / "rbac.yaml"))
    config = kube_lab.kubeconfig_with(kube_lab.token_for("raswarden", "raswarden"), tmp_path / "sa.kubeconfig")
    clock = Clock()
    sched = KubernetesScheduler.from_kubeconfig(str(config), clock=clock, validation_namespace="k8s-f",
                                                validation_image="diag:1")
    _namespace(kube_lab, "k8s-f")
    _node(kube_lab, "kf-1")
    _pod(kube_lab, "k8s-f", "w-0", "kf-1", ("Job", "w"), annotations={CHECKPOINT_OPT_IN: "true"},
         labels={"app": "w"})
    _budget(kube_lab, "k8s-f", "w", "w", allowed=0)

    assert "k8s-f/Job/w" in sched.snapshot().jobs
    sched.signal_job("k8s-f/Job/w", "USR1")
    assert "held by a PodDisruptionBudget" in sched.drain("kf-1", "raswarden: inc-f host")
    _budget(kube_lab, "k8s-f", "w", "w", allowed=1)
    clock.now += 60
    assert sched.drain("kf-1", "raswarden: inc-f host") is None and _going(kube_lab, "k8s-f", "w-0")
    sched.requeue("k8s-f/Job/w")
    sched.resume("kf-1")
    assert _condition(kube_lab, "kf-1") == ("False", "Returned")
    assert _events(kube_lab, "kf-1") == ["Checkpoint", "Drain", "Evict", "Resume"]
    sched.reserve("kf-1", "raswarden-check-kf-1", 600)  # an idle check: hold, job, outcome, release
    job = sched.submit_validation("kf-1", "raswarden-check-kf-1", "raswarden-check-kf-1-1", "true", 60, "")
    assert sched.job_outcome(job).state == "pending"
    sched.release("raswarden-check-kf-1")
    assert not kube_lab.core.read_node("kf-1").spec.unschedulable
    sched.reboot_command = "chroot /host systemctl reboot"
    sched.reboot("kf-1")  # a reboot Job, and the snapshot then lists raswarden's reboot Jobs
    assert REBOOT in sched.snapshot().nodes["kf-1"].states

    core = client.CoreV1Api(sched.api)
    for forbidden in (lambda: core.delete_namespace("k8s-f"), lambda: core.list_secret_for_all_namespaces(),
                      lambda: core.delete_namespaced_pod("w-0", "k8s-f"),
                      lambda: core.patch_namespaced_pod_status("w-0", "k8s-f", {"status": {"phase": "Failed"}})):
        with pytest.raises(client.ApiException) as refused:
            forbidden()
        assert refused.value.status == 403

    stranger = KubernetesScheduler.from_kubeconfig(str(kube_lab.kubeconfig_with(
        kube_lab.token_for("raswarden", "someone-else"), tmp_path / "other.kubeconfig")))
    with pytest.raises(SchedulerError, match="ClusterRole raswarden ships") as denied:
        stranger.snapshot()
    assert not denied.value.retryable


def _job_status(kube_lab, ns: str, name: str, status: dict) -> None:
    """What the Job controller would write (no controller manager runs in the lab)."""
    kube_lab.batch.patch_namespaced_job_status(name, ns, {"status": status})


def _validator(kube_lab, clock) -> KubernetesScheduler:
    return KubernetesScheduler(kube_lab.api, clock=clock, validation_namespace="k8s-v", validation_image="diag:1")


def test_a_repaired_node_returns_only_once_its_validation_job_passed(kube_lab):
    from playbooks.kubernetes import RESERVED, RETURNING, VALIDATION_LABEL

    _namespace(kube_lab, "k8s-v")
    _node(kube_lab, "kv-1")
    clock = Clock()
    sched = _validator(kube_lab, clock)
    assert sched.drain("kv-1", "raswarden: inc-v1 gpu_memory") is None
    # the validator's order: hold, return into the hold, run the job, read it, release
    sched.reserve("kv-1", "raswarden-validate-kv-1", 3600)
    sched.resume("kv-1")
    node = kube_lab.core.read_node("kv-1")
    assert node.spec.unschedulable and node.metadata.annotations[RESERVED] == "raswarden-validate-kv-1"
    assert RETURNING in node.metadata.annotations  # returned once the hold is released after a pass
    job = sched.submit_validation("kv-1", "raswarden-validate-kv-1", "raswarden-validate-kv-1-5-1",
                                  "dcgmi diag -r 2", 1800, "/tmp/out")
    assert job == "k8s-v/raswarden-validate-kv-1-5-1"
    assert sched.submit_validation("kv-1", "raswarden-validate-kv-1", "raswarden-validate-kv-1-5-1",
                                   "dcgmi diag -r 2", 1800, "/tmp/out") == job  # a restart submits nothing twice
    made = kube_lab.batch.read_namespaced_job("raswarden-validate-kv-1-5-1", "k8s-v")
    pod = made.spec.template.spec
    assert pod.node_name == "kv-1" and pod.containers[0].command == ["/bin/sh", "-c", "dcgmi diag -r 2"]
    assert {t.key for t in pod.tolerations} == {"raswarden.io/drained", "node.kubernetes.io/unschedulable"}
    assert made.spec.active_deadline_seconds == 1800 and made.spec.backoff_limit == 0
    assert sched.job_outcome(job).state == "pending"

    # its pod on the node is never evicted by a drain
    _pod(kube_lab, "k8s-v", "raswarden-validate-kv-1-5-1-x", "kv-1", ("Job", "raswarden-validate-kv-1-5-1"),
         labels={VALIDATION_LABEL: "raswarden-validate-kv-1-5-1"})
    start = "2026-12-04T00:00:00Z"
    _job_status(kube_lab, "k8s-v", "raswarden-validate-kv-1-5-1", {"active": 1, "startTime": start})
    assert sched.job_outcome(job).state == "running"
    assert sched.snapshot().nodes["kv-1"].draining == ""
    _job_status(kube_lab, "k8s-v", "raswarden-validate-kv-1-5-1", {
        "active": 0, "succeeded": 1, "startTime": start, "completionTime": "2026-12-04T00:20:00Z",
        "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": start},
                       {"type": "Complete", "status": "True", "lastTransitionTime": start}]})
    assert sched.job_outcome(job).state == "passed"
    sched.release("raswarden-validate-kv-1")
    node = kube_lab.core.read_node("kv-1")
    assert not node.spec.unschedulable and not ({RESERVED, RETURNING} & set(node.metadata.annotations or {}))
    assert _condition(kube_lab, "kv-1") == ("False", "Returned")
    sched.release("raswarden-validate-kv-1")  # again: nothing held, nothing to do
    assert sched.job_outcome("k8s-v/none").state == "gone"


def test_a_failed_validation_keeps_the_node_drained_and_an_idle_check_returns_a_node_it_held(kube_lab):
    from playbooks.kubernetes import RESERVED

    _namespace(kube_lab, "k8s-w")
    for n in ("kw-1", "kw-2"):
        _node(kube_lab, n)
    clock = Clock()
    sched = KubernetesScheduler(kube_lab.api, clock=clock, validation_namespace="k8s-w", validation_image="diag:1")
    sched.drain("kw-1", "raswarden: inc-w1 gpu_bus")
    sched.reserve("kw-1", "raswarden-validate-kw-1", 3600)
    sched.resume("kw-1")
    job = sched.submit_validation("kw-1", "raswarden-validate-kw-1", "raswarden-validate-kw-1-1-1", "false", 60, "")
    start = "2026-12-04T00:00:00Z"
    _job_status(kube_lab, "k8s-w", "raswarden-validate-kw-1-1-1", {
        "failed": 1, "startTime": start, "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "lastTransitionTime": start},
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer "
             "than specified deadline", "lastTransitionTime": start}]})
    outcome = sched.job_outcome(job)
    assert outcome.state == "timeout" and "DeadlineExceeded" in outcome.detail
    sched.drain("kw-1", "raswarden: validation failed (repair order 1)")  # what the validator does on a failure
    sched.release("raswarden-validate-kw-1")
    node = kube_lab.core.read_node("kw-1")
    assert node.spec.unschedulable and RESERVED not in node.metadata.annotations
    assert sched.snapshot().nodes["kw-1"].reason == "raswarden: validation failed (repair order 1)"

    # an idle check holds a node in service, and its release returns it
    sched.reserve("kw-2", "raswarden-check-kw-2", 3600)
    assert kube_lab.core.read_node("kw-2").spec.unschedulable
    sched.release("raswarden-check-kw-2")
    assert not kube_lab.core.read_node("kw-2").spec.unschedulable
    with pytest.raises(SchedulerError, match="validation_image"):
        KubernetesScheduler(kube_lab.api).submit_validation("kw-2", "r", "raswarden-check-kw-2-1", "true", 60, "")


def test_raswardens_view_of_a_node_is_its_condition_as_incidents_open_and_close(kube_lab, tmp_path):
    """What node-problem-detector does for its checks: raswarden's view of each node (the worst open incident on it,
    or healthy) as a node condition, told when the node's incidents change."""
    import time

    from daemon.config import parse
    from daemon.judgement.incidents import Incident
    from daemon.operations.remediation import Remediation
    from daemon.store import Store
    from detectors.schema import State
    from playbooks.kubernetes import HEALTH_CONDITION

    _node(kube_lab, "kh-1")
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    sched = KubernetesScheduler(kube_lab.api)
    remediation = Remediation.from_config(parse({"playbooks": {"mode": "dry-run"}}), store, sched)
    now = time.time()
    incident = Incident(id="inc-h1", fingerprint="kh-1/gpu2|gpu_memory", entity="kh-1/gpu2", kind="accelerator",
                        category="gpu_memory", severity=State.SUBHEALTHY, opened_at=now, updated_at=now,
                        evidence=["gpu2 HBM correctable ECC 41/h"])
    store.record_tick([], [incident])
    remediation.step()

    def condition():
        found = [c for c in kube_lab.core.read_node("kh-1").status.conditions or [] if c.type == HEALTH_CONDITION]
        return (found[0].status, found[0].reason, found[0].message) if found else None

    assert condition() == ("False", "Subhealthy", "gpu_memory on kh-1/gpu2 (inc-h1)")
    incident.closed_at, incident.updated_at, incident.close_reason = now + 60, now + 60, "recovered"
    store.record_tick([], [incident])
    remediation.step()
    assert condition() == ("True", "Healthy", "no open incident")
    store.close()


def test_the_shipped_deployment_is_accepted_by_the_api_server_and_its_config_by_raswarden(kube_lab):
    """packaging/kubernetes/deployment.yaml, created with a server-side dry run (what `kubectl apply
    --dry-run=server` asks): every object passes the API server's validation and admission; a selector that does not
    match its pods would not. The configuration it mounts is one raswarden reads, its scheduler in-cluster."""
    import copy
    import tomllib

    import yaml
    from kubernetes import client, utils

    from daemon.config import parse
    from tests.conftest import ROOT

    path = ROOT / "packaging" / "kubernetes" / "deployment.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert [d["kind"] for d in docs] == ["ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"]
    try:
        _namespace(kube_lab, "raswarden")
    except client.ApiException as exc:  # made by the role's test before this one
        assert exc.status == 409
    created = utils.create_from_yaml(kube_lab.api, yaml_objects=docs, dry_run="All")
    assert len(created) == 4
    assert not client.AppsV1Api(kube_lab.api).list_namespaced_deployment("raswarden").items  # a dry run
    bad = copy.deepcopy(docs[2])
    bad["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "other"}  # the server's own check
    with pytest.raises(client.ApiException) as refused:
        client.AppsV1Api(kube_lab.api).create_namespaced_deployment("raswarden", bad, dry_run="All")
    assert refused.value.status == 422 and "selector" in refused.value.body
    cfg = parse(tomllib.loads(docs[0]["data"]["raswarden.toml"]))
    assert cfg.scheduler["type"] == "kubernetes" and cfg.scheduler.get("kubeconfig", "") == "" and \
        cfg.guards.mode == "dry-run"


def test_an_automatic_gpu_reset_and_its_validation_return_a_node_through_the_validator(kube_lab, tmp_path):
    """The daemon's own Remediation on the adapter: a GPU whose Xid asks for a reset is drained, reset by a Job
    pinned to its node, validated by a second Job, and uncordoned, with no technician (the tests write what the Job
    controller would)."""
    import time

    from daemon.config import Config
    from daemon.judgement.incidents import Incident
    from daemon.operations.remediation import Remediation
    from daemon.store import Store
    from detectors.schema import State

    _namespace(kube_lab, "k8s-r")
    for n in range(1, 5):
        _node(kube_lab, f"kr-{n}")
    cfg = Config()
    cfg.guards.max_cluster_fraction = 0.5
    cfg.repairs.reset_command = "nvidia-smi -r -i {gpus}"
    cfg.repairs.validation_command = "dcgmi diag -r 2"
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    sched = KubernetesScheduler(kube_lab.api, validation_namespace="k8s-r", validation_image="diag:1")
    rem = Remediation.from_config(cfg, store, sched)
    now = time.time()
    store.record_tick([], [Incident("inc-r1", "fp-r1", "kr-1/gpu3", "accelerator", "gpu_compute", State.FAILED, now,
                                    now, evidence=["Xid 46 on kr-1/gpu3: GPU timeout (NVIDIA: RESET_GPU; "
                                                   "repair: reset)"])], now=now)

    def until(cond) -> None:
        for _ in range(20):
            rem.step()
            if cond():
                return
        raise AssertionError([(o.state, o.history[-1]) for o in rem.repairs.orders(None)])

    until(lambda: any("reset_job" in o.history[-1] for o in rem.repairs.orders()))
    (order,) = rem.repairs.orders()
    reset = kube_lab.batch.read_namespaced_job(order.history[-1]["job_name"], "k8s-r")
    assert reset.spec.template.spec.node_name == "kr-1"
    assert reset.spec.template.spec.containers[0].command == ["/bin/sh", "-c", "nvidia-smi -r -i 3"]
    assert kube_lab.core.read_node("kr-1").spec.unschedulable  # held, cordoned, while the reset runs
    done = {"active": 0, "succeeded": 1, "startTime": STAMP, "completionTime": STAMP,
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": STAMP},
                           {"type": "Complete", "status": "True", "lastTransitionTime": STAMP}]}
    _job_status(kube_lab, "k8s-r", reset.metadata.name, done)
    until(lambda: rem.repairs.order(order.id).state == "validating")
    validation = rem.repairs.order(order.id).history[-1]["job_name"]
    assert kube_lab.batch.read_namespaced_job(validation, "k8s-r").spec.template.spec.containers[0].command[-1] == \
        "dcgmi diag -r 2"
    _job_status(kube_lab, "k8s-r", validation, done)
    until(lambda: rem.repairs.order(order.id).state == "closed")
    assert [(h["to"], h["by"]) for h in rem.repairs.order(order.id).history] == [
        (s, "raswarden") for s in ("open", "in_progress", "repaired", "validating", "closed")]
    assert not kube_lab.core.read_node("kr-1").spec.unschedulable  # back, with no technician
    store.close()
