"""Kubernetes nodes drained and returned as raswarden does it (playbooks/kubernetes_nodes.py), on the real
kube-apiserver of scripts/kube-lab.sh."""

from __future__ import annotations

import pytest

from playbooks.kubernetes_nodes import REASON_ANNOTATION, TAINT_KEY, drain, node_info, resume
from playbooks.scheduler import DOWN, DRAIN, SchedulerError

NOT_READY = "node.kubernetes.io/not-ready"


def _node(kube_lab, name: str, taints=(), unschedulable: bool = False, ready: str | None = None):
    from kubernetes import client

    kube_lab.core.create_node(client.V1Node(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1NodeSpec(unschedulable=unschedulable, taints=[client.V1Taint(**t) for t in taints] or None)))
    if ready is not None:  # what the kubelet would report
        kube_lab.core.patch_node_status(name, {"status": {"conditions": [
            {"type": "Ready", "status": ready, "reason": "KubeletNotReady" if ready != "True" else "KubeletReady",
             "lastHeartbeatTime": "2026-12-04T00:00:00Z", "lastTransitionTime": "2026-12-04T00:00:00Z"}]}})
    return kube_lab.core.read_node(name)


def test_a_drain_cordons_taints_and_says_why_and_a_resume_undoes_only_that(kube_lab):
    core = kube_lab.core
    _node(kube_lab, "kn-a", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}])
    drain(core, "kn-a", "raswarden: gpu_bus on kn-a/gpu3 (inc-1)")
    drain(core, "kn-a", "raswarden: gpu_bus on kn-a/gpu3 (inc-1)")  # again: nothing changes
    node = core.read_node("kn-a")
    assert node.spec.unschedulable is True
    # the API server's own (TaintNodesByCondition: no kubelet has said it is ready) and the operator's stay
    assert sorted(t.key for t in node.spec.taints) == [NOT_READY, "nvidia.com/gpu", TAINT_KEY]
    info = node_info(node)
    assert DRAIN in info.states and info.reason_set_by == "raswarden" and info.reason.endswith("(inc-1)")

    resume(core, "kn-a")
    resume(core, "kn-a")  # again: nothing to undo
    node = core.read_node("kn-a")
    assert not node.spec.unschedulable and REASON_ANNOTATION not in (node.metadata.annotations or {})
    assert sorted((t.key, t.value) for t in node.spec.taints) == [(NOT_READY, None), ("nvidia.com/gpu", "present")]
    assert DRAIN not in node_info(node).states


def test_a_node_someone_else_cordoned_is_neither_taken_over_nor_uncordoned(kube_lab):
    core = kube_lab.core
    _node(kube_lab, "kn-b", unschedulable=True)
    with pytest.raises(SchedulerError, match="someone else") as drained:
        drain(core, "kn-b", "raswarden: host (inc-2)")
    assert not drained.value.retryable
    with pytest.raises(SchedulerError, match="someone else"):
        resume(core, "kn-b")
    node = core.read_node("kn-b")
    assert node.spec.unschedulable is True and not (node.metadata.annotations or {})
    assert [t.key for t in node.spec.taints] == [NOT_READY]
    info = node_info(node)
    assert DRAIN in info.states and info.reason == "cordoned" and info.reason_set_by == ""


def test_a_node_its_kubelet_reports_not_ready_is_down(kube_lab):
    assert DOWN in node_info(_node(kube_lab, "kn-c", ready="False")).states
    assert DOWN not in node_info(_node(kube_lab, "kn-d", ready="True")).states
    assert DOWN not in node_info(_node(kube_lab, "kn-e")).states  # nothing reports it yet: not judged down


def test_refusals_say_what_and_whether_to_try_again(kube_lab, tmp_path):
    from kubernetes import client, config

    with pytest.raises(SchedulerError, match="no such node") as missing:
        drain(kube_lab.core, "kn-nowhere", "raswarden: x")
    assert not missing.value.retryable
    with pytest.raises(SchedulerError, match="begins with"):
        drain(kube_lab.core, "kn-a", "maintenance")  # not a reason of raswarden's
    _node(kube_lab, "kn-f")
    token = kube_lab.token_for("default", "nobody-in-particular")
    weak = client.CoreV1Api(config.new_client_from_config(str(kube_lab.kubeconfig_with(token, tmp_path / "kc"))))
    with pytest.raises(SchedulerError, match="ClusterRole") as refused:
        drain(weak, "kn-f", "raswarden: x")
    assert not refused.value.retryable
