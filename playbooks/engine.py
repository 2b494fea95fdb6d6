"""The playbook engine: incidents become journaled actions whose steps run against the scheduler.

An :class:`Action` is one playbook applied to one incident. Every step is written to the journal
before it starts and after it ends, so a process killed at any point resumes on restart: a step found
``started`` is first *verified* against the scheduler (a drain whose raswarden reason is on the node is
done; a requeue whose jobs no longer run there is done; a resume whose node is back is done), and only
repeated when it had not taken effect. Nothing is drained twice, requeued twice or forgotten.

The guards (:mod:`playbooks.guards`: others' nodes, the blast-radius budget, the circuit breaker, rate limits,
modes, repeat offenders) are asked at every step. Resume is only for nodes raswarden drained, after a clean period
and the health check.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from playbooks.guards import (REASON_PREFIX, Guards, breaker_trip, incident_in_reason, over_budget, owned_by_others,
                              rate_limit, repeat_offender, strictest)
from playbooks.model import Playbook
from playbooks.scheduler import DOWN, DRAIN, ClusterState, Scheduler, SchedulerError

log = logging.getLogger("raswarden.playbooks")
OPEN = ("planned", "awaiting_approval", "running", "held")


@dataclass
class IncidentRef:
    """What the engine needs of an incident (the daemon's incident rows are mapped to this)."""

    id: str
    entity: str
    kind: str
    state: str
    category: str
    rack: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    opened_at: float = 0.0
    closed_at: float | None = None
    scheduler_node: str | None = None  # the scheduler's name of the node, when the topology gives another

    @property
    def node(self) -> str | None:
        """The node as the scheduler names it (what is drained, resumed and whose jobs are signalled)."""
        if self.kind in ("rack", "cooling", "supernode"):
            return None
        return self.scheduler_node or self.entity.split("/", 1)[0]


@dataclass
class StepState:
    type: str
    params: dict[str, Any]
    timeout_s: float
    retries: int
    status: str = "pending"  # pending | started | done | failed | skipped | dry-run
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    next_at: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Action:
    key: str
    incident: IncidentRef
    playbook: str
    mode: str  # act | dry-run | shadow
    approval: bool
    steps: list[StepState]
    created_at: float
    status: str = "planned"  # planned | awaiting_approval | running | held | done | failed
    note: str = ""
    approved_by: str = ""

    @property
    def node(self) -> str | None:
        return self.incident.node

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Action:
        d = dict(d)
        d["incident"] = IncidentRef(**d["incident"])
        d["steps"] = [StepState(**s) for s in d["steps"]]
        return cls(**d)


class Journal(Protocol):
    """Where actions are persisted (the daemon's store implements it)."""

    def save(self, action: Action) -> None: ...

    def get(self, key: str) -> Action | None: ...

    def open_actions(self) -> list[Action]: ...

    def actions_for(self, incident_id: str) -> list[Action]: ...

    def started_since(self, playbook: str, since: float) -> int: ...

    def drains_of(self, node: str, since: float) -> int: ...

    def breaker(self) -> str | None: ...

    def set_breaker(self, reason: str | None) -> None: ...


def fault_point(step: str, phase: str) -> None:
    """Test-only fault injection: ``RASWARDEN_FAULT=drain:executed`` kills this process with SIGKILL right
    there (phases: ``started`` after the start is journaled, ``executed`` after the scheduler acted and
    before ``done`` is journaled, ``done`` after it is). The crash-safety tests kill at every boundary."""
    if os.environ.get("RASWARDEN_FAULT") == f"{step}:{phase}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def render(template: str, values: dict[str, str]) -> str:
    return re.sub(r"\{([a-z_]+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


class Engine:
    """Plans actions for incidents and advances them step by step."""

    def __init__(self, scheduler: Scheduler, journal: Journal, playbooks: list[Playbook], guards: Guards | None = None,
                 clock: Callable[[], float] = time.time, rack_of: Callable[[str], str | None] = lambda n: None):
        self.scheduler = scheduler
        self.journal = journal
        self.playbooks = playbooks
        self.guards = guards or Guards()
        self.clock = clock
        self.rack_of = rack_of
        self._verified: set[str] = set()

    # -- planning ------------------------------------------------------------------------------
    def choose(self, incident: IncidentRef, state: ClusterState) -> Playbook | None:
        node = incident.node
        has_jobs = bool(node and state.jobs_on(node))
        return next((p for p in self.playbooks if p.matches(incident.kind, incident.state, incident.category,
                                                             incident.rack, incident.labels, has_jobs)), None)

    def plan(self, incident: IncidentRef, state: ClusterState) -> Action | None:
        """The action this incident would get now (not saved)."""
        pb = self.choose(incident, state)
        if pb is None:
            return None
        mode = strictest(pb.guards.mode, self.guards.mode)
        steps = [StepState(s.type, dict(s.params), s.timeout_s, s.retries) for s in pb.steps]
        return Action(f"{incident.id}:{pb.name}", incident, pb.name, mode, pb.guards.approval, steps, self.clock(),
                      status="awaiting_approval" if pb.guards.approval else "planned")

    def submit(self, incident: IncidentRef, state: ClusterState) -> Action | None:
        """Plan and journal the action for ``incident`` unless it has one already.

        One incident gets one action per severity: while an action of it is open, or once one was planned at
        the incident's present severity, an update of the incident plans nothing new (the node's jobs having
        moved away, say, must not turn a finished checkpoint-drain-requeue into a second "idle node" drain);
        an escalation (sub-healthy to failed) plans the failed playbook.
        """
        earlier = self.journal.actions_for(incident.id)
        if any(a.status in OPEN or a.incident.state == incident.state for a in earlier):
            return None
        action = self.plan(incident, state)
        if action is None or self.journal.get(action.key) is not None:
            return None
        self.journal.save(action)
        log.info("planned %s for %s (%s, %s)", action.playbook, incident.id, incident.entity, action.mode)
        return action

    def approve(self, key: str, who: str) -> bool:
        action = self.journal.get(key)
        if action is None or action.status != "awaiting_approval":
            return False
        action.status, action.approved_by = "planned", who
        self.journal.save(action)
        return True

    # -- the circuit breaker -------------------------------------------------------------------
    def observe(self, new_incidents: int, nodes: int, stale_nodes: int) -> None:
        """Trip the breaker when many entities go bad at once or telemetry vanishes (call once a tick)."""
        if self.journal.breaker():
            return
        reason = breaker_trip(self.guards, new_incidents, nodes, stale_nodes)
        if reason:
            self.journal.set_breaker(reason)
            log.error("circuit breaker tripped: %s; raswarden stops acting until 'raswarden playbook reset'",
                      reason)

    # -- running -------------------------------------------------------------------------------
    def run(self) -> list[Action]:
        """Advance every open action as far as it can go now; returns the actions touched."""
        touched = []
        self._state: ClusterState | None = None
        for action in self.journal.open_actions():
            if action.status == "awaiting_approval":
                continue
            if self._state is None:
                self._state = self.scheduler.snapshot()
            self._advance(action, self._state)
            touched.append(action)
        return touched

    def _rate_limited(self, action: Action, now: float) -> str | None:
        pb = next((p for p in self.playbooks if p.name == action.playbook), None)
        if pb is None or any(st.status != "pending" for st in action.steps):
            return None  # only the start of an action is rate-limited
        return rate_limit(pb, self.journal.started_since(pb.name, now - pb.guards.rate_per_s))

    def _advance(self, action: Action, state: ClusterState) -> None:
        now = self.clock()
        limited = self._rate_limited(action, now) if action.mode == "act" else None
        if limited:
            action.status, action.note = "held", limited
            self.journal.save(action)
            return
        if action.mode == "shadow":
            for st in action.steps:
                st.status, st.finished_at = "skipped", now
            action.status, action.note = "done", "shadow mode: recorded, nothing done"
            self.journal.save(action)
            return
        action.status = "running"
        for st in action.steps:
            if st.status in ("done", "skipped", "dry-run"):
                continue
            if st.status == "failed":
                action.status = "failed"
                break
            if st.next_at > now:
                break
            if st.status == "started" and action.key + str(action.steps.index(st)) not in self._verified:
                self._verified.add(action.key + str(action.steps.index(st)))
                if self._verify(action, st, state):
                    st.status, st.finished_at = "done", now
                    st.detail["verified_after_restart"] = True
                    self.journal.save(action)
                    fault_point(st.type, "done")  # a boundary too: the step is recorded done
                    continue
            breaker = self.journal.breaker()
            if breaker and st.type not in ("notify", "wait", "wait_checkpoint"):
                action.status, action.note = "held", f"circuit breaker: {breaker}"
                self.journal.save(action)
                return
            if action.mode == "dry-run" and st.type not in ("notify", "wait"):
                st.status, st.finished_at = "dry-run", now
                st.detail["would"] = self._describe(action, st, state)
                self.journal.save(action)
                continue
            if st.status == "pending":
                st.status, st.started_at = "started", now
                st.attempts += 1
                self.journal.save(action)  # persisted before it starts
                fault_point(st.type, "started")
            try:
                result = self._execute(action, st, state)
            except SchedulerError as exc:
                result = "retry" if exc.retryable and st.attempts <= st.retries else "failed"
                st.detail["error"] = str(exc)
                log.warning("%s step %s on %s: %s", action.key, st.type, action.node, exc)
            if result == "done":
                fault_point(st.type, "executed")
                st.status, st.finished_at = "done", self.clock()
                self.journal.save(action)  # persisted after it ends
                fault_point(st.type, "done")
                if st.type in ("drain", "requeue", "resume"):
                    state = self._state = self.scheduler.snapshot()
                continue
            if result == "skipped":
                st.status, st.finished_at = "skipped", self.clock()
                self.journal.save(action)
                continue
            if result == "held":
                action.status = "held"
                self.journal.save(action)
                return
            if result == "waiting":  # wait, wait_checkpoint (its own timeout), resume (its clean period)
                self.journal.save(action)
                return
            if result == "retry":
                st.status, st.next_at = "pending", now + min(300.0, 5.0 * 2 ** (st.attempts - 1))
                self.journal.save(action)
                return
            st.status, st.finished_at = "failed", self.clock()
            action.status = "failed"
            self.journal.save(action)
            log.error("%s failed at step %s: %s", action.key, st.type, st.detail.get("error", ""))
            return
        else:
            action.status = "done"
        self.journal.save(action)

    # -- steps ---------------------------------------------------------------------------------
    def _values(self, action: Action, job: str = "") -> dict[str, str]:
        inc = action.incident
        return {"incident": inc.id, "node": action.node or "", "entity": inc.entity, "category": inc.category,
                "state": inc.state, "rack": inc.rack or "", "job": job, "playbook": action.playbook}

    def _describe(self, action: Action, st: StepState, state: ClusterState) -> str:
        node = action.node or "-"
        if st.type == "drain":
            return f"drain {node} with reason {self._reason(action, st)!r}"
        if st.type in ("checkpoint", "requeue"):
            jobs = [j.id for j in state.jobs_on(node)] if action.node else []
            return f"{st.type} jobs {jobs} on {node}"
        return f"{st.type} {node}"

    def _reason(self, action: Action, st: StepState) -> str:
        return f"{REASON_PREFIX} " + render(st.params.get("reason", "{incident} {category}"), self._values(action))

    def _execute(self, action: Action, st: StepState, state: ClusterState) -> str:
        node = action.node
        t = st.type
        if t == "notify":
            return "done"  # the alert pipeline tells the operators, with this action's steps
        if t == "wait":
            return "done" if self.clock() - (st.started_at or 0) >= st.params["duration"] else "waiting"
        if t == "exec":
            return self._exec([render(a, self._values(action)) for a in st.params["argv"]], st)
        if node is None:
            return "skipped"
        other = owned_by_others(node, state) if t != "resume" else None
        if other:
            st.detail["note"] = other
            return "skipped"
        if t == "checkpoint":
            signalled, left = [], []
            for job in state.jobs_on(node):
                if job.checkpoint_opt_in:
                    self.scheduler.signal_job(job.id, st.params.get("signal", "USR1"))
                    signalled.append(job.id)
                else:
                    left.append(job.id)
            st.detail.update(signalled=signalled, left_running=left)
            return "done"
        if t == "wait_checkpoint":
            return self._wait_checkpoint(action, st, state)
        if t == "drain":
            info = state.nodes.get(node)
            if info is not None and DRAIN in info.states and info.reason.startswith(REASON_PREFIX):
                st.detail["note"] = "already drained by raswarden"
                return "done"
            held = over_budget(self.guards, node, state, self.rack_of)
            if held:
                st.detail["held"] = held
                return "held"
            self.scheduler.drain(node, self._reason(action, st))
            return "done"
        if t == "requeue":
            jobs, left = self._requeue_targets(action, node, state)
            for job in jobs:
                self.scheduler.requeue(job)
            st.detail["requeued"] = st.detail.get("requeued", []) + jobs
            if left:
                st.detail["left_running"] = left
            return "done"
        if t == "resume":
            return self._resume(action, st, state)
        raise SchedulerError(f"unknown step {t}", retryable=False)

    def _verify(self, action: Action, st: StepState, state: ClusterState) -> bool:
        """After a restart: did the step found ``started`` take effect?"""
        node = action.node
        info = state.nodes.get(node) if node else None
        if st.type == "drain":
            return info is not None and DRAIN in info.states and incident_in_reason(info.reason) == action.incident.id
        if st.type == "requeue":
            return not self._requeue_targets(action, node, state)[0] if node else True
        if st.type == "resume":
            return info is not None and DRAIN not in info.states
        return False

    @staticmethod
    def _requeue_targets(action: Action, node: str, state: ClusterState) -> tuple[list[str], list[str]]:
        """The jobs a requeue moves off ``node``, and those it leaves running. After a checkpoint step only the
        jobs it signalled (they opted in): a requeue sends TERM, and a job that did not opt in would lose its
        work since its own last checkpoint, so it keeps running on the drained node (ARCHITECTURE §6). Without
        a checkpoint step (a failed node: its jobs are lost anyway) every job on the node."""
        on_node = [j.id for j in state.jobs_on(node)]
        ckpt = next((s for s in action.steps if s.type == "checkpoint"), None)
        if ckpt is None:
            return on_node, []
        signalled = set(ckpt.detail.get("signalled", []))
        return [j for j in on_node if j in signalled], [j for j in on_node if j not in signalled]

    def _wait_checkpoint(self, action: Action, st: StepState, state: ClusterState) -> str:
        signalled = next((s.detail.get("signalled", []) for s in action.steps if s.type == "checkpoint"), [])
        pending = []
        for job_id in signalled:
            job = state.jobs.get(job_id)
            if job is None or job.state != "running" or self._confirmed(action, st, job_id, job.comment):
                continue
            pending.append(job_id)
        st.detail["waiting_for"] = pending
        if not pending:
            return "done"
        if self.clock() - (st.started_at or 0) >= st.timeout_s:
            st.detail["note"] = f"no confirmation from {pending} within {st.timeout_s:.0f} s; going on"
            return "done"
        return "waiting"

    def _confirmed(self, action: Action, st: StepState, job_id: str, comment: str) -> bool:
        how = st.params.get("confirm", "marker")
        if how == "comment":
            return re.search(st.params["comment_pattern"], comment or "") is not None
        if how == "marker":
            return os.path.exists(render(st.params["marker"], self._values(action, job_id)))
        argv = [render(a, self._values(action, job_id)) for a in st.params["command"]]
        try:
            return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _exec(self, argv: list[str], st: StepState) -> str:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=st.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SchedulerError(f"exec {argv[0]}: {exc}", retryable=True) from None
        st.detail["exit"] = proc.returncode
        if proc.returncode != 0:
            raise SchedulerError(f"exec {argv[0]}: exit {proc.returncode}: {proc.stderr.strip()[-200:]}",
                                 retryable=True)
        return "done"

    def _resume(self, action: Action, st: StepState, state: ClusterState) -> str:
        node = action.node
        info = state.nodes.get(node)
        if info is None or DRAIN not in info.states:
            st.detail["note"] = "not drained"
            return "done"
        if not info.reason.startswith(REASON_PREFIX):
            st.detail["note"] = f"drained by {info.reason_set_by or 'someone else'} ({info.reason!r}): left alone"
            return "skipped"
        if DOWN in info.states:
            # Down (being repaired, or lost): its quiet says nothing about the hardware. A node drained for a
            # fault that shows only under load looks healthy once idle; resuming it then puts the job back
            # on the fault, and the drain after that makes it a repeat offender.
            st.detail["note"] = "down: resumed once it is back"
            return "waiting"
        now = self.clock()
        since = action.incident.closed_at or action.created_at
        if now - since < st.params.get("clean_for", 1800.0):
            return "waiting"
        offender = repeat_offender(self.guards, self.journal.drains_of(node, now - self.guards.repeat_window_s))
        if offender:
            st.detail["note"] = offender
            return "skipped"
        if st.params.get("health_check"):
            self._exec([render(a, self._values(action)) for a in st.params["health_check"]], st)
        self.scheduler.resume(node)
        return "done"
