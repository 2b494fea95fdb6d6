"""The action journal in the store: playbook actions and each step's state, and operators' manual commands
(``action`` table).

Each action is one row (``step = "action"``) holding its whole state, and one row per step (``key#i``)
showing that step's status for queries and the status page; :meth:`StoreJournal.save` writes them in one
transaction, so what the engine persisted before a step started is what a restarted process finds.
The circuit breaker's state is a row of its own; a manual drain or resume (``raswarden drain``) one row
of playbook ``manual``.
"""

from __future__ import annotations

import time

from sqlalchemy import bindparam
from sqlmodel import Session, select

from daemon.store.tables import ActionRow
from playbooks.engine import OPEN, Action

# built once: the playbook pass reads the open actions every few seconds (daemon/store/incidents.py says why)
_ALL = select(ActionRow.detail).where(ActionRow.step == "action").order_by(ActionRow.id)
_IN_STATUS = _ALL.where(ActionRow.status.in_(bindparam("status", expanding=True)))

BREAKER_KEY = "circuit-breaker"


def rows_of_incident(session: Session, incident_id: str) -> list[ActionRow]:
    """An incident's journal rows in the order written, read in the caller's session (its transaction)."""
    return list(session.exec(select(ActionRow).where(ActionRow.incident_id == incident_id)
                             .order_by(ActionRow.id)).all())


class StoreJournal:
    """:class:`playbooks.engine.Journal` on the state database."""

    def __init__(self, store):
        self.store = store

    def save(self, action: Action) -> None:
        with self.store.session() as s:
            self._put(s, action.key, action.incident.id, action.playbook, "action", action.status, action.created_at,
                      action.as_dict())
            for i, st in enumerate(action.steps):
                self._put(s, f"{action.key}#{i}", action.incident.id, action.playbook, st.type, st.status,
                          st.started_at or action.created_at,
                          {"node": action.node, "mode": action.mode, "attempts": st.attempts,
                           "finished_at": st.finished_at, **st.detail})
            s.commit()

    @staticmethod
    def _put(s, key, incident, playbook, step, status, ts, detail) -> None:
        row = s.exec(select(ActionRow).where(ActionRow.idempotency_key == key)).first()
        if row is None:
            row = ActionRow(idempotency_key=key, incident_id=incident, playbook=playbook, step=step, status=status,
                            ts=ts, detail=detail)
        else:
            row.status, row.ts, row.detail = status, ts, detail
        s.add(row)

    def budget_lock(self):
        """Held while a step checks the blast-radius budget and acts on it: one raswarden at a time on this store
        (:meth:`Store.cluster_lock`), so two shards can never both take the budget's last node."""
        return self.store.cluster_lock("blast-radius")

    def get(self, key: str) -> Action | None:
        with self.store.session() as s:
            row = s.exec(select(ActionRow).where(ActionRow.idempotency_key == key, ActionRow.step == "action")).first()
        return Action.from_dict(row.detail) if row else None

    def actions(self, status: tuple[str, ...] | None = None) -> list[Action]:
        """Every action (in ``status`` only, when given), oldest first."""
        with self.store.engine.connect() as conn:
            details = conn.execute(_IN_STATUS, {"status": list(status)}) if status else conn.execute(_ALL)
            return [Action.from_dict(detail) for (detail,) in details]

    def open_actions(self) -> list[Action]:
        return self.actions(OPEN)

    def actions_for(self, incident_id: str) -> list[Action]:
        """Every action planned for one incident, oldest first."""
        with self.store.session() as s:
            rows = s.exec(select(ActionRow).where(ActionRow.step == "action", ActionRow.incident_id == incident_id)
                          .order_by(ActionRow.id)).all()
        return [Action.from_dict(r.detail) for r in rows]

    def started_since(self, playbook: str, since: float) -> int:
        return sum(1 for a in self.actions() if a.playbook == playbook and a.mode == "act" and any(
            st.started_at is not None and st.started_at >= since for st in a.steps[:1]))

    def drains_of(self, node: str, since: float) -> int:
        """How many incidents raswarden drained ``node`` for since ``since`` (the repeat-offender count)."""
        with self.store.session() as s:
            rows = s.exec(select(ActionRow).where(ActionRow.step == "drain", ActionRow.status == "done",
                                                  ActionRow.ts >= since)).all()
        # a drain that took effect (not dry-run, not a no-op on a node already drained), once per incident
        return len({r.incident_id for r in rows if r.detail.get("node") == node
                    and r.detail.get("mode", "act") == "act" and "already drained" not in r.detail.get("note", "")})

    def breaker(self) -> str | None:
        with self.store.session() as s:
            row = s.exec(select(ActionRow).where(ActionRow.idempotency_key == BREAKER_KEY)).first()
        return row.detail.get("reason") if row is not None and row.status == "tripped" else None

    def set_breaker(self, reason: str | None) -> None:
        with self.store.session() as s:
            self._put(s, BREAKER_KEY, "-", "-", "breaker", "tripped" if reason else "reset", time.time(),
                      {"reason": reason or ""})
            s.commit()

    def rows_of(self, incident_id: str) -> list[ActionRow]:
        """An incident's journal rows (playbook heads and their steps), in the order written."""
        with self.store.session() as s:
            return rows_of_incident(s, incident_id)

    def recent_rows(self, limit: int = 200) -> list[ActionRow]:
        """The newest ``limit`` rows of the journal, newest first."""
        with self.store.session() as s:
            return list(s.exec(select(ActionRow).order_by(ActionRow.ts.desc()).limit(limit)).all())

    def step_rows(self, steps: tuple[str, ...], since: float) -> list[ActionRow]:
        """The rows of steps of these types written at or after ``since``, in the order written."""
        with self.store.session() as s:
            return list(s.exec(select(ActionRow).where(ActionRow.step.in_(steps), ActionRow.ts >= since)
                               .order_by(ActionRow.id)).all())

    def record_manual(self, command: str, node: str, detail: dict, now: float) -> None:
        """Journal an operator's ``drain`` or ``resume`` of ``node`` (playbook ``manual``)."""
        with self.store.session() as s:
            s.add(ActionRow(idempotency_key=f"manual:{command}:{node}:{now:.6f}", incident_id="-", playbook="manual",
                            step=command, status="done", ts=now, detail=detail))
            s.commit()

    def manual_rows_after(self, command: str, after_id: int) -> list[ActionRow]:
        """The operators' ``command`` rows written after row ``after_id``, in the order written."""
        with self.store.session() as s:
            return list(s.exec(select(ActionRow).where(ActionRow.playbook == "manual", ActionRow.step == command,
                                                       ActionRow.id > after_id).order_by(ActionRow.id)).all())
