"""The alert pipeline: incidents → alerts → groups → inhibit → silences → routing → outbox.

Everything it knows is in the store: the alert of each incident (``alert``), each group's timers and
what it last said (``alert_group``), silences, and how far it has read the incident table
(``alert_cursor``). :meth:`AlertPipeline.step` is called once per daemon tick; a group's notification
and its entry in the outbox are written in one transaction.

Grouping follows Alertmanager: a new group waits ``group_wait`` before its first message (so a rack's
incidents arriving together make one message); later changes are sent at most every
``group_interval``; an unchanged group with firing alerts is repeated every ``repeat_interval``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from daemon.alerting.alert import (REPAIR_PREFIX, Alert, Notification, alert_from_incident, alert_from_repair,
                                   group_key)
from daemon.alerting.outbox import enqueue
from daemon.alerting.routing import Route, route
from daemon.alerting.runbooks import runbook_for
from daemon.alerting.silences import Silence, SilenceBook
from daemon.judgement.incidents import NOT_A_NODE
from daemon.store import ActionRow, AlertGroupRow, AlertRow, IncidentRow, Store
from daemon.store.alerting import AlertRecords, AlertTransaction
from daemon.topology import Topology
from playbooks.scheduler import ClusterState, Scheduler, SchedulerError

log = logging.getLogger("raswarden.alerting")


@dataclass
class AlertingConfig:
    """The ``[alerting]`` table (receivers are built separately: they hold secrets)."""

    group_wait_s: float = 30.0
    group_interval_s: float = 300.0
    repeat_interval_s: float = 4 * 3600.0
    status_url: str = ""
    default_receivers: list[str] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    runbooks: dict[str, str] = field(default_factory=dict)  # category -> the operator's runbook line


@dataclass(frozen=True)
class ActionState:
    """What raswarden did or will do for an incident: in plain words (``text``), and what an operator's commands
    need to know of it (an approval it waits for, the node a drain it did took out of service)."""

    text: str = ""
    awaiting_approval: bool = False
    drained: str | None = None


def describe_action(rows: list[ActionRow]) -> ActionState:
    """What raswarden did or will do for an incident, from its action journal (daemon/store/journal.py): the steps done
    (``done: checkpoint, drain``), the one in progress or failed, or what a dry-run would have done
    (``nothing done``)."""
    parts = []
    awaiting, drained = False, None
    for head in (r for r in rows if r.step == "action"):
        d = head.detail
        mode, inc = d.get("mode", "act"), d.get("incident") or {}
        node = None if inc.get("kind") in NOT_A_NODE else \
            inc.get("scheduler_node") or (inc.get("entity") or "").split("/", 1)[0] or None
        on = f" on {node}" if node else ""
        steps = d.get("steps", [])
        names = ", ".join(s["type"] for s in steps)
        if head.status == "awaiting_approval":
            awaiting = True
            parts.append(f"{head.playbook}: waiting for an operator's approval to {names}{on}")
        elif mode == "shadow":
            parts.append(f"{head.playbook}: shadow mode, the plan ({names}{on}) recorded, nothing done")
        elif mode == "dry-run":
            would = [s.get("detail", {}).get("would") or f"{s['type']}{on}" for s in steps
                     if s.get("status") == "dry-run"]
            parts.append(f"{head.playbook}: dry-run, nothing done; would " + (", ".join(would) or names + on))
        else:
            done = [s["type"] for s in steps if s.get("status") in ("done", "skipped")]
            if node and any(s["type"] == "drain" and s.get("status") == "done" for s in steps):
                drained = node
            current = next((s for s in steps if s.get("status") not in ("done", "skipped")), None)
            text = f"{head.playbook}{on}: " + (f"done: {', '.join(done)}" if done else "nothing done yet")
            if head.status == "held":
                text += f"; held ({d.get('note') or 'a guard'})"
            elif current is not None and current.get("status") == "failed":
                text += f"; {current['type']} failed: {current.get('detail', {}).get('error', 'see the journal')}"
            elif current is not None:
                text += f"; next {current['type']}" + (" (in progress)" if current.get("status") == "started" else "")
            parts.append(text)
    return ActionState("; ".join(parts), awaiting, drained)


def inhibited(a: Alert, firing: set[str]) -> bool:
    """A node's or accelerator's alert is hidden while the rack/cooling incident it belongs to fires."""
    return a.parent is not None and a.parent in firing


class AlertPipeline:
    """Turns the store's incidents into outbox notifications."""

    cursor_name = "incidents"
    repairs_cursor = "repairs"

    def __init__(self, store: Store, config: AlertingConfig, receivers: list[str] | None = None,
                 topology: Topology | None = None, scheduler: Scheduler | None = None):
        self.store = store
        self.config = config
        self.topology = topology or Topology()  # where a part is, for the message
        self.scheduler = scheduler  # whose jobs run on the node, for the message (one snapshot per sync)
        self.records = AlertRecords(store)
        self.silences = SilenceBook(store)
        self.known_receivers = receivers  # None: do not check route targets

    # -- incidents -> alerts ----------------------------------------------------------------------------
    def sync(self, now: float) -> int:
        """Read incidents changed since the cursor and update their alerts; returns alerts changed."""
        changed = 0
        with self.records.transaction() as tx:
            since = tx.cursor(self.cursor_name)
            rows = tx.incidents_updated_since(since)
            newest = since
            jobs: list[ClusterState | None] = []  # the scheduler asked once, and only for an alert that changed
            for inc in rows:
                newest = max(newest, inc.updated_at)
                actions = tx.journal_of(inc.id)
                shard = inc.kind == "shard"  # a shard nobody holds: no place in the topology, its own runbook line
                alert = alert_from_incident(inc, describe_action(actions),
                                            [] if shard else self.topology.place(inc.entity),
                                            runbook_for("shard" if shard else inc.category, self.config.runbooks))
                known = tx.alert(alert.incident_id)
                if known is not None and known.digest == alert.digest():
                    continue  # the cursor is inclusive: the newest incident comes back every sync
                if inc.closed_at is None and not jobs:
                    jobs.append(self._jobs())
                alert.where += self._jobs_of(jobs[0] if jobs else None, inc)
                changed += self._upsert(tx, alert, now, inc.updated_at)
            if rows:
                tx.set_cursor(self.cursor_name, newest)
            changed += self._sync_repairs(tx, now)
            # A firing alert also changes when a playbook step moves (the incident itself does not).
            seen = {inc.id for inc in rows}
            for row in tx.firing_alerts():
                if row.incident_id in seen or row.incident_id.startswith(REPAIR_PREFIX):  # orders: _sync_repairs
                    continue
                state = describe_action(tx.journal_of(row.incident_id))
                if state.text != row.content.get("action", ""):
                    alert = Alert.from_dict({**row.content, "action": state.text,
                                             "awaiting_approval": state.awaiting_approval, "drained": state.drained})
                    changed += self._upsert(tx, alert, now, now)
        return changed

    def _sync_repairs(self, tx: AlertTransaction, now: float) -> int:
        """Repair orders changed since their cursor as alerts (category ``repair``, one order per message, so that a
        ticket tracker makes one ticket of each): a technicians' channel routes on ``category=repair``; every change
        of state tells again, closing resolves."""
        rows = tx.repairs_updated_since(tx.cursor(self.repairs_cursor))
        changed = sum(self._upsert(tx, alert_from_repair(r), now, r.updated_at) for r in rows)
        if rows:
            tx.set_cursor(self.repairs_cursor, max(r.updated_at for r in rows))
        return changed

    def _jobs(self) -> ClusterState | None:
        """The scheduler's jobs now (None without a scheduler, or when it does not answer: the message goes
        without them)."""
        if self.scheduler is None:
            return None
        try:
            return self.scheduler.snapshot()
        except SchedulerError as exc:
            log.warning("alerts go without the jobs on their nodes: the scheduler did not answer: %s", exc)
            return None

    def _jobs_of(self, state: ClusterState | None, inc: IncidentRow) -> list[list[str]]:
        """('jobs', 'id user name, ...') for an open incident on a node or its parts, when the scheduler said."""
        if state is None or inc.closed_at is not None or inc.kind in NOT_A_NODE:
            return []
        node = inc.entity.split("/", 1)[0]
        running = state.jobs_on(self.topology.scheduler_name.get(node, node))
        if not running:
            return [["jobs", "none running"]]
        return [["jobs", ", ".join(" ".join(x for x in (j.id, j.user, j.name) if x) for j in running[:10])
                 + (f" and {len(running) - 10} more" if len(running) > 10 else "")]]

    def _upsert(self, tx: AlertTransaction, alert: Alert, now: float, changed_at: float) -> int:
        row = tx.alert(alert.incident_id)
        digest = alert.digest()
        if row is not None and row.digest == digest:
            return 0
        key = group_key(alert.rack, alert.category)
        if alert.category == "repair":  # one order per message: a ticket tracker makes one ticket of each
            key += f",order={alert.incident_id.removeprefix(REPAIR_PREFIX)}"
        content = alert.as_dict()
        if row is None:
            row = AlertRow(incident_id=alert.incident_id, group_key=key, status=alert.status, digest=digest,
                           updated_at=now, labels=alert.labels, content=content)
        else:
            row.status, row.digest, row.updated_at, row.labels, row.content = (alert.status, digest, now,
                                                                                alert.labels, content)
        tx.save(row)
        if tx.group(key) is None:
            # The group's wait runs from when the incident changed (one tick ago at most in the daemon; long
            # ago after a restart, and then nobody should wait any longer).
            tx.add_group(AlertGroupRow(group_key=key, first_at=min(now, changed_at)))
        return 1

    # -- groups -> notifications ------------------------------------------------------------------------
    def flush(self, now: float) -> list[tuple[Notification, list[str]]]:
        """Send what is due: returns the notifications queued, with their receivers."""
        queued = []
        silences = self.silences.active(now)
        with self.records.transaction() as tx:
            alerts_by_group: dict[str, list[AlertRow]] = {}
            for row in tx.unfinished_alerts():
                alerts_by_group.setdefault(row.group_key, []).append(row)
            firing = {r.incident_id for rows in alerts_by_group.values() for r in rows if r.status == "firing"}
            for g in tx.groups():
                rows = alerts_by_group.get(g.group_key, [])
                if not rows:
                    tx.drop_group(g)
                    continue
                wait = self.config.group_wait_s if g.flushed_at is None else self.config.group_interval_s
                start = g.first_at if g.flushed_at is None else g.flushed_at
                if now < start + wait:
                    continue
                g.flushed_at = now
                visible = [Alert.from_dict(r.content) for r in rows
                           if not inhibited(Alert.from_dict(r.content), firing)
                           and not self._silenced(r.labels, silences, now)]
                n = Notification(g.group_key, g.seq + 1, now, visible, self.config.status_url)
                digest = n.digest() if visible else ""
                repeat = g.sent_at is not None and now - g.sent_at >= self.config.repeat_interval_s and n.firing
                if visible and (digest != g.sent_digest or repeat):
                    receivers = route(n, self.config.routes, self.config.default_receivers)
                    enqueue(tx, n, receivers, now)
                    g.seq, g.sent_digest, g.sent_at = n.seq, digest, now
                    queued.append((n, receivers))
                # Resolved alerts are told once (or never, while silenced or inhibited), then done: the row
                # stays (housekeeping trims it) so that re-reading the closed incident changes nothing.
                for r in rows:
                    if r.status == "resolved":
                        r.status = "done"
                        tx.save(r)
                tx.save(g)
        return queued

    @staticmethod
    def _silenced(labels: dict[str, str], silences: list[Silence], now: float) -> bool:
        return any(sil.mutes(labels, now) for sil in silences)

    def step(self, now: float) -> list[tuple[Notification, list[str]]]:
        """One tick: read incidents, then send what is due."""
        self.sync(now)
        return self.flush(now)
