"""Incidents, findings, health and entities: what the pipeline writes each tick and what the CLI, the status page,
the alert pipeline and remediation read back (:class:`IncidentRecords`, a part of :class:`daemon.store.Store`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import bindparam
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import func, select

from daemon.store.tables import CollectorStateRow, EntityRow, FindingRow, HealthRow, IncidentRow

_FINDING_COLUMNS = ("ts", "entity", "kind", "state", "score", "detector", "reasons")

# built once: the playbook pass reads the incidents updated since its cursor every few seconds, and building a
# select and its cache key cost more than running it on an idle store (a third of the closed loop's remediation)
_UPDATED_SINCE = select(IncidentRow).where(IncidentRow.updated_at >= bindparam("since")).order_by(
    IncidentRow.updated_at)


_OUTLINE = (IncidentRow.id, IncidentRow.entity, IncidentRow.kind, IncidentRow.category, IncidentRow.rack,
            IncidentRow.opened_at, IncidentRow.closed_at, IncidentRow.failed_at)


class IncidentRecords:
    """The incident, finding, health and entity tables, for a class that has ``session()`` and ``engine``."""

    def record_tick(
        self,
        findings: Iterable[dict[str, Any]],
        incidents: Iterable[Any],
        health: Iterable[dict[str, Any]] = (),
        collector_state: dict[str, dict] | None = None,
        now: float = 0.0,
    ) -> None:
        """Persist one tick's findings, changed incidents, health rows and collector states in one transaction."""
        findings = list(findings)
        incidents = list(incidents)
        health = list(health)
        if not (findings or incidents or health or collector_state):
            return
        with self.session() as s:
            for name, value in (collector_state or {}).items():
                s.merge(CollectorStateRow(name=name, value=value, updated_at=now))
            if findings:  # one finding an entity a tick: one there already (a replay again) is written as nothing
                dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
                insert = dialect.insert(FindingRow.__table__)
                s.execute(insert.values([{k: f[k] for k in _FINDING_COLUMNS} for f in findings])
                          .on_conflict_do_nothing(index_elements=["entity", "ts"]))
            for inc in incidents:
                s.merge(IncidentRow(
                    id=inc.id, fingerprint=inc.fingerprint, entity=inc.entity, kind=inc.kind,
                    category=inc.category, severity=inc.severity.label, status="open" if inc.open else "closed",
                    opened_at=inc.opened_at, updated_at=inc.updated_at, closed_at=inc.closed_at, rack=inc.rack,
                    close_reason=inc.close_reason, evidence=list(inc.evidence), parent=inc.parent,
                    failed_at=inc.failed_at,
                ))
            for h in health:
                s.merge(HealthRow(**h))
            s.commit()

    def upsert_entities(self, rows: Iterable[dict[str, Any]]) -> None:
        """Insert entities not yet known (first sight wins)."""
        rows = list(rows)
        if not rows:
            return
        with self.session() as s:
            known = set(s.exec(select(EntityRow.id)).all())
            for r in rows:
                if r["id"] not in known:
                    s.add(EntityRow(**r))
            s.commit()

    def note_identities(self, seen: list[tuple[str, str, float]]) -> list[tuple[str, str, str]]:
        """Record each accelerator's identity (UUID or serial; with the time of its first sample) in its entity's
        attributes; returns the replaced parts, (entity, old identity, new identity): the old one is kept in
        ``attrs["replaced"]`` with when its successor first reported."""
        changed = []
        with self.session() as s:
            for entity, identity, now in seen:
                row = s.get(EntityRow, entity)
                if row is None:
                    continue
                attrs = dict(row.attrs or {})
                old = attrs.get("identity")
                if old == identity:
                    continue
                if old is not None:
                    attrs["replaced"] = [*attrs.get("replaced", []), {"identity": old, "until": now}]
                    changed.append((entity, old, identity))
                attrs["identity"] = identity
                row.attrs = attrs
                s.add(row)
            s.commit()
        return changed

    def incidents(self, status: str | None = None, kind: str | None = None) -> list[IncidentRow]:
        """The incidents (``open`` or ``closed`` only, of one ``kind`` only, when given), oldest first."""
        with self.session() as s:
            q = select(IncidentRow).order_by(IncidentRow.opened_at, IncidentRow.id)
            if status:
                q = q.where(IncidentRow.status == status)
            if kind is not None:
                q = q.where(IncidentRow.kind == kind)
            return list(s.exec(q).all())

    def open_incidents_in_racks(self, racks: Iterable[str], kind: str | None = None) -> list[IncidentRow]:
        """The open incidents placed in these racks (of one ``kind``, e.g. ``rack``, or all), oldest first."""
        with self.session() as s:
            q = select(IncidentRow).where(IncidentRow.status == "open", IncidentRow.rack.in_(list(racks)))
            if kind is not None:
                q = q.where(IncidentRow.kind == kind)
            return list(s.exec(q.order_by(IncidentRow.opened_at, IncidentRow.id)).all())

    def incident(self, incident_id: str) -> IncidentRow | None:
        with self.session() as s:
            return s.get(IncidentRow, incident_id)

    def incidents_updated_since(self, since: float) -> list[IncidentRow]:
        """Incidents updated at or after ``since`` (inclusive: a later transaction may share that time), oldest
        update first."""
        with self.session() as s:
            return list(s.exec(_UPDATED_SINCE, params={"since": since}).all())

    def incident_outlines(self, kinds: Iterable[str], updated_since: float,
                          but_category: str = "telemetry") -> list[Any]:
        """The incidents of these kinds updated at or after ``updated_since`` (none of ``but_category``), as rows of
        id, entity, kind, category, rack, opened_at, closed_at and failed_at only: a large fleet's window holds a
        hundred thousand incidents, and their evidence is not read (daemon/operations/foresight.py)."""
        with self.session() as s:
            return list(s.exec(select(*_OUTLINE).where(IncidentRow.kind.in_(list(kinds)),
                                                       IncidentRow.category != but_category,
                                                       IncidentRow.updated_at >= updated_since)).all())

    def incidents_opened_since(self, since: float) -> int:
        """How many incidents were opened at or after ``since``."""
        with self.session() as s:
            return s.exec(select(func.count()).select_from(IncidentRow).where(IncidentRow.opened_at >= since)).one()

    def entity_attrs(self, ids: Iterable[str]) -> dict[str, dict | None]:
        """The attributes (labels) of the known entities among ``ids``."""
        with self.session() as s:
            return {e.id: e.attrs for e in s.exec(select(EntityRow).where(EntityRow.id.in_(set(ids)))).all()}

    def data_until(self) -> float | None:
        """The newest time the store holds data for: its last finding, incident change or collector state (a replayed
        trace's end; a live daemon's last cycle). None when it holds none."""
        with self.session() as s:
            times = [s.exec(select(func.max(col))).one() for col in (FindingRow.ts, IncidentRow.updated_at,
                                                                      CollectorStateRow.updated_at)]
        times = [t for t in times if t is not None]
        return max(times) if times else None

    def entities(self, kind: str | None = None) -> list[EntityRow]:
        """Every known entity (of one ``kind``, e.g. ``node``), by id."""
        with self.session() as s:
            q = select(EntityRow).order_by(EntityRow.id)
            if kind is not None:
                q = q.where(EntityRow.kind == kind)
            return list(s.exec(q).all())

    def entity_counts(self) -> dict[str, int]:
        """How many entities of each kind the store knows (the population an MTBF is over)."""
        with self.session() as s:
            return {kind: int(n) for kind, n in s.exec(select(EntityRow.kind, func.count()).group_by(EntityRow.kind))}

    def node_racks(self) -> dict[str, str | None]:
        """Every known node's rack."""
        return {r.node: r.rack for r in self.entities("node")}

    def count_nodes(self) -> int:
        with self.session() as s:
            return s.exec(select(func.count()).select_from(EntityRow).where(EntityRow.kind == "node")).one()

    def health(self) -> list[HealthRow]:
        """The last recorded visible state of every entity that ever changed state."""
        with self.session() as s:
            return list(s.exec(select(HealthRow).order_by(HealthRow.entity)).all())

    def findings(self) -> list[FindingRow]:
        with self.session() as s:
            return list(s.exec(select(FindingRow).order_by(FindingRow.id)).all())

    def findings_of(self, entities: list[str], since: float, until: float | None = None,
                    limit: int = 500) -> list[FindingRow]:
        """The findings on ``entities`` from ``since`` (to ``until``), oldest first, at most ``limit`` (the newest)."""
        with self.session() as s:
            q = select(FindingRow).where(FindingRow.entity.in_(entities), FindingRow.ts >= since)
            if until is not None:
                q = q.where(FindingRow.ts <= until)
            rows = list(s.exec(q.order_by(FindingRow.ts.desc(), FindingRow.id.desc()).limit(limit)).all())
        return rows[::-1]
