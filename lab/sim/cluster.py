"""A simulated scheduler implementing :class:`playbooks.scheduler.Scheduler`, with GPU-hour accounting.

Training jobs run on whole nodes, checkpoint every ``checkpoint_interval_s`` (costing ``checkpoint_cost_s``
of the job's time) and, when a node under them fails, lose the work since their last checkpoint and are
requeued; a requeued job pays ``restart_cost_s`` before it is productive again. A checkpoint signal
(``USR1`` to a job that opted in) makes the job checkpoint now. A drain lets the running job finish and
keeps new jobs off the node. A job progresses at the pace of its slowest GPU (:attr:`SimNode.speed`: a
fail-slow GPU or a throttling one holds back the whole synchronous job). Every GPU-second is accounted as
productive, lost to failures, spent on checkpoints, spent on restarts, held back by a slow GPU, or idle on a
drained node.

Two kinds of hard failure: :meth:`SimScheduler.fail_node` is one Slurm sees (slurmd gone: the node is
``down`` until repaired); :meth:`SimScheduler.break_node` is the common one it does not (a GPU off the bus,
an uncorrectable ECC error): the node stays schedulable, and every job placed on it crashes, until someone
drains it (then it is down for repair) or the repair is done. Idle time on a drained node counts only while
its hardware works: a broken node is lost capacity whatever anyone does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from playbooks.scheduler import (ALLOC, DOWN, DRAIN, IDLE, MAINT, REBOOT, ClusterState, JobInfo, JobOutcome, NodeInfo,
                                 SchedulerError)

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass
class SimJob:
    id: str
    n_nodes: int
    work_s: float  # productive seconds needed to finish
    opt_in: bool = True
    name: str = "train"
    checkpoint_interval_s: float = 1800.0
    checkpoint_cost_s: float = 60.0
    restart_cost_s: float = 300.0
    state: str = "pending"
    nodes: tuple[str, ...] = ()
    done_s: float = 0.0  # productive progress
    saved_s: float = 0.0  # progress at the last checkpoint
    since_ckpt_s: float = 0.0
    busy_s: float = 0.0  # remaining checkpoint or restart overhead
    busy_kind: str = ""
    restarts: int = 0
    comment: str = ""  # set to raswarden:checkpointed when a requested checkpoint is saved
    requested: bool = False
    # Where the job reads its checkpoint interval at each checkpoint and when it starts (raswarden's advice: the
    # closed loop's ``checkpoint_policy: advised``); None, or a None answer, keeps the interval it has.
    follow: Callable[[SimJob], float | None] | None = None

    def read_interval(self) -> None:
        """Take the interval ``follow`` gives now, if any."""
        interval = self.follow(self) if self.follow is not None else None
        if interval is not None and interval > 0:
            self.checkpoint_interval_s = interval


@dataclass
class SimNode:
    name: str
    gpus: int = 8
    drained: bool = False
    reason: str = ""
    reason_set_by: str = ""
    down_until: float = 0.0
    broken_until: float = 0.0
    job: str | None = None
    reserved: str = ""  # a maintenance reservation holds it for raswarden's validation jobs alone
    boot_time: float = -86400.0  # when it last booted (a day before the simulation starts, until it reboots)
    reboot_asked: float | None = None  # when a reboot was asked (it boots reboot_s later), None when none is under way
    speed: float = 1.0  # its slowest GPU's speed against a healthy one (a fail-slow GPU holds back the job)


@dataclass
class Accounting:
    """GPU-hours by where they went."""

    productive: float = 0.0
    lost_to_failures: float = 0.0
    checkpoints: float = 0.0
    checkpoints_requested: float = 0.0  # the part of ``checkpoints`` raswarden's signals asked for
    restarts: float = 0.0
    idle_drained: float = 0.0
    slowed: float = 0.0  # a job held back by a slow GPU (fail-slow, thermal throttling) on one of its nodes
    allocated: float = 0.0
    # Node-hours (not GPU-hours): out of service (drained, down for repair, held for a validation job), and broken
    # hardware left in service (every job placed there crashes: a failure no one drained yet, a botched repair
    # returned without a validation)
    out_of_service_node_h: float = 0.0
    broken_in_service_node_h: float = 0.0

    @property
    def periodic_checkpoints(self) -> float:
        """Checkpoints on the jobs' own schedule: every policy pays them (on its productive time)."""
        return self.checkpoints - self.checkpoints_requested

    @property
    def net_loss(self) -> float:
        """What failures and the policy's actions cost: work lost to failures, the checkpoints raswarden asked
        for, restarts, idle drained nodes and jobs held back by slow GPUs. The periodic checkpoints are left
        out: they are the jobs' own schedule, not a consequence of the policy (on a 30-day trace at Llama-3
        rates they are about nine tenths of every policy's overhead, and would hide any difference)."""
        return self.lost_to_failures + self.checkpoints_requested + self.restarts + self.idle_drained + self.slowed

    @property
    def net_loss_with_periodic_checkpoints(self) -> float:
        return self.net_loss + self.periodic_checkpoints

    @property
    def effective_training_ratio(self) -> float:
        return self.productive / self.allocated if self.allocated else 0.0


class SimScheduler:
    """Whole-node jobs on simulated nodes; advance it with :meth:`step`."""

    def __init__(self, nodes: list[str], gpus_per_node: int = 8, user: str = "raswarden"):
        self.nodes = {n: SimNode(n, gpus_per_node) for n in nodes}
        self.jobs: dict[str, SimJob] = {}
        self.now = 0.0
        self.user = user
        self.gpu_hours = Accounting()
        self.log: list[tuple[float, str, str]] = []
        # validation jobs: id -> (node, submitted at, name); what each ends as: validation_fails (node -> exit
        # status, until a test or the technician's repair clears it), after validation_s
        self.validation_jobs: dict[str, tuple[str, float, str]] = {}
        self.validation_fails: dict[str, int] = {}
        self.validation_s = 600.0
        self.reboot_s = 300.0  # how long a reboot takes; a node in reboot_hangs never comes back from one
        self.reboot_hangs: set[str] = set()
        self.periodic_intervals: list[float] = []  # the interval each periodic checkpoint came after (seconds)

    # -- the Scheduler protocol ------------------------------------------------------------------
    def snapshot(self) -> ClusterState:
        nodes = {}
        for n in self.nodes.values():
            states = {ALLOC if n.job else IDLE}
            if n.drained:
                states.add(DRAIN)
            if n.reserved:
                states.add(MAINT)
            if n.down_until > self.now:
                states.add(DOWN)
            if n.reboot_asked is not None:
                if n.name in self.reboot_hangs or self.now < n.reboot_asked + self.reboot_s:
                    states |= {REBOOT, DOWN}
                else:
                    n.boot_time, n.reboot_asked = n.reboot_asked + self.reboot_s, None
            nodes[n.name] = NodeInfo(n.name, frozenset(states), n.reason, n.reason_set_by, boot_time=n.boot_time,
                                     booting="REBOOT_ISSUED" if REBOOT in states else "")
        jobs = {j.id: JobInfo(j.id, j.nodes, j.state, j.opt_in, j.name, j.comment) for j in self.jobs.values()}
        return ClusterState(self.now, nodes, jobs)

    def signal_job(self, job_id: str, signal: str) -> None:
        job = self._job(job_id)
        if job.state != "running":
            return  # nothing to signal: idempotent
        checkpointing = job.busy_s > 0 and job.busy_kind == "checkpoint"
        if signal.upper().removeprefix("SIG") == "USR1" and job.opt_in and not checkpointing:
            self._checkpoint(job)
            job.requested, job.comment = True, ""
        self.log.append((self.now, "signal", f"{job_id} {signal}"))

    def drain(self, node: str, reason: str) -> None:
        n = self._node(node)
        if n.drained and n.reason == reason:
            return
        n.drained, n.reason, n.reason_set_by = True, reason, self.user
        self.log.append((self.now, "drain", f"{node} {reason}"))

    def resume(self, node: str) -> None:
        n = self._node(node)
        if not n.drained:
            return
        n.drained, n.reason, n.reason_set_by = False, "", ""
        self.log.append((self.now, "resume", node))

    def requeue(self, job_id: str) -> None:
        job = self._job(job_id)
        if job.state != "running":
            return
        self._stop(job, lost=True)
        self.log.append((self.now, "requeue", job_id))

    def reboot(self, node: str) -> None:
        """The RebootScheduler protocol: the node boots ``reboot_s`` later (never, in ``reboot_hangs``)."""
        n = self._node(node)
        if n.reboot_asked is None:
            n.reboot_asked = self.now
            self.log.append((self.now, "reboot", node))

    # -- the ValidationScheduler protocol ---------------------------------------------------------
    def reserve(self, node: str, name: str, duration_s: float) -> None:
        self._node(node).reserved = name
        self.log.append((self.now, "reserve", f"{node} {name}"))

    def release(self, name: str) -> None:
        for n in self.nodes.values():
            if n.reserved == name:
                n.reserved = ""
                self.log.append((self.now, "release", f"{n.name} {name}"))

    def submit_validation(self, node: str, reservation: str, name: str, command: str, time_limit_s: float,
                          output: str) -> str:
        known = next((j for j, (_, _, nm) in self.validation_jobs.items() if nm == name), None)
        if known is not None:
            return known
        if self._node(node).reserved != reservation:
            raise SchedulerError(f"{node} is not held by {reservation}", retryable=False)
        job_id = f"v{len(self.validation_jobs) + 1}"
        self.validation_jobs[job_id] = (node, self.now, name)
        self.log.append((self.now, "validate", f"{node} {name}"))
        return job_id

    def job_outcome(self, job_id: str) -> JobOutcome:
        if job_id not in self.validation_jobs:
            return JobOutcome("gone")
        node, at, _ = self.validation_jobs[job_id]
        if self.now < at + self.validation_s:
            return JobOutcome("running")
        code = self.validation_fails.get(node, 0)
        return JobOutcome("passed" if code == 0 else "failed", code, f"simulated validation exit {code}")

    # -- the simulated world ---------------------------------------------------------------------
    def submit(self, job: SimJob) -> None:
        self.jobs[job.id] = job

    def operator_drain(self, node: str, reason: str, user: str = "root") -> None:
        """A drain set by someone else (an operator), for tests of 'never touch theirs'."""
        n = self._node(node)
        n.drained, n.reason, n.reason_set_by = True, reason, user

    def fail_node(self, node: str, repair_s: float) -> None:
        """A hard failure: the job on the node dies (losing work since its checkpoint); the node is down."""
        n = self._node(node)
        n.down_until = max(n.down_until, self.now + repair_s)
        if n.job:
            self._stop(self.jobs[n.job], lost=True)
        self.log.append((self.now, "fail", node))

    def break_node(self, node: str, until: float, hang_s: float = 0.0) -> None:
        """Hardware on ``node`` fails, unseen by the scheduler: the job on it hangs for ``hang_s`` (its
        collectives wait for the timeout) and dies, losing the work since its checkpoint; any job placed on the
        node before ``until`` (the repair) crashes too. Also what a repair looks like: the node out of use."""
        n = self._node(node)
        n.broken_until = max(n.broken_until, until)
        if n.job:
            job = self.jobs[n.job]
            hung = sum(self.nodes[x].gpus for x in job.nodes) * hang_s / 3600.0
            self.gpu_hours.allocated += hung
            self.gpu_hours.lost_to_failures += hung
            self._stop(job, lost=True)
        self.log.append((self.now, "break", node))

    def interrupt(self, node: str) -> None:
        """A fault that kills the job on ``node`` but leaves the node usable (a fabric port going down: the job's
        collective fails; the node still has its other rails)."""
        n = self._node(node)
        if n.job:
            self._stop(self.jobs[n.job], lost=True)
        self.log.append((self.now, "interrupt", node))

    def repair(self, node: str, until: float) -> None:
        """The node goes to the technicians (Slurm sees it down) until ``until``."""
        n = self._node(node)
        n.down_until = max(n.down_until, until)
        self.log.append((self.now, "repair", node))

    def broken(self, node: str) -> bool:
        return self._node(node).broken_until > self.now

    def step(self, now: float) -> None:
        """Advance to ``now``: progress, checkpoints, overheads, accounting, then schedule pending jobs."""
        dt = max(0.0, now - self.now)
        acct = self.gpu_hours
        for job in self.jobs.values():
            if job.state != "running":
                continue
            gpu_h = sum(self.nodes[n].gpus for n in job.nodes) * dt / 3600.0
            acct.allocated += gpu_h
            left = dt
            if job.busy_s > 0:
                spent = min(left, job.busy_s)
                job.busy_s -= spent
                left -= spent
                share = spent / dt if dt else 0.0
                if job.busy_kind == "checkpoint":
                    acct.checkpoints += gpu_h * share
                    if job.requested:
                        acct.checkpoints_requested += gpu_h * share
                    if job.busy_s <= 0 and job.requested:  # the launcher confirms, as a real job would
                        job.requested, job.comment = False, f"raswarden:checkpointed {now:.0f}"
                else:
                    acct.restarts += gpu_h * share
            if left > 0:
                # A synchronous job runs at the pace of its slowest GPU: the time it is held back is lost.
                speed = max(min(self.nodes[n].speed for n in job.nodes), 1e-3)
                work = min(left * speed, job.work_s - job.done_s)
                job.done_s += work
                job.since_ckpt_s += work
                acct.productive += gpu_h * (work / dt)
                acct.slowed += gpu_h * (work / speed - work) / dt
                if job.since_ckpt_s >= job.checkpoint_interval_s:
                    self.periodic_intervals.append(job.checkpoint_interval_s)
                    self._checkpoint(job)
                if job.done_s >= job.work_s:
                    self._finish(job)
        for n in self.nodes.values():
            if n.drained and not n.job and n.broken_until <= self.now and n.down_until <= self.now:
                acct.idle_drained += n.gpus * dt / 3600.0
            if n.drained or n.reserved or n.down_until > self.now:
                acct.out_of_service_node_h += dt / 3600.0
            elif n.broken_until > self.now:
                acct.broken_in_service_node_h += dt / 3600.0
        self.now = now
        for n in self.nodes.values():  # broken hardware someone took out goes to repair: down until fixed
            if n.drained and n.broken_until > now:
                n.down_until = max(n.down_until, n.broken_until)
        for job in list(self.jobs.values()):  # placed on broken hardware: it crashes
            if job.state == "running" and any(self.nodes[n].broken_until > now for n in job.nodes):
                self._stop(job, lost=True)
                self.log.append((now, "crash", job.id))
        self._schedule()

    # -- internals -------------------------------------------------------------------------------
    def _node(self, name: str) -> SimNode:
        if not _NAME.match(name or ""):
            raise SchedulerError(f"invalid node name {name!r}", retryable=False)
        if name not in self.nodes:
            raise SchedulerError(f"no node {name!r}", retryable=False)
        return self.nodes[name]

    def _job(self, job_id: str) -> SimJob:
        if job_id not in self.jobs:
            raise SchedulerError(f"no job {job_id!r}", retryable=False)
        return self.jobs[job_id]

    def _checkpoint(self, job: SimJob) -> None:
        job.saved_s = job.done_s
        job.since_ckpt_s = 0.0
        job.busy_s += job.checkpoint_cost_s
        job.busy_kind = "checkpoint"
        job.read_interval()

    def _stop(self, job: SimJob, lost: bool) -> None:
        if lost:
            lost_s = job.done_s - job.saved_s
            self.gpu_hours.lost_to_failures += sum(self.nodes[n].gpus for n in job.nodes) * lost_s / 3600.0
            self.gpu_hours.productive -= sum(self.nodes[n].gpus for n in job.nodes) * lost_s / 3600.0
            job.done_s = job.saved_s
        for n in job.nodes:
            self.nodes[n].job = None
        job.nodes = ()
        job.state = "pending"
        job.since_ckpt_s = 0.0
        job.busy_s = 0.0
        job.restarts += 1

    def _finish(self, job: SimJob) -> None:
        for n in job.nodes:
            self.nodes[n].job = None
        job.state = "completed"

    def _schedule(self) -> None:
        free = [n for n in sorted(self.nodes) if self.nodes[n].job is None and not self.nodes[n].drained
                and not self.nodes[n].reserved and self.nodes[n].down_until <= self.now]
        for job in sorted(self.jobs.values(), key=lambda j: j.id):
            if job.state != "pending" or len(free) < job.n_nodes:
                continue
            job.nodes, free = tuple(free[: job.n_nodes]), free[job.n_nodes :]
            for n in job.nodes:
                self.nodes[n].job = job.id
            job.state = "running"
            job.read_interval()
            if job.restarts:
                job.busy_s = job.restart_cost_s
                job.busy_kind = "restart"
