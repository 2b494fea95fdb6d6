"""Alerting's tables: alerts and their groups, the outbox of notifications, the tickets trackers made, silences.

:class:`AlertRecords` is what the alerting wing calls. The alert pipeline reads incidents and writes alerts, groups
and notifications in one transaction (:meth:`AlertRecords.transaction`, an :class:`AlertTransaction`), so a cycle
cut short leaves nothing half told.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlmodel import Session, select

from daemon.store.journal import rows_of_incident
from daemon.store.tables import (ActionRow, AlertGroupRow, AlertRow, IncidentCursorRow, IncidentRow, OutboxRow,
                                 RepairOrderRow, SilenceRow, TicketRow)


class AlertTransaction:
    """One transaction of the alert pipeline: what it reads and writes, committed together when it ends."""

    def __init__(self, session: Session):
        self._s = session

    def cursor(self, name: str) -> float:
        """Where reader ``name`` stopped reading (-inf: it never read)."""
        row = self._s.get(IncidentCursorRow, name)
        return row.value if row else float("-inf")

    def set_cursor(self, name: str, value: float) -> None:
        self._s.merge(IncidentCursorRow(name=name, value=value))

    def incidents_updated_since(self, since: float) -> list[IncidentRow]:
        """Incidents updated at or after ``since``, oldest update first."""
        return list(self._s.exec(select(IncidentRow).where(IncidentRow.updated_at >= since)
                                 .order_by(IncidentRow.updated_at)).all())

    def repairs_updated_since(self, since: float) -> list[RepairOrderRow]:
        """Repair orders updated at or after ``since``, oldest update first."""
        return list(self._s.exec(select(RepairOrderRow).where(RepairOrderRow.updated_at >= since)
                                 .order_by(RepairOrderRow.updated_at)).all())

    def journal_of(self, incident_id: str) -> list[ActionRow]:
        """An incident's action journal rows, in the order written."""
        return rows_of_incident(self._s, incident_id)

    def alert(self, incident_id: str) -> AlertRow | None:
        return self._s.get(AlertRow, incident_id)

    def firing_alerts(self) -> list[AlertRow]:
        return list(self._s.exec(select(AlertRow).where(AlertRow.status == "firing")).all())

    def unfinished_alerts(self) -> list[AlertRow]:
        """Alerts not yet done (firing, or resolved and not yet told), oldest change first."""
        return list(self._s.exec(select(AlertRow).where(AlertRow.status != "done")
                                 .order_by(AlertRow.updated_at, AlertRow.incident_id)).all())

    def group(self, key: str) -> AlertGroupRow | None:
        return self._s.get(AlertGroupRow, key)

    def groups(self) -> list[AlertGroupRow]:
        return list(self._s.exec(select(AlertGroupRow)).all())

    def add_group(self, row: AlertGroupRow) -> None:
        """Add a group, visible at once to the rest of this transaction (its next alert must find it)."""
        self._s.add(row)
        self._s.flush()

    def drop_group(self, row: AlertGroupRow) -> None:
        self._s.delete(row)

    def has_notification(self, key: str, receiver: str) -> bool:
        return self._s.exec(select(OutboxRow.id).where(OutboxRow.idempotency_key == key,
                                                       OutboxRow.receiver == receiver)).first() is not None

    def save(self, row: AlertRow | AlertGroupRow | OutboxRow) -> None:
        """Write a new or changed row with the transaction."""
        self._s.add(row)


class AlertRecords:
    """The alerting tables of a store."""

    def __init__(self, store):
        self.store = store

    @contextmanager
    def transaction(self) -> Iterator[AlertTransaction]:
        """One transaction, committed when the block ends without an exception (rolled back otherwise)."""
        with self.store.session() as s:
            yield AlertTransaction(s)
            s.commit()

    # -- the outbox ------------------------------------------------------------------------------------------
    def pending(self) -> list[OutboxRow]:
        """Notifications not yet delivered nor failed, oldest first."""
        with self.store.session() as s:
            return list(s.exec(select(OutboxRow).where(OutboxRow.status == "pending").order_by(OutboxRow.id)).all())

    def notifications(self, delivered: bool = False) -> list[OutboxRow]:
        """Every notification not yet delivered (with ``delivered``, those too), oldest first."""
        with self.store.session() as s:
            q = select(OutboxRow).order_by(OutboxRow.id)
            if not delivered:
                q = q.where(OutboxRow.status != "delivered")
            return list(s.exec(q).all())

    @contextmanager
    def changing_notification(self, row_id: int) -> Iterator[OutboxRow]:
        """The notification ``row_id``, written back when the block ends."""
        with self.store.session() as s:
            row = s.get(OutboxRow, row_id)
            yield row
            s.add(row)
            s.commit()

    def ticket(self, receiver: str, ref: str) -> TicketRow | None:
        """The ticket ``receiver`` (a tracker) made for alert ``ref``, if it made one."""
        with self.store.session() as s:
            return s.get(TicketRow, (receiver, ref))

    def save_ticket(self, receiver: str, ref: str, key: str, now: float) -> None:
        with self.store.session() as s:
            s.merge(TicketRow(receiver=receiver, ref=ref, key=key, created_at=now))
            s.commit()

    # -- silences --------------------------------------------------------------------------------------------
    def add_silence(self, row: SilenceRow) -> None:
        with self.store.session() as s:
            s.add(row)
            s.commit()

    def end_silence(self, silence_id: str, now: float) -> bool:
        """End a silence now; False when there is no such silence still running."""
        with self.store.session() as s:
            row = s.get(SilenceRow, silence_id)
            if row is None or row.ends_at <= now:
                return False
            row.ends_at = max(now, row.starts_at)
            s.add(row)
            s.commit()
        return True

    def silences(self, ending_after: float | None = None) -> list[SilenceRow]:
        """Every silence (only those ending after ``ending_after``, when given), by start."""
        with self.store.session() as s:
            q = select(SilenceRow).order_by(SilenceRow.starts_at)
            if ending_after is not None:
                q = q.where(SilenceRow.ends_at > ending_after)
            return list(s.exec(q).all())
