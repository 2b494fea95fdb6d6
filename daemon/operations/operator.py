"""What an operator asks of raswarden by hand, shared by the CLI and the HTTP API: drain or resume a node,
approve a waiting action, add a silence. Each is recorded; each failure is an :class:`OperatorError` whose
message says what to do.
"""

from __future__ import annotations

import time

from daemon.alerting.silences import Silence, SilenceBook
from daemon.store import Store
from daemon.store.journal import StoreJournal
from playbooks.duration import parse_duration
from playbooks.guards import REASON_PREFIX
from playbooks.scheduler import DRAIN, Scheduler, SchedulerError


class OperatorError(Exception):
    """A request that cannot be carried out; ``status`` is the HTTP status the API answers with."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(message)
        self.status = status


def node_action(scheduler: Scheduler | None, store: Store, command: str, node: str, reason: str, who: str,
                force: bool = False, repaired: bool = False) -> str:
    """Drain or resume ``node`` as the operator ``who`` (journaled); someone else's drain only with ``force``.

    A resume with ``repaired`` says the node's parts were replaced: the running daemon's detectors forget
    what they remember of its entities (see :func:`repaired_nodes`)."""
    if command not in ("drain", "resume"):
        raise OperatorError(f"unknown command {command!r}", 400)
    if not reason.strip():
        raise OperatorError("a reason is required", 400)
    if scheduler is None:
        raise OperatorError("no scheduler configured ([scheduler] type)", 400)
    try:
        info = scheduler.snapshot().nodes.get(node)
        if info is None:
            raise OperatorError(f"the scheduler has no node {node!r}", 404)
        if command == "drain":
            scheduler.drain(node, f"{REASON_PREFIX} manual by {who}: {reason}")
        else:
            if DRAIN in info.states and not info.reason.startswith(REASON_PREFIX) and not force:
                raise OperatorError(f"{node} was drained by {info.reason_set_by or 'someone else'} ({info.reason!r}); "
                                    "use --force to resume it anyway")
            scheduler.resume(node)
    except SchedulerError as exc:
        raise OperatorError(f"{exc}" + (" (temporary: try again)" if exc.retryable else ""), 503) from None
    now = time.time()
    detail = {"node": node, "by": who, "reason": reason} | ({"repaired": True} if repaired else {})
    StoreJournal(store).record_manual(command, node, detail, now)
    return f"{node}: {command} ({reason}) by {who}" + (", parts replaced" if repaired else "")


def repaired_nodes(store: Store, after_id: int) -> tuple[list[str], int]:
    """Nodes an operator resumed as repaired since journal row ``after_id``, and the last row id read."""
    rows = StoreJournal(store).manual_rows_after("resume", after_id)
    nodes = [r.detail["node"] for r in rows if r.detail.get("repaired")]
    return nodes, max([after_id] + [r.id for r in rows])


def approve(remediation, target: str, who: str) -> list[str]:
    """Approve every action waiting for an operator whose key or incident is ``target``."""
    keys = [a.key for a in remediation.journal.actions(("awaiting_approval",)) if target in (a.key, a.incident.id)]
    if not keys:
        raise OperatorError(f"nothing awaits approval for {target}", 404)
    for key in keys:
        remediation.engine.approve(key, who)
    return keys


def add_silence(store: Store, matchers: list[str], duration: str, who: str, comment: str = "") -> Silence:
    """Silence alerts matching ``matchers`` (``rack=r07``, ``category=~gpu_.*``) for ``duration``."""
    now = time.time()
    try:
        ends = now + parse_duration(duration, "duration")
        return SilenceBook(store).add(matchers, now, ends, who, comment)
    except ValueError as exc:
        raise OperatorError(str(exc), 400) from None
