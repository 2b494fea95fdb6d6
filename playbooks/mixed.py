"""A cluster of Slurm and Kubernetes nodes as one scheduler (issue 55): one snapshot, one budget, one journal.

Many fleets run training on both: Slurm on some node groups, Kubernetes on others. :class:`MixedScheduler` holds one
adapter per part and answers the Scheduler protocol for all of them: its snapshot is every part's nodes and jobs
together (so the drain step's blast-radius budget counts every unavailable node of the cluster, whichever scheduler
holds it), and each action goes to the part that owns the node or the job. A node's part is the topology's
(``scheduler:`` on a rack or a node), else the part whose snapshot lists it; a job's is the part that listed it.
A playbook step is the same whichever part runs it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from playbooks.scheduler import ClusterState, JobOutcome, SchedulerError

log = logging.getLogger("raswarden.scheduler")


class MixedScheduler:
    """The parts (name -> adapter, in the order they are asked) and the topology's node owners (node -> part)."""

    def __init__(self, parts: Mapping[str, Any], owners: Mapping[str, str] | None = None):
        if not parts:
            raise ValueError("a mixed scheduler needs at least one part")
        self.parts = dict(parts)
        self.owners = dict(owners or {})
        unknown = sorted(set(self.owners.values()) - set(self.parts))
        if unknown:
            raise ValueError(f"the topology names schedulers {unknown} the config does not have")
        self._node_part: dict[str, str] = {}
        self._job_part: dict[str, str] = {}
        self._hold_part: dict[str, str] = {}  # validation hold -> the part that holds it

    def snapshot(self) -> ClusterState:
        """Every part's nodes and jobs, in one state."""
        nodes, jobs, taken = {}, {}, None
        node_part: dict[str, str] = {}
        for name, part in self.parts.items():
            state = part.snapshot()
            taken = state.taken_at if taken is None else min(taken, state.taken_at)
            for node, info in state.nodes.items():
                owner = self.owners.get(node)
                if owner is not None and owner != name:
                    continue  # the topology gives it to another part (a host that is both a Slurm and a k8s node)
                if node in nodes:
                    log.warning("node %s is listed by %s and %s: %s's is used (say which in topology.yaml)", node,
                                node_part[node], name, node_part[node])
                    continue
                nodes[node], node_part[node] = info, name
            for job_id, job in state.jobs.items():
                jobs[job_id] = job
                self._job_part[job_id] = name
        self._node_part = node_part
        return ClusterState(taken or 0.0, nodes, jobs)

    def part_of_node(self, node: str) -> Any:
        return self._part("node", node, lambda: self.owners.get(node) or self._node_part.get(node))

    def part_of_job(self, job_id: str) -> Any:
        return self._part("job", job_id, lambda: self._job_part.get(job_id))

    def _part(self, what: str, key: str, lookup) -> Any:
        """The part ``lookup`` names, asking every part again once when it names none (a node or job new since)."""
        name = lookup()
        if name is None:
            self.snapshot()
            name = lookup()
        if name is None:
            raise SchedulerError(f"{what} {key}: no scheduler of this cluster knows it", retryable=False)
        return self.parts[name]

    # -- the protocol: each action to its part ------------------------------------------------------------------
    def signal_job(self, job_id: str, signal: str) -> None:
        self.part_of_job(job_id).signal_job(job_id, signal)

    def drain(self, node: str, reason: str) -> str | None:
        return self.part_of_node(node).drain(node, reason)

    def resume(self, node: str) -> None:
        self.part_of_node(node).resume(node)

    def requeue(self, job_id: str) -> None:
        self.part_of_job(job_id).requeue(job_id)

    def tell_health(self, node: str, state: str, message: str) -> None:
        """raswarden's view of a node, to its part where that part shows it (Kubernetes: a node condition)."""
        tell = getattr(self.part_of_node(node), "tell_health", None)
        if tell is not None:
            tell(node, state, message)

    # -- reboots (the parts that can) --------------------------------------------------------------------------------
    def can_reboot(self, node: str) -> bool:
        """Whether the node's part can reboot it (Slurm, Kubernetes; one not set up for it says why when asked)."""
        return callable(getattr(self.part_of_node(node), "reboot", None))

    def reboot(self, node: str) -> None:
        if not self.can_reboot(node):
            raise SchedulerError(f"reboot {node}: its scheduler cannot reboot a node", retryable=False)
        self.part_of_node(node).reboot(node)

    # -- validation (each part that has it) ----------------------------------------------------------------------
    def reserve(self, node: str, name: str, duration_s: float) -> None:
        part = self.part_of_node(node)
        part.reserve(node, name, duration_s)
        self._hold_part[name] = self._name_of(part)

    def release(self, name: str) -> None:
        part = self._hold_part.pop(name, None)
        for each in ([self.parts[part]] if part else self.parts.values()):  # after a restart: every part (idempotent)
            each.release(name)

    def submit_validation(self, node: str, reservation: str, name: str, command: str, time_limit_s: float,
                          output: str) -> str:
        part = self.part_of_node(node)
        job = part.submit_validation(node, reservation, name, command, time_limit_s, output)
        self._job_part[job] = self._name_of(part)
        return job

    def job_outcome(self, job_id: str) -> JobOutcome:
        name = self._job_part.get(job_id)
        if name is not None:
            return self.parts[name].job_outcome(job_id)
        last: SchedulerError | None = None
        for part in self.parts.values():  # after a restart: the part whose ids it fits (the others refuse it)
            try:
                return part.job_outcome(job_id)
            except SchedulerError as exc:
                if exc.retryable:
                    raise
                last = exc
        raise last or SchedulerError(f"job {job_id}: no part knows it", retryable=False)

    def _name_of(self, part: Any) -> str:
        return next(n for n, p in self.parts.items() if p is part)
