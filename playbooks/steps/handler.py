"""What a step type is: its parameters, and how it executes, verifies and describes itself.

A step type is one :class:`StepHandler` subclass in a module of its own under ``playbooks/steps/``, registered
in :data:`playbooks.steps.STEPS`; the playbook model reads its parameters from there, and the engine
(:mod:`playbooks.engine`) runs it. The engine keeps the journal state machine (a step is journaled before it
starts and after it ends), the modes and the circuit breaker; a handler only does its step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from playbooks.guards import Guards
from playbooks.scheduler import ClusterState, Scheduler

if TYPE_CHECKING:
    from playbooks.engine import Action, Journal, StepState


class StepContext(Protocol):
    """What a step may use of the engine running it."""

    scheduler: Scheduler
    journal: Journal
    guards: Guards
    clock: Callable[[], float]
    rack_of: Callable[[str], str | None]


def values(action: Action, job: str = "") -> dict[str, str]:
    """The placeholders of an action's templates (:data:`playbooks.params.PLACEHOLDERS`)."""
    inc = action.incident
    return {"incident": inc.id, "node": action.node or "", "entity": inc.entity, "category": inc.category,
            "state": inc.state, "rack": inc.rack or "", "job": job, "playbook": action.playbook}


def describe_jobs(action: Action, st: StepState, state: ClusterState) -> str:
    """``<step> jobs [...] on <node>``: the words of a step that acts on the node's jobs."""
    node = action.node or "-"
    jobs = [j.id for j in state.jobs_on(node)] if action.node else []
    return f"{st.type} jobs {jobs} on {node}"


class StepHandler(ABC):
    """One step type. ``execute`` answers ``done``, ``skipped``, ``held``, ``waiting`` or ``failed`` (or raises
    :class:`playbooks.scheduler.SchedulerError`, retried while it says a retry can help)."""

    name: ClassVar[str]
    #: its own keys in a playbook, beside ``step``, ``timeout`` and ``retries``
    keys: ClassVar[frozenset[str]] = frozenset()
    #: it acts on the incident's node: skipped when there is none, and (``leaves_others_alone``) on a node that is
    #: someone else's (playbooks.guards.owned_by_others)
    needs_node: ClassVar[bool] = True
    leaves_others_alone: ClassVar[bool] = True
    #: a tripped circuit breaker holds it
    held_by_breaker: ClassVar[bool] = True
    #: in dry-run mode it is journaled as what it would do, not done
    dry_run: ClassVar[bool] = True
    #: it changes the scheduler's state: the engine takes a fresh snapshot after it
    changes_cluster: ClassVar[bool] = False

    def parse(self, raw: dict[str, Any], where: str) -> dict[str, Any]:
        """Its parameters from a playbook (``raw`` holds only its own keys), with defaults, checked."""
        return raw

    @abstractmethod
    def execute(self, ctx: StepContext, action: Action, st: StepState, state: ClusterState) -> str:
        """Do the step now (the engine journaled it ``started``); its outcome word (see the class docstring)."""

    def verify(self, ctx: StepContext, action: Action, st: StepState, state: ClusterState) -> bool:
        """After a restart: did the step found ``started`` take effect? (False: run it again.)"""
        return False

    def describe(self, ctx: StepContext, action: Action, st: StepState, state: ClusterState) -> str:
        """What it would do now, in words (dry-run)."""
        return f"{st.type} {action.node or '-'}"
