"""Validating a repaired node on Kubernetes (:class:`playbooks.scheduler.ValidationScheduler`): a part of
:class:`playbooks.kubernetes.KubernetesScheduler` (its module docstring says how a hold and a validation Job work)."""

from __future__ import annotations

import re
from typing import Any

from playbooks import kubernetes_nodes as kn
from playbooks.kubernetes_reboot import REBOOT_ASKED_AT, REBOOT_FROM
from playbooks.scheduler import JobOutcome, SchedulerError

RESERVED = "raswarden.io/reserved"  # (node annotation) the name of raswarden's validation hold on it
RETURNING = "raswarden.io/return-on-release"  # (node annotation) a return asked during the hold: done at release
VALIDATION_LABEL = "raswarden.io/validation"  # (pod and Job label) the validation job it belongs to
DRAINED_AT = "raswarden.io/drained-at"  # (node annotation) when raswarden cordoned it, for evict-after and deadlines
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


class ValidationOnKubernetes:
    """A validation hold and Job (the scheduler's API client, clock, Events and condition are its host's)."""

    api: Any
    core: Any
    batch: Any
    clock: Any
    validation_namespace: str
    validation_image: str
    _retry_at: dict

    def reserve(self, node: str, name: str, duration_s: float) -> None:
        """Hold ``node`` for raswarden's validation job alone: the cordon, marked with the hold's name. A node in
        service is cordoned for it (and returned at the release); one someone else cordoned is refused."""
        raw = kn._read(self.core, node, "reserve")
        annotations = raw.metadata.annotations or {}
        if annotations.get(RESERVED) == name:
            return
        extra = {RESERVED: name}
        if kn.REASON_ANNOTATION not in annotations:  # in service: cordoned for the hold, returned at its release
            kn.drain(self.core, node, f"raswarden: held for {name}", extra_annotations={
                DRAINED_AT: f"{self.clock():.0f}", **extra, RETURNING: "true"})
            self._condition(node, "True", "Held", f"held for raswarden's validation job {name}")
        else:
            self._annotate(node, extra, "reserve")
        self._event(node, "Hold", f"held for raswarden's validation job {name} (up to {duration_s:.0f} s)")

    def release(self, name: str) -> None:
        """End the hold ``name``: the node returns to service if a return was asked during it (and no drain came
        after), else it stays drained. A hold already gone is not an error."""
        from kubernetes.client import ApiException

        try:
            held = [n for n in self.core.list_node().items if (n.metadata.annotations or {}).get(RESERVED) == name]
        except ApiException as exc:
            raise kn._error(exc, f"release {name}") from None
        for raw in held:
            node = raw.metadata.name
            if RETURNING in (raw.metadata.annotations or {}):
                kn.resume(self.core, node, extra_annotations=(DRAINED_AT, RESERVED, RETURNING, REBOOT_FROM,
                                                              REBOOT_ASKED_AT))
                self._retry_at.pop(node, None)
                self._condition(node, "False", "Returned", f"validation {name} passed: returned to service")
                self._event(node, "Resume", f"validation hold {name} released: returned to service")
            else:
                self._annotate(node, {RESERVED: None}, "release")
                self._event(node, "Release", f"validation hold {name} released; the node stays drained")

    def submit_validation(self, node: str, reservation: str, name: str, command: str, time_limit_s: float,
                          output: str) -> str:
        """Run ``command`` (a shell line) as a Job pinned to ``node`` (``namespace/name``; a Job of that name is
        returned instead of a second). ``output``: where Slurm would write it; here the pod's log holds it."""
        from kubernetes import client

        job_name = name.lower().replace("_", "-")
        if not _K8S_NAME.match(job_name):
            raise SchedulerError(f"validation job name {name!r} is not a Kubernetes name", retryable=False)
        if not self.validation_image:
            raise SchedulerError("a validation job on Kubernetes needs [scheduler] validation_image", retryable=False)
        ns = self.validation_namespace
        container = client.V1Container(name="validate", image=self.validation_image, command=["/bin/sh", "-c", command])
        kn.run_pinned_job(self.batch, ns, node, job_name, container, {VALIDATION_LABEL: job_name},
                          f"submit {job_name} on {node}", annotations={RESERVED: reservation},
                          deadline_s=max(1, int(time_limit_s)))
        self._event(node, "Validate", f"validation job {ns}/{job_name}: {command}")
        return f"{ns}/{job_name}"

    def job_outcome(self, job_id: str) -> JobOutcome:
        """How the validation Job stands, from its status (``gone`` once it is deleted)."""
        from kubernetes.client import ApiException

        ns, _, name = job_id.partition("/")
        if not ns or not name:
            raise SchedulerError(f"job {job_id!r}: not a validation Job of Kubernetes (namespace/name)",
                                 retryable=False)
        try:
            job = self.batch.read_namespaced_job(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return JobOutcome("gone", detail=f"job {job_id} not found")
            raise kn._error(exc, f"job {job_id}") from None
        status = job.status
        conditions = {c.type: c for c in (status.conditions or []) if c.status == "True"} if status else {}
        if "Complete" in conditions or (status and (status.succeeded or 0) > 0):
            return JobOutcome("passed", 0, f"job {job_id} complete")
        if "Failed" in conditions or (status and (status.failed or 0) > 0):
            why = conditions.get("Failed")
            reason = why.reason if why is not None else "failed"
            state = "timeout" if reason == "DeadlineExceeded" else "failed"
            return JobOutcome(state, self._exit_code(ns, name), f"job {job_id} {reason}: "
                                                                 f"{(why.message if why is not None else '') or ''}")
        return JobOutcome("running" if status and (status.active or 0) > 0 else "pending", None, f"job {job_id}")

    def _exit_code(self, ns: str, name: str) -> int | None:
        """The validation container's exit status, from its pod (None: not told)."""
        from kubernetes.client import ApiException

        try:
            pods = self.core.list_namespaced_pod(ns, label_selector=f"{VALIDATION_LABEL}={name}").items
        except ApiException:
            return None
        for pod in pods:
            for c in (pod.status.container_statuses or []) if pod.status else []:
                if c.state is not None and c.state.terminated is not None:
                    return c.state.terminated.exit_code
        return None

    def _annotate(self, node: str, annotations: dict, what: str) -> None:
        from kubernetes.client import ApiException

        try:
            self.core.patch_node(node, {"metadata": {"annotations": annotations}})
        except ApiException as exc:
            raise kn._error(exc, f"{what} {node}") from None
