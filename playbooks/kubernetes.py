"""The Kubernetes adapter of the Scheduler protocol (issue 55), through the official ``kubernetes`` client.

* **Nodes** are drained and returned by :mod:`playbooks.kubernetes_nodes` (cordon, raswarden's ``NoSchedule`` taint,
  the reason as an annotation; a node cordoned by someone else is never touched).
* **Jobs** are a cluster's pods grouped by their controller (a Job, a JobSet's Jobs, a Volcano job, a StatefulSet):
  the job id is ``namespace/Kind/name`` (a pod without one is its own job, ``namespace/Pod/name``). A job runs on the
  nodes of its pods that are bound and not going away.
* **Checkpoint**: a job opts in with the annotation (or label) :data:`CHECKPOINT_OPT_IN` = ``"true"`` on its pods. A
  request is the annotation :data:`CHECKPOINT_REQUEST` (``"<signal> <unix time>"``) written on each of its pods,
  which the pod sees through the downward API; the job answers by writing :data:`CHECKPOINT_ACK` on its pods (as a
  Slurm job writes its comment). Once every running pod of the job carries one, their text is the job's ``comment``,
  so the ``wait_checkpoint`` step's ``confirm: comment`` works as on Slurm.
* **Drain** evicts the node's pods through the Eviction API, so PodDisruptionBudgets hold: a pod a budget protects
  (429) is tried again with a growing pause until :attr:`KubernetesScheduler.eviction_deadline_s` after the cordon,
  then the drain says which pods and budgets held it. DaemonSet and mirror (static) pods are left. Each namespace has
  a policy (:class:`NamespacePolicy`): ``evict`` at once, ``wait`` (its pods run on until they end or a ``requeue``
  step moves them, as a Slurm drain leaves its jobs running) or ``evict-after`` a time on the cordoned node. While
  pods are left to evict, :meth:`drain` returns what is left and the node's ``NodeInfo.draining`` says so; the
  ``drain`` step waits on it.
* **Requeue** evicts the job's pods for their controller to make again elsewhere (the cordon keeps them off this
  node); **resume** is :func:`playbooks.kubernetes_nodes.resume`.
* **Validation before return** (:class:`playbooks.scheduler.ValidationScheduler`): a reservation is the cordon
  itself, marked :data:`RESERVED` with its name (a node that was in service is cordoned for it, and returned when it
  is released); a return asked while the node is reserved waits for the release (:data:`RETURNING`), so the node is
  uncordoned only once its validation passed, and a drain meanwhile (a failed validation) cancels it. The
  validation command runs as a Job pinned to the node (``nodeName``, tolerating raswarden's taint and the cordon's),
  in ``validation_namespace`` with ``validation_image``; its outcome is read from the Job's status. A drain never
  evicts a validation pod.
* **What it did** is told where operators look (``kubectl describe node``): an Event of raswarden's per action on the
  node (or the job's pods), and the node condition :data:`CONDITION` (``True`` while raswarden holds the node drained,
  with the reason; ``False`` once it returned it), as node-problem-detector reports its own. Telling is best effort: a
  refused Event is logged, never a failed action.

Pods with a deletion time are going (a kubelet finishes them) and count as gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from playbooks import kubernetes_nodes as kn
from playbooks.kubernetes_reboot import REBOOT_ASKED_AT, REBOOT_FROM, RebootOnKubernetes, reboot_job_name, reboot_state
from playbooks.kubernetes_validation import DRAINED_AT, RESERVED, RETURNING, VALIDATION_LABEL, ValidationOnKubernetes
from playbooks.scheduler import DRAIN, REBOOT, ClusterState, JobInfo, NodeInfo, SchedulerError

CHECKPOINT_OPT_IN = "raswarden.io/checkpoint"
CHECKPOINT_REQUEST = "raswarden.io/checkpoint-request"
CHECKPOINT_ACK = "raswarden.io/checkpoint-ack"
MIRROR = "kubernetes.io/config.mirror"
CONDITION = "RaswardenDrained"
HEALTH_CONDITION = "RaswardenHealthy"  # raswarden's view of the node: True healthy, False with its worst open state
EVENT_NAMESPACE = "default"  # where a node's Events go (a node has no namespace; kubectl describe node reads these)
log = logging.getLogger("raswarden.kubernetes")
POLICIES = ("evict", "wait", "evict-after")


@dataclass(frozen=True)
class NamespacePolicy:
    """What a drain does with a namespace's pods (see the module docstring); ``after_s`` for ``evict-after``."""

    action: str = "evict"
    after_s: float = 0.0

    @classmethod
    def parse(cls, text: str) -> NamespacePolicy:
        """``evict``, ``wait`` or ``evict-after <seconds>``."""
        word, _, rest = text.strip().partition(" ")
        if word not in POLICIES:
            raise ValueError(f"namespace policy {text!r}: one of evict, wait, 'evict-after <seconds>'")
        if word == "evict-after":
            try:
                after = float(rest)
            except ValueError:
                raise ValueError(f"namespace policy {text!r}: evict-after takes seconds") from None
            return cls(word, after)
        if rest:
            raise ValueError(f"namespace policy {text!r}: {word} takes nothing after it")
        return cls(word)

    def due(self, cordoned_for_s: float) -> bool:
        """Whether a drain evicts such a pod now, the node cordoned that long."""
        return self.action == "evict" or (self.action == "evict-after" and cordoned_for_s >= self.after_s)


@dataclass
class _Pod:
    namespace: str
    name: str
    node: str
    phase: str
    job: str
    opt_in: bool
    ack: str | None
    leave: bool  # a DaemonSet's, a mirror or a validation pod: never evicted
    going: bool  # it has a deletion time


def _controller(pod: Any) -> tuple[str, str]:
    for ref in pod.metadata.owner_references or []:
        if ref.controller:
            return ref.kind, ref.name
    return "Pod", pod.metadata.name


def _pod(raw: Any) -> _Pod:
    meta = raw.metadata
    annotations, labels = meta.annotations or {}, meta.labels or {}
    kind, name = _controller(raw)
    return _Pod(meta.namespace, meta.name, (raw.spec.node_name if raw.spec else None) or "",
                (raw.status.phase if raw.status else None) or "Unknown", f"{meta.namespace}/{kind}/{name}",
                "true" in (annotations.get(CHECKPOINT_OPT_IN), labels.get(CHECKPOINT_OPT_IN)),
                annotations.get(CHECKPOINT_ACK),
                kind == "DaemonSet" or MIRROR in annotations or VALIDATION_LABEL in labels,
                meta.deletion_timestamp is not None)


@dataclass
class KubernetesScheduler(ValidationOnKubernetes, RebootOnKubernetes):
    """A cluster through its API server (``api``: a ``kubernetes.client.ApiClient``)."""

    api: Any
    policies: Mapping[str, NamespacePolicy] = field(default_factory=dict)  # namespace -> policy
    default_policy: NamespacePolicy = field(default_factory=NamespacePolicy)
    eviction_deadline_s: float = 600.0  # a pod a disruption budget holds longer than this after the cordon: say so
    timeout_s: float = 30.0  # one call to the API server at most (a stopped one holds a pass no longer)
    validation_namespace: str = "raswarden"
    validation_image: str = ""  # the image the validation command runs in (the node's own tools: dcgmi, nccl-tests)
    reboot_command: str = ""  # what a privileged pod on a node runs to reboot its host ("": no automatic reboot)
    clock: Callable[[], float] = time.time
    _retry_at: dict[str, tuple[float, float]] = field(default_factory=dict)  # node -> (next try, pause) after a 429

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, **kw: Any) -> KubernetesScheduler:
        """From a kubeconfig file, or (``path`` None) the pod's own service account when raswarden runs in the
        cluster."""
        from kubernetes import config

        if path:
            return cls(config.new_client_from_config(config_file=path), **kw)
        config.load_incluster_config()
        from kubernetes import client

        return cls(client.ApiClient(), **kw)

    @property
    def core(self) -> Any:
        from kubernetes import client

        return kn.Timed(client.CoreV1Api(self.api), self.timeout_s)

    @property
    def batch(self) -> Any:
        from kubernetes import client

        return kn.Timed(client.BatchV1Api(self.api), self.timeout_s)

    def policy(self, namespace: str) -> NamespacePolicy:
        return self.policies.get(namespace, self.default_policy)

    # -- reading -------------------------------------------------------------------------------
    def _pods(self, node: str | None = None) -> list[_Pod]:
        from kubernetes.client import ApiException

        selector = f"spec.nodeName={node}" if node else None
        try:
            raw = self.core.list_pod_for_all_namespaces(field_selector=selector).items
        except ApiException as exc:
            raise kn._error(exc, "list pods") from None
        return [_pod(p) for p in raw]

    def snapshot(self) -> ClusterState:
        """Every node and job: one list of nodes and one of pods."""
        from kubernetes.client import ApiException

        taken = self.clock()
        try:
            raw_nodes = self.core.list_node().items
        except ApiException as exc:
            raise kn._error(exc, "list nodes") from None
        pods = self._pods()
        nodes = {}
        jobs = None  # raswarden's reboot Jobs, listed once a node waits for one
        for raw in raw_nodes:
            info = kn.node_info(raw)
            pending, boot_time = reboot_state(raw)
            states, booting = info.states, ""
            if pending:
                jobs = self.reboot_job_names() if jobs is None else jobs
                # its Job never made (a restart between the patch and the Job): not asked yet, as far as the node goes
                pending = reboot_job_name(info.name, (raw.metadata.annotations or {})[REBOOT_FROM]) in jobs
                if pending:
                    states, booting = states | {REBOOT}, "reboot Job"
            left = ""
            if DRAIN in info.states and info.reason_set_by == "raswarden":
                left = self._left_to_evict(raw, [p for p in pods if p.node == info.name], taken)
            info = NodeInfo(info.name, frozenset(states), info.reason, info.reason_set_by, boot_time, booting,
                            draining=left, reboot_asked=pending)
            nodes[info.name] = info
        return ClusterState(taken, nodes, self._jobs(pods))

    @staticmethod
    def _jobs(pods: list[_Pod]) -> dict[str, JobInfo]:
        by_job: dict[str, list[_Pod]] = {}
        for p in pods:
            if p.phase not in ("Succeeded", "Failed"):
                by_job.setdefault(p.job, []).append(p)
        jobs = {}
        for job_id, members in sorted(by_job.items()):
            live = [p for p in members if not p.going]
            running = [p for p in live if p.phase == "Running" and p.node]
            acks = [p.ack for p in running]
            comment = "; ".join(sorted(set(acks))) if running and all(acks) else ""
            state = "running" if running else ("pending" if live else "completing")
            jobs[job_id] = JobInfo(job_id, tuple(sorted({p.node for p in running})), state,
                                   any(p.opt_in for p in members), job_id.rsplit("/", 1)[-1], comment,
                                   user=f"namespace {members[0].namespace}")
        return jobs

    def _left_to_evict(self, node: Any, pods: list[_Pod], now: float) -> str:
        """What a drain of ``node`` (cordoned by raswarden) has still to evict by its namespaces' policies now."""
        since = _drained_at(node, now)
        due = [p for p in pods if not (p.leave or p.going) and p.phase not in ("Succeeded", "Failed")
               and self.policy(p.namespace).due(now - since)]
        return f"{len(due)} pods to evict ({', '.join(f'{p.namespace}/{p.name}' for p in due[:5])})" if due else ""

    # -- acting --------------------------------------------------------------------------------
    def signal_job(self, job_id: str, signal: str) -> None:
        """Ask the job to checkpoint: :data:`CHECKPOINT_REQUEST` on each of its running pods."""
        request = f"{signal} {int(self.clock())}"
        pods = [p for p in self._pods() if p.job == job_id and not p.going and p.phase == "Running"]
        if not pods:
            raise SchedulerError(f"signal job {job_id}: no running pod of it", retryable=False)
        for p in pods:
            self._patch_pod(p, {"metadata": {"annotations": {CHECKPOINT_REQUEST: request}}}, f"signal job {job_id}")
        for node in sorted({p.node for p in pods}):
            self._event(node, "Checkpoint", f"asked job {job_id} to checkpoint ({request})")

    def drain(self, node: str, reason: str) -> str | None:
        """Cordon and taint ``node``, then evict its pods by their namespaces' policies. Returns what is left to
        evict (pods a disruption budget holds, or an ``evict-after`` not yet due), None when the drain is whole."""
        raw = kn._read(self.core, node, "drain")
        first = (raw.metadata.annotations or {}).get(kn.REASON_ANNOTATION) is None
        stamp = f"{self.clock():.0f}"
        since = _drained_at(raw, float(stamp))  # the first cordon's time (written now if this is the first)
        kn.drain(self.core, node, reason, extra_annotations={DRAINED_AT: stamp})
        if RETURNING in (raw.metadata.annotations or {}):  # drained again during its validation hold: no return
            self._annotate(node, {RETURNING: None}, "drain")
        if first:
            self._condition(node, "True", "Drained", reason)
            self._event(node, "Drain", f"cordoned and tainted {kn.TAINT_KEY}: {reason}")
        now = self.clock()
        waiting = self._retry_at.get(node)
        if waiting is not None and now < waiting[0]:
            return self._left_to_evict(raw, self._pods(node), now) or None
        held, later = [], 0
        for p in self._pods(node):
            if p.leave or p.going or p.phase in ("Succeeded", "Failed"):
                continue
            policy = self.policy(p.namespace)
            if not policy.due(now - since):
                later += policy.action == "evict-after"  # ("wait": the drain is whole with it running)
                continue
            if self._evict(p, f"drain {node}"):
                self._event(node, "Evict", f"evicted {p.namespace}/{p.name} ({p.job}) for raswarden's drain")
            else:
                held.append(f"{p.namespace}/{p.name}")
        if held:
            if now - since >= self.eviction_deadline_s:
                self._retry_at.pop(node, None)
                raise SchedulerError(f"drain {node}: {len(held)} pods held by a PodDisruptionBudget for "
                                     f"{now - since:.0f} s, over the {self.eviction_deadline_s:.0f} s allowed "
                                     f"({', '.join(held[:5])}); the node stays cordoned", retryable=False)
            pause = min(60.0, 2 * waiting[1]) if waiting else 5.0
            self._retry_at[node] = (now + pause, pause)
            return f"{len(held)} pods held by a PodDisruptionBudget ({', '.join(held[:5])}); tried again in " \
                   f"{pause:.0f} s"
        self._retry_at.pop(node, None)
        if later:
            return f"{later} pods left until their namespace's evict-after"
        return None

    def resume(self, node: str) -> None:
        """Uncordon and untaint ``node`` if raswarden drained it (a node cordoned by someone else stays so)."""
        annotations = kn._read(self.core, node, "resume").metadata.annotations or {}
        if RESERVED in annotations:  # in raswarden's validation hold: returned when the hold is released
            if RETURNING not in annotations:
                self._annotate(node, {RETURNING: "true"}, "resume")
                self._event(node, "Hold", f"returned into validation hold {annotations[RESERVED]}: back in service "
                                          "once its validation passes")
            return
        ours = kn.REASON_ANNOTATION in annotations
        kn.resume(self.core, node, extra_annotations=(DRAINED_AT, REBOOT_FROM, REBOOT_ASKED_AT))
        self._retry_at.pop(node, None)
        if ours:
            self._condition(node, "False", "Returned", "returned to service by raswarden")
            self._event(node, "Resume", "uncordoned and untainted: returned to service")

    def requeue(self, job_id: str) -> None:
        """Evict the job's pods for its controller to make again elsewhere; one a budget holds is tried again."""
        held = []
        for p in self._pods():
            if p.job != job_id or p.leave or p.going or p.phase in ("Succeeded", "Failed"):
                continue
            if self._evict(p, f"requeue job {job_id}"):
                self._event(p.node, "Requeue", f"evicted {p.namespace}/{p.name} for {job_id} to start again elsewhere")
            else:
                held.append(f"{p.namespace}/{p.name}")
        if held:
            raise SchedulerError(f"requeue job {job_id}: {', '.join(held[:5])} held by a PodDisruptionBudget",
                                 retryable=True)

    def _evict(self, p: _Pod, what: str) -> bool:
        """Evict one pod; False when a disruption budget refuses it now (429). A pod already gone is evicted."""
        from kubernetes import client
        from kubernetes.client import ApiException

        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=p.name, namespace=p.namespace))
        try:
            self.core.create_namespaced_pod_eviction(p.name, p.namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                return True
            if exc.status == 429:
                return False
            raise kn._error(exc, f"{what}: evict {p.namespace}/{p.name}") from None
        return True

    def tell_health(self, node: str, state: str, message: str) -> None:
        """Raswarden's view of ``node`` as the node condition :data:`HEALTH_CONDITION`, as node-problem-detector
        reports its own: ``True`` when healthy, else ``False`` with the state (``Subhealthy``, ``Failed``, ...) as the
        reason (best effort)."""
        self._condition(node, "True" if state == "healthy" else "False", state.capitalize(), message,
                        kind=HEALTH_CONDITION)

    def _condition(self, node: str, status: str, reason: str, message: str, kind: str = CONDITION) -> None:
        """Set raswarden's condition ``kind`` on the node (best effort)."""
        from kubernetes.client import ApiException

        stamp = _rfc3339(self.clock())
        body = {"status": {"conditions": [{"type": kind, "status": status, "reason": reason,
                                           "message": message[:1000], "lastHeartbeatTime": stamp,
                                           "lastTransitionTime": stamp}]}}
        try:
            self.core.patch_node_status(node, body)
        except ApiException as exc:
            log.warning("node %s: condition %s not set: %s %s", node, kind, exc.status, exc.reason)
        except SchedulerError as exc:  # the API server did not answer: the next change tells it again
            log.warning("node %s: condition %s not set: %s", node, kind, exc)

    def _event(self, node: str, reason: str, message: str) -> None:
        """An Event of raswarden's on ``node`` (best effort: a refused one is logged)."""
        from kubernetes import client
        from kubernetes.client import ApiException

        if not node:
            return
        stamp = _rfc3339(self.clock())
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{node}.raswarden.", namespace=EVENT_NAMESPACE),
            involved_object=client.V1ObjectReference(kind="Node", name=node, uid=node, api_version="v1"),
            reason=reason, message=message[:1000], type="Warning" if reason in ("Drain", "Evict") else "Normal",
            source=client.V1EventSource(component="raswarden"), first_timestamp=stamp, last_timestamp=stamp,
            count=1, reporting_component="raswarden", reporting_instance="raswarden")
        try:
            self.core.create_namespaced_event(EVENT_NAMESPACE, event)
        except ApiException as exc:
            log.warning("node %s: event %s not recorded: %s %s", node, reason, exc.status, exc.reason)

    def _patch_pod(self, p: _Pod, body: dict, what: str) -> None:
        from kubernetes.client import ApiException

        try:
            self.core.patch_namespaced_pod(p.name, p.namespace, body)
        except ApiException as exc:
            if exc.status != 404:  # gone meanwhile: nothing to ask of it
                raise kn._error(exc, f"{what}: pod {p.namespace}/{p.name}") from None


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _drained_at(node: Any, default: float) -> float:
    try:
        return float((node.metadata.annotations or {}).get(DRAINED_AT, default))
    except ValueError:
        return default
