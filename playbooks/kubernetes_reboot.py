"""Rebooting a node on Kubernetes (:class:`playbooks.scheduler.RebootScheduler`): a part of
:class:`playbooks.kubernetes.KubernetesScheduler`.

The API has no reboot. What a site runs instead is a privileged pod on the node that reboots its host (``chroot /host
systemctl reboot``, the way node-remediation agents do it); raswarden runs it as a Job pinned to the node
(``nodeName``, tolerating raswarden's taint and the cordon's), with the host's PID namespace and its root mounted at
``/host``, only where the operator configured the command (``[scheduler] reboot_command``: a pod that reboots hosts
is theirs to allow).

Whether the node rebooted is read from the kubelet's own word: ``status.nodeInfo.bootID`` is new after every boot.
The request is one patch of the node's annotations (:data:`REBOOT_FROM`, the boot id when it was asked, and
:data:`REBOOT_ASKED_AT`), then the Job, named by the node and that boot id, so asking again is the same request. A
node whose boot id is still the one asked from is ``reboot`` (:data:`playbooks.scheduler.REBOOT`) while its Job exists;
without the Job (a restart between the patch and the Job), or without the patch (one before it), no request is
pending (``NodeInfo.reboot_asked`` false, no boot since), and daemon/operations/reboots.py asks again: the same patch
is kept and the Job made. Once the boot id moved, the node's ``boot_time`` is when its kubelet said it
was ready again (the request's time if that is older: the kubelet does not say when the host booted). A node returned
to service loses the annotations.
"""

from __future__ import annotations

import calendar
import re
from typing import Any

from playbooks import kubernetes_nodes as kn
from playbooks.scheduler import SchedulerError

REBOOT_FROM = "raswarden.io/reboot-from-boot-id"  # (node annotation) its boot id when raswarden asked for a reboot
REBOOT_ASKED_AT = "raswarden.io/reboot-asked-at"  # (node annotation) when, unix seconds
REBOOT_LABEL = "raswarden.io/reboot"  # (Job and pod label) the node a reboot Job reboots
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def boot_id(node: Any) -> str:
    """The node's boot id as its kubelet reports it ("" when none does)."""
    info = node.status.node_info if node.status is not None else None
    return (info.boot_id or "") if info is not None else ""


def reboot_job_name(node: str, from_boot_id: str) -> str:
    """The reboot Job of ``node`` asked from ``from_boot_id`` (a Kubernetes name: at most 63 characters)."""
    base = _UNSAFE.sub("-", node.lower()).strip("-")[:40]
    return f"raswarden-reboot-{base}-{_UNSAFE.sub('', from_boot_id.lower())[:8] or 'unknown'}"


def reboot_state(node: Any) -> tuple[bool, float | None]:
    """From a ``V1Node``: whether a reboot raswarden asked for is still to happen, and the node's boot time as far as
    raswarden knows it (None: not asked since its last boot, or nothing says)."""
    annotations = node.metadata.annotations or {}
    asked_from, asked_at = annotations.get(REBOOT_FROM), annotations.get(REBOOT_ASKED_AT)
    if asked_from is None or asked_at is None:
        return False, None
    try:
        at = float(asked_at)
    except ValueError:
        return False, None
    now_id = boot_id(node)
    if not now_id or now_id == asked_from:
        return True, None
    ready = next((c for c in (node.status.conditions or []) if c.type == "Ready"), None) if node.status else None
    back = at
    if ready is not None and ready.status == "True" and ready.last_transition_time is not None:
        back = max(at, float(calendar.timegm(ready.last_transition_time.utctimetuple())))
    return False, back


class RebootOnKubernetes:
    """A reboot Job (the scheduler's API client, clock and Events are its host's)."""

    core: Any
    batch: Any
    clock: Any
    validation_namespace: str
    validation_image: str
    reboot_command: str

    def reboot(self, node: str) -> None:
        """Reboot ``node`` with ``reboot_command`` in a privileged Job pinned to it; asked again while the node has
        not rebooted, the same Job (one of that name is not made twice)."""
        if not self.reboot_command:
            raise SchedulerError(f"reboot {node}: a reboot on Kubernetes needs [scheduler] reboot_command (the host "
                                 "command a privileged pod on the node runs, e.g. chroot /host systemctl reboot)",
                                 retryable=False)
        if not self.validation_image:
            raise SchedulerError(f"reboot {node}: a reboot Job on Kubernetes needs [scheduler] validation_image",
                                 retryable=False)
        raw = kn._read(self.core, node, "reboot")
        annotations = raw.metadata.annotations or {}
        pending, _ = reboot_state(raw)
        asked_from = annotations.get(REBOOT_FROM) if pending else None
        if asked_from is None:
            asked_from = boot_id(raw) or "unknown"
            self._annotate(node, {REBOOT_FROM: asked_from, REBOOT_ASKED_AT: f"{self.clock():.0f}"}, "reboot")
        name = reboot_job_name(node, asked_from)
        self._create_reboot_job(node, name)
        self._event(node, "Reboot", f"reboot asked: Job {self.validation_namespace}/{name} runs "
                                    f"{self.reboot_command!r} on the node")

    def reboot_job_names(self) -> set[str]:
        """The names of raswarden's reboot Jobs (whatever came of them)."""
        from kubernetes.client import ApiException

        try:
            jobs = self.batch.list_namespaced_job(self.validation_namespace, label_selector=REBOOT_LABEL).items
        except ApiException as exc:
            raise kn._error(exc, "list reboot Jobs") from None
        return {j.metadata.name for j in jobs}

    def _create_reboot_job(self, node: str, name: str) -> None:
        from kubernetes import client

        host = client.V1Volume(name="host", host_path=client.V1HostPathVolumeSource(path="/"))
        container = client.V1Container(
            name="reboot", image=self.validation_image, command=["/bin/sh", "-c", self.reboot_command],
            security_context=client.V1SecurityContext(privileged=True),
            volume_mounts=[client.V1VolumeMount(name="host", mount_path="/host")])
        # never a second pod (a host reboots once); gone a day after it ended
        kn.run_pinned_job(self.batch, self.validation_namespace, node, name, container,
                          {REBOOT_LABEL: _UNSAFE.sub("-", node.lower())[:63].strip("-")},
                          f"reboot Job {name} on {node}", ttl_s=86400, host_pid=True, volumes=[host])
