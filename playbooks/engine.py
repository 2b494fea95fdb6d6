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
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from playbooks import stopping
from playbooks.guards import Guards, breaker_trip, owned_by_others, rate_limit, strictest
from playbooks.model import Playbook
from playbooks.scheduler import ClusterState, Scheduler, SchedulerError
from playbooks.steps import STEPS

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

    def budget_lock(self) -> AbstractContextManager[None]:
        """Held while a step checks the blast-radius budget and acts: one raswarden at a time among all sharing
        the journal (the shards of a cluster), so they never exceed the budget together."""
        ...

    def set_breaker(self, reason: str | None) -> None: ...


def fault_point(step: str, phase: str) -> None:
    """Test-only fault injection: ``RASWARDEN_FAULT=drain:executed`` kills this process with SIGKILL right
    there (phases: ``started`` after the start is journaled, ``executed`` after the scheduler acted and
    before ``done`` is journaled, ``done`` after it is). The crash-safety tests kill at every boundary."""
    if os.environ.get("RASWARDEN_FAULT") == f"{step}:{phase}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class Engine:
    """Plans actions for incidents and advances them step by step."""

    def __init__(self, scheduler: Scheduler, journal: Journal, playbooks: list[Playbook], guards: Guards | None = None,
                 clock: Callable[[], float] = time.time, rack_of: Callable[[str], str | None] = lambda n: None,
                 owns: Callable[[str], bool] = lambda entity: True):
        """``owns``: whether an incident's entity is this engine's to act on (a shard's: daemon/shards.py); the
        journal is the cluster's, the actions of other shards' incidents are theirs."""
        self.scheduler = scheduler
        self.journal = journal
        self.playbooks = playbooks
        self.guards = guards or Guards()
        self.clock = clock
        self.rack_of = rack_of
        self.owns = owns
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
            if action.status == "awaiting_approval" or not self.owns(action.incident.entity):
                continue
            if stopping.requested():  # the rest at the next start, as after a crash
                log.info("stopping: the open actions from %s on are left for the next start", action.key)
                break
            if self._state is None:
                try:
                    self._state = self.scheduler.snapshot()
                except stopping.Stopped as exc:
                    log.info("stopping: no cluster state (%s); the open actions are left for the next start", exc)
                    break
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
        before, action.status = action.status, "running"
        for st in action.steps:
            if st.status in ("done", "skipped", "dry-run"):
                continue
            if st.status == "failed":
                action.status = "failed"
                break
            if st.next_at > now:
                break
            if stopping.requested() and st.status == "pending":  # no new step once the stop has come
                action.status = before
                break
            if st.status == "started" and action.key + str(action.steps.index(st)) not in self._verified:
                self._verified.add(action.key + str(action.steps.index(st)))
                if self._verify(action, st, state):
                    st.status, st.finished_at = "done", now
                    st.detail["verified_after_restart"] = True
                    self.journal.save(action)
                    fault_point(st.type, "done")  # a boundary too: the step is recorded done
                    continue
            handler = STEPS.get(st.type)
            breaker = self.journal.breaker()
            if breaker and (handler is None or handler.held_by_breaker):
                action.status, action.note = "held", f"circuit breaker: {breaker}"
                self.journal.save(action)
                return
            if action.mode == "dry-run" and (handler is None or handler.dry_run):
                st.status, st.finished_at = "dry-run", now
                st.detail["would"] = self.describe(action, st, state)
                self.journal.save(action)
                continue
            if st.status == "pending":
                st.status, st.started_at = "started", now
                st.attempts += 1
                self.journal.save(action)  # persisted before it starts
                fault_point(st.type, "started")
            try:
                result = self._execute(action, st, state)
            except stopping.Stopped as exc:  # the step still `started` (verified at the next start), the action
                # as it was (a held one stays held)
                log.info("%s step %s on %s left for the next start: %s", action.key, st.type, action.node, exc)
                action.status = before
                self.journal.save(action)
                return
            except SchedulerError as exc:
                result = "retry" if exc.retryable and st.attempts <= st.retries else "failed"
                st.detail["error"] = str(exc)
                log.warning("%s step %s on %s: %s", action.key, st.type, action.node, exc)
            if result == "done":
                fault_point(st.type, "executed")
                st.status, st.finished_at = "done", self.clock()
                self.journal.save(action)  # persisted after it ends
                fault_point(st.type, "done")
                if handler is not None and handler.changes_cluster:
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

    # -- steps: the handlers of playbooks.steps ------------------------------------------------
    def _execute(self, action: Action, st: StepState, state: ClusterState) -> str:
        handler = STEPS.get(st.type)
        if handler is None:
            raise SchedulerError(f"unknown step {st.type}", retryable=False)
        if handler.needs_node:
            if action.node is None:
                return "skipped"
            other = owned_by_others(action.node, state) if handler.leaves_others_alone else None
            if other:
                st.detail["note"] = other
                return "skipped"
        return handler.execute(self, action, st, state)

    def _verify(self, action: Action, st: StepState, state: ClusterState) -> bool:
        """After a restart: did the step found ``started`` take effect?"""
        handler = STEPS.get(st.type)
        return handler is not None and handler.verify(self, action, st, state)

    def describe(self, action: Action, st: StepState, state: ClusterState) -> str:
        """What the step would do now, in words (what dry-run journals)."""
        handler = STEPS.get(st.type)
        return handler.describe(self, action, st, state) if handler else f"{st.type} {action.node or '-'}"
