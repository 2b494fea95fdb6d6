"""Where each reader of the fleet stands: the collectors' cursors, how far a reader of the incident table has read
it, and each shard's warm detector state (:class:`ProgressRecords`, a part of :class:`daemon.store.Store`)."""

from __future__ import annotations

from sqlalchemy import bindparam
from sqlmodel import select

from daemon.store.tables import CollectorStateRow, IncidentCursorRow, WarmStateRow

# built once, as daemon/store/incidents.py's _UPDATED_SINCE (the playbook pass reads it every few seconds)
_CURSOR = select(IncidentCursorRow.value).where(IncidentCursorRow.name == bindparam("name"))


class ProgressRecords:
    """The collector state, incident cursor and warm state tables, for a class that has ``session()`` and
    ``engine``."""

    def collector_state(self, name: str) -> dict:
        """The saved state of collector ``name`` (empty when it never saved one)."""
        with self.session() as s:
            row = s.get(CollectorStateRow, name)
            return dict(row.value) if row else {}

    def save_collector_state(self, states: dict[str, dict], now: float) -> None:
        """Save the states of several collectors in one transaction."""
        if not states:
            return
        with self.session() as s:
            for name, value in states.items():
                s.merge(CollectorStateRow(name=name, value=value, updated_at=now))
            s.commit()

    def collector_states(self) -> list[CollectorStateRow]:
        """The collectors' saved states (their cursors), by name."""
        with self.session() as s:
            return list(s.exec(select(CollectorStateRow).order_by(CollectorStateRow.name)).all())

    def incident_cursor(self, name: str) -> float | None:
        """Where reader ``name`` stopped reading the incident table (None: it never read it)."""
        with self.engine.connect() as conn:
            return conn.execute(_CURSOR, {"name": name}).scalar()

    def save_incident_cursor(self, name: str, value: float) -> None:
        with self.session() as s:
            s.merge(IncidentCursorRow(name=name, value=value))
            s.commit()

    def save_warm_state(self, shard: str, saved_at: float, digest: str, blob: bytes) -> None:
        """Replace the shard's warm state."""
        with self.session() as s:
            s.merge(WarmStateRow(shard=shard, saved_at=saved_at, digest=digest, size=len(blob), blob=blob))
            s.commit()

    def warm_state(self, shard: str) -> WarmStateRow | None:
        with self.session() as s:
            return s.get(WarmStateRow, shard)
