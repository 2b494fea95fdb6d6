"""The Scheduler protocol (docs/architecture.md §6): what every scheduler adapter offers the playbooks.

One :meth:`Scheduler.snapshot` per tick gives every node and job at once; the actions are idempotent and
raise :class:`SchedulerError` saying whether a retry can help. The Slurm adapter and the simulated
scheduler (``lab/sim/cluster.py``) implement the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# Node state flags, as Slurm reports them (lower case).
IDLE, ALLOC, MIXED, DRAIN, DOWN, MAINT, REBOOT = "idle", "alloc", "mixed", "drain", "down", "maint", "reboot"
UNAVAILABLE = frozenset({DRAIN, DOWN, MAINT, REBOOT})


class SchedulerError(Exception):
    """An action failed; ``retryable`` says whether trying again can help."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class NodeInfo:
    """A node as the scheduler sees it."""

    name: str
    states: frozenset[str]
    reason: str = ""
    reason_set_by: str = ""
    boot_time: float | None = None  # when the node last booted, as the scheduler knows it (None: it does not say)
    booting: str = ""  # the scheduler's flag while it reboots or powers the node up ("REBOOT_ISSUED"); "" when not
    # what raswarden's drain of the node has still to do ("3 pods to evict ..."; Kubernetes); "" once it is whole
    draining: str = ""
    # whether a reboot raswarden asked for is pending there, where the scheduler keeps the request itself (Kubernetes:
    # the node's annotations); None where it does not say (Slurm: its REBOOT flag and the boot time say it)
    reboot_asked: bool | None = None

    @property
    def available(self) -> bool:
        return not (self.states & UNAVAILABLE)


@dataclass(frozen=True)
class JobInfo:
    """A job as the scheduler sees it."""

    id: str
    nodes: tuple[str, ...]
    state: str  # pending | running | completed | ...
    checkpoint_opt_in: bool = False
    name: str = ""
    comment: str = ""  # where a job may confirm its checkpoint (Slurm: scontrol update JobId=.. Comment=..)
    user: str = ""  # who runs it (told in alerts: the people a drain touches)


@dataclass(frozen=True)
class ClusterState:
    """Every node and job, taken at once."""

    taken_at: float
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    jobs: dict[str, JobInfo] = field(default_factory=dict)

    def jobs_on(self, node: str) -> list[JobInfo]:
        return [j for j in self.jobs.values() if node in j.nodes and j.state == "running"]


@runtime_checkable
class Scheduler(Protocol):
    """What raswarden asks of a scheduler."""

    def snapshot(self) -> ClusterState: ...

    def signal_job(self, job_id: str, signal: str) -> None: ...

    def drain(self, node: str, reason: str) -> str | None:
        """Take ``node`` out of service with ``reason``; what is left to do before the drain is whole (pods to evict
        on Kubernetes), None when it is."""
        ...

    def resume(self, node: str) -> None: ...

    def requeue(self, job_id: str) -> None: ...


@dataclass(frozen=True)
class JobOutcome:
    """Where a validation job stands: ``pending``, ``running``, ``passed`` (exit status 0), ``failed``, ``timeout``,
    ``cancelled`` or ``gone`` (the scheduler no longer knows it)."""

    state: str
    exit_code: int | None = None
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.state not in ("pending", "running")


@runtime_checkable
class ValidationScheduler(Protocol):
    """What validating a repaired node asks of a scheduler, beside :class:`Scheduler`: hold the node for raswarden
    alone (a maintenance reservation), run a job on exactly that node inside it, read how it ended, let the node go.
    Each is idempotent (a reservation or a job of that name already there is the one asked for)."""

    def reserve(self, node: str, name: str, duration_s: float) -> None: ...

    def release(self, name: str) -> None: ...

    def submit_validation(self, node: str, reservation: str, name: str, command: str, time_limit_s: float,
                          output: str) -> str: ...

    def job_outcome(self, job_id: str) -> JobOutcome: ...


@runtime_checkable
class RebootScheduler(Protocol):
    """What an automatic reboot asks of a scheduler, beside :class:`Scheduler`: reboot a node once it is idle,
    leaving a drain it has in place (daemon/operations/reboots.py). Idempotent: asking again while the node has not
    rebooted is the same request. A snapshot's ``NodeInfo.boot_time`` then says when it booted, and its states
    include ``reboot`` until it has."""

    def reboot(self, node: str) -> None: ...
