"""Kubernetes nodes as raswarden drains and returns them (issue 55; the first part of the Kubernetes adapter).

A drain is a cordon (``spec.unschedulable``), a ``NoSchedule`` taint of raswarden's own (:data:`TAINT_KEY`, so that
what tolerates only the usual cordon taint does not land there either) and an annotation that says raswarden did it
and why (:data:`REASON_ANNOTATION`, the reason beginning with ``raswarden:`` as on Slurm). A return undoes exactly
that, and only on a node that carries raswarden's annotation: a node cordoned by someone else (an operator's ``kubectl
cordon``, an upgrade) is never uncordoned. Both are idempotent and written as one strategic-merge patch each, so a
process killed between two calls leaves either the whole drain or none of it.

:func:`node_info` is a node as the playbooks see it (:class:`playbooks.scheduler.NodeInfo`): ``drain`` when
cordoned, ``down`` when its kubelet reports it not ready, with the reason and who set it.
"""

from __future__ import annotations

from typing import Any

from playbooks import stopping
from playbooks.guards import REASON_PREFIX
from playbooks.scheduler import DOWN, DRAIN, IDLE, NodeInfo, SchedulerError

TAINT_KEY = "raswarden.io/drained"
REASON_ANNOTATION = "raswarden.io/drain-reason"
#: what the API calls a node that is not there, or a write that lost a race (the next pass tries again)
_NOT_FOUND, _CONFLICT = 404, 409


class Timed:
    """An API group of the kubernetes client (``CoreV1Api``, ``BatchV1Api``) whose every call carries a timeout, so
    an API server that does not answer (stopped, partitioned) holds raswarden no longer than ``timeout_s`` a call
    and says so as a retryable :class:`SchedulerError`; once raswarden is told to stop no new call starts
    (:mod:`playbooks.stopping`: the step is left for the next start)."""

    def __init__(self, api: Any, timeout_s: float):
        self._api, self._timeout = api, (min(5.0, timeout_s), timeout_s)  # (connect, read)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)
        if not callable(method):
            return method

        def call(*args: Any, **kw: Any) -> Any:
            import urllib3

            if stopping.requested():
                raise stopping.Stopped(f"{name}: raswarden is stopping; the API server is not asked")
            kw.setdefault("_request_timeout", self._timeout)
            try:
                return method(*args, **kw)
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # a timeout, a refused or reset connection
                raise SchedulerError(f"{name}: the API server did not answer within {self._timeout[1]:.0f} s "
                                     f"({type(exc).__name__})", retryable=True) from None

        return call


def node_info(node: Any) -> NodeInfo:
    """A ``V1Node`` as the playbooks see it."""
    annotations = node.metadata.annotations or {}
    ours = annotations.get(REASON_ANNOTATION)
    states = {IDLE}
    if node.spec is not None and node.spec.unschedulable:
        states = {DRAIN}
    ready = next((c for c in (node.status.conditions or []) if c.type == "Ready"), None) if node.status else None
    if ready is not None and ready.status != "True":  # no condition at all: nothing reports it (a fresh node)
        states.add(DOWN)
    reason = ours if ours is not None else ("cordoned" if DRAIN in states else "")
    return NodeInfo(node.metadata.name, frozenset(states), reason=reason,
                    reason_set_by="raswarden" if ours is not None else "")


def drain(core: Any, name: str, reason: str, extra_annotations: dict[str, str] | None = None) -> None:
    """Cordon ``name``, taint it ``NoSchedule`` with raswarden's key and record the reason (idempotent; the
    ``extra_annotations`` are written where the node does not have them yet). A node someone else cordoned is left as
    it is and said so (raswarden would otherwise take it over)."""
    if not reason.startswith(REASON_PREFIX):
        raise SchedulerError(f"drain {name}: a reason of raswarden's begins with {REASON_PREFIX!r}", retryable=False)
    node = _read(core, name, "drain")
    annotations = node.metadata.annotations or {}
    if node.spec.unschedulable and REASON_ANNOTATION not in annotations:
        raise SchedulerError(f"drain {name}: cordoned by someone else; raswarden leaves it to them", retryable=False)
    taints = [t for t in (node.spec.taints or []) if t.key != TAINT_KEY]
    written = {k: v for k, v in (extra_annotations or {}).items() if k not in annotations}
    patch = {"metadata": {"annotations": {**written, REASON_ANNOTATION: reason}},
             "spec": {"unschedulable": True,
                      "taints": [_taint_dict(t) for t in taints] + [{"key": TAINT_KEY, "effect": "NoSchedule",
                                                                      "value": "true"}]}}
    _patch(core, name, patch, "drain", node.metadata.resource_version)


def resume(core: Any, name: str, extra_annotations: tuple[str, ...] = ()) -> None:
    """Undo raswarden's drain of ``name``: uncordon, remove its taint and annotations (the reason and
    ``extra_annotations``; idempotent: a node with none of them is left alone). A node cordoned by someone else stays
    cordoned."""
    node = _read(core, name, "resume")
    annotations = node.metadata.annotations or {}
    if REASON_ANNOTATION not in annotations:
        if node.spec.unschedulable:
            raise SchedulerError(f"resume {name}: cordoned by someone else, not by raswarden; left cordoned",
                                 retryable=False)
        return
    taints = [t for t in (node.spec.taints or []) if t.key != TAINT_KEY]
    patch = {"metadata": {"annotations": {REASON_ANNOTATION: None, **dict.fromkeys(extra_annotations)}},
             "spec": {"unschedulable": None, "taints": [_taint_dict(t) for t in taints] or None}}
    _patch(core, name, patch, "resume", node.metadata.resource_version)


def _read(core: Any, name: str, what: str) -> Any:
    from kubernetes.client import ApiException

    try:
        return core.read_node(name)
    except ApiException as exc:
        raise _error(exc, f"{what} {name}") from None


def _patch(core: Any, name: str, body: dict, what: str, resource_version: str | None) -> None:
    """One merge patch, conditional on the node not having changed since it was read (a 409 is retried by the next
    pass, which reads it again)."""
    from kubernetes.client import ApiException

    if resource_version is not None:
        body = {**body, "metadata": {**body.get("metadata", {}), "resourceVersion": resource_version}}
    try:
        core.patch_node(name, body)
    except ApiException as exc:
        raise _error(exc, f"{what} {name}") from None


def _error(exc: Any, what: str) -> SchedulerError:
    if exc.status == _NOT_FOUND:
        return SchedulerError(f"{what}: no such node", retryable=False)
    if exc.status in (401, 403):
        return SchedulerError(f"{what}: the API server refused raswarden ({exc.status} {exc.reason}): its service "
                              "account needs the ClusterRole raswarden ships", retryable=False)
    said = _status_message(exc)
    return SchedulerError(f"{what}: {exc.status} {exc.reason}" + (f": {said}" if said else ""),
                          retryable=exc.status == _CONFLICT or exc.status == 429 or (exc.status or 0) >= 500)


def _status_message(exc: Any) -> str:
    """The API server's own words in its answer (a Status object's ``message``: which field it refused and why)."""
    import json

    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return ""
    return str(body.get("message", ""))[:500] if isinstance(body, dict) else ""


def run_pinned_job(batch: Any, namespace: str, node: str, name: str, container: Any, labels: dict[str, str],
                   what: str, annotations: dict[str, str] | None = None, deadline_s: int | None = None,
                   ttl_s: int | None = None, host_pid: bool = False, volumes: list | None = None) -> None:
    """Create a Job of one pod pinned to ``node`` (``nodeName``, tolerating raswarden's taint and the cordon's: the node
    is raswarden's, cordoned) running ``container`` once (no retry). A Job of that name already there is the one asked
    for: a restart creates nothing twice. raswarden's validation and reboot Jobs are these."""
    from kubernetes import client
    from kubernetes.client import ApiException

    tolerations = [client.V1Toleration(key=TAINT_KEY, operator="Exists"),
                   client.V1Toleration(key="node.kubernetes.io/unschedulable", operator="Exists")]
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
        spec=client.V1JobSpec(
            backoff_limit=0, active_deadline_seconds=deadline_s, ttl_seconds_after_finished=ttl_s,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(node_name=node, restart_policy="Never", tolerations=tolerations,
                                      host_pid=host_pid or None, volumes=volumes, containers=[container]))))
    try:
        batch.create_namespaced_job(namespace, job)
    except ApiException as exc:
        if exc.status != _CONFLICT:
            raise _error(exc, what) from None


def _taint_dict(t: Any) -> dict:
    out = {"key": t.key, "effect": t.effect}
    if t.value is not None:
        out["value"] = t.value
    return out
