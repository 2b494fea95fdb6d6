"""Persistent state (SQLModel): entities, health, findings, incidents, the action journal, the alert outbox.

SQLite in WAL mode under /var/lib/raswarden by default; PostgreSQL by URL
(``postgresql+psycopg://...``) for several management nodes. The schema is created and upgraded
by alembic migrations (``daemon/migrations``), never by ``create_all``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.util import CommandError
from alembic.config import Config
from sqlalchemy import JSON, Column, Index, LargeBinary, UniqueConstraint, bindparam, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import StaticPool
from sqlmodel import Field, Session, SQLModel, create_engine, delete, func, select

from playbooks import stopping

DEFAULT_URL = "sqlite:////var/lib/raswarden/raswarden.db"


class EntityRow(SQLModel, table=True):
    __tablename__ = "entity"
    id: str = Field(primary_key=True)
    kind: str
    node: str = Field(index=True)
    rack: str | None = None
    first_seen: float
    attrs: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class HealthRow(SQLModel, table=True):
    __tablename__ = "health"
    entity: str = Field(primary_key=True)
    state: str
    since: float
    score: float = 0.0
    reasons: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))


class FindingRow(SQLModel, table=True):
    __tablename__ = "finding"
    __table_args__ = (Index("ux_finding_entity_ts", "entity", "ts", unique=True),)  # written once (migration 0012)
    id: int | None = Field(default=None, primary_key=True)
    ts: float = Field(index=True)
    entity: str = Field(index=True)
    kind: str
    state: str
    score: float
    detector: str
    reasons: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))


_FINDING_COLUMNS = ("ts", "entity", "kind", "state", "score", "detector", "reasons")


class IncidentRow(SQLModel, table=True):
    __tablename__ = "incident"
    id: str = Field(primary_key=True)
    fingerprint: str = Field(index=True)
    entity: str = Field(index=True)
    kind: str
    category: str
    severity: str
    status: str = Field(index=True)  # open | closed
    opened_at: float
    updated_at: float = Field(index=True)
    closed_at: float | None = None
    rack: str | None = None
    close_reason: str = ""
    parent: str | None = Field(default=None, index=True)
    evidence: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    failed_at: float | None = None  # when it first became failed (a hard failure; daemon/foresight.py)


class ActionRow(SQLModel, table=True):
    """The action journal: planned -> started -> done/failed, one row per step attempt."""

    __tablename__ = "action"
    __table_args__ = (UniqueConstraint("idempotency_key"),)
    id: int | None = Field(default=None, primary_key=True)
    idempotency_key: str
    incident_id: str = Field(index=True)
    playbook: str
    step: str
    status: str = Field(index=True)
    ts: float = Field(index=True)
    detail: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class OutboxRow(SQLModel, table=True):
    """One notification for one receiver: pending until delivered, or failed with the platform's error."""

    __tablename__ = "alert_outbox"
    __table_args__ = (UniqueConstraint("idempotency_key", "receiver"),)
    id: int | None = Field(default=None, primary_key=True)
    idempotency_key: str
    receiver: str = Field(index=True)
    group_key: str = Field(index=True)
    status: str = Field(index=True)  # pending | delivered | failed
    attempts: int = 0
    next_attempt_at: float = 0.0
    created_at: float
    last_error: str = ""
    delivered_at: float | None = None
    payload: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class AlertRow(SQLModel, table=True):
    """The alert of one incident as last seen by the alert pipeline (daemon/alerting)."""

    __tablename__ = "alert"
    incident_id: str = Field(primary_key=True)
    group_key: str = Field(index=True)
    status: str  # firing | resolved | done (resolved and told)
    digest: str  # what a notification shows of it; a change makes its group notify again
    updated_at: float
    labels: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    content: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class AlertGroupRow(SQLModel, table=True):
    """An aggregation group (rack + category): when it started, last flushed, last notified."""

    __tablename__ = "alert_group"
    group_key: str = Field(primary_key=True)
    first_at: float
    flushed_at: float | None = None
    sent_at: float | None = None
    sent_digest: str = ""
    seq: int = 0


class SilenceRow(SQLModel, table=True):
    __tablename__ = "silence"
    id: str = Field(primary_key=True)
    matchers: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    starts_at: float
    ends_at: float = Field(index=True)
    created_by: str = ""
    comment: str = ""


class LeaseRow(SQLModel, table=True):
    """Who acts for a shard, until when (daemon/lease.py)."""

    __tablename__ = "lease"
    name: str = Field(primary_key=True)
    holder: str
    acquired_at: float
    expires_at: float


class CollectorStateRow(SQLModel, table=True):
    """Where a live collector stopped reading (daemon/collectors): saved with the tick that used the data."""

    __tablename__ = "collector_state"
    name: str = Field(primary_key=True)
    value: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    updated_at: float


class RepairOrderRow(SQLModel, table=True):
    """A part to replace or inspect on a node raswarden drained for hardware (daemon/repairs.py): its state,
    what is expected of the technician, the evidence, and every change of state (``history``)."""

    __tablename__ = "repair_order"
    __table_args__ = (UniqueConstraint("incident_id", "part"),)
    id: int | None = Field(default=None, primary_key=True)
    incident_id: str = Field(index=True)
    part: str = Field(index=True)  # the entity: sn01-b07/gpu3, sn01-b07/mlx5_0:1, sn01-b07 (the blade)
    node: str = Field(index=True)
    rack: str | None = None
    kind: str  # accelerator, port, node
    category: str
    severity: str  # failed or subhealthy, when opened
    expected: str  # reseat, replace, rma, inspect
    expected_why: str = ""
    state: str = Field(index=True)  # open, in_progress, repaired, validating, closed
    priority: int  # 0 first
    opened_at: float
    updated_at: float
    closed_at: float | None = None
    new_serial: str = ""
    where: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    evidence: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    history: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))


class IdleCheckRow(SQLModel, table=True):
    """Active checks of idle nodes (daemon/validation.py): the one running or the last one, per node."""

    __tablename__ = "idle_check"
    node: str = Field(primary_key=True)
    checks: int = 0  # how many were started (the next job's name carries the count: a restart submits no second)
    status: str = ""  # running, passed, failed
    job: str = ""
    reservation: str = ""
    started_at: float = 0.0
    checked_at: float | None = None  # when the last one ended
    result: str = ""


class TicketRow(SQLModel, table=True):
    """The ticket a tracker made for an alert (a repair order's, mostly): later changes update it, not a new one."""

    __tablename__ = "ticket"
    receiver: str = Field(primary_key=True)
    ref: str = Field(primary_key=True)  # the alert's key: repair-12, or an incident id
    key: str  # the tracker's: a Jira issue key, a ServiceNow sys_id
    created_at: float


class WarmStateRow(SQLModel, table=True):
    """A shard's pipeline warm state (daemon/warmstate.py): the last one saved."""

    __tablename__ = "warm_state"
    shard: str = Field(primary_key=True)
    saved_at: float
    digest: str
    size: int
    blob: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class IncidentCursorRow(SQLModel, table=True):
    """How far a reader of the incident table (the alert pipeline, remediation) has read it, by incident.updated_at.
    The table keeps the name it had when the alert pipeline was its only reader."""

    __tablename__ = "alert_cursor"
    name: str = Field(primary_key=True)
    value: float


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class StoreError(Exception):
    """The state database cannot be opened or migrated: one line naming the store, the cause and what to do."""


# (what the driver's message holds, what it means and what to do); the first that matches names the cause
_CAUSES = (
    ("can't load plugin", "no such kind of store: use sqlite:////PATH or postgresql+psycopg://USER@HOST/DB"),
    ("could not parse sqlalchemy url", "not a store URL: use sqlite:////PATH or postgresql+psycopg://USER@HOST/DB"),
    ("file is not a database", "the file is not a SQLite database (damaged or truncated?): move it aside and start "
                               "again, or restore a backup"),
    ("database disk image is malformed", "the database is damaged: move it aside and start again, or restore a "
                                         "backup"),
    ("database is locked", "another process holds the database locked: wait for it, or stop the raswarden that "
                           "holds it"),
    ("readonly database", "the database is read-only here: give the raswarden user write access to it and its "
                          "directory"),
    ("read-only file system", "the file system is read-only: put the store on a writable one (store.url)"),
    ("unable to open database file", "cannot open the database file: does its directory exist, and may raswarden "
                                     "write there?"),
    ("permission denied", "permission denied: give the raswarden user access to the store"),
    ("no space left", "the disk is full: free space where the store is"),
    ("database or disk is full", "the disk is full: free space where the store is"),
    ("can't locate revision", "written by a newer raswarden (its schema revision is unknown to this one): run the "
                              "newer raswarden, or use another store"),
    ("connection refused", "nothing answers at the server's address: is PostgreSQL running, and is the URL's host "
                           "and port right?"),
    ("could not translate host name", "the server's host name does not resolve: check the URL"),
    ("password authentication failed", "the server refused the credentials: check the URL's user and password"),
    ("holds the migrations lock", "another raswarden is migrating this store: wait for it, or stop it"),
    ("timeout", "the server did not answer in time"),
)


STORE_TROUBLE = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)
"""What the store's server, file or disk raise while the daemon runs (not a constraint violated: that is a bug)."""


def store_cause(exc: BaseException) -> str:
    """What a database exception means and what to do, in one line (the driver's own words in brackets)."""
    text = " ".join(str(getattr(exc, "orig", None) or exc).split())
    lowered = f"{type(exc).__name__} {text}".lower()
    cause = next((what for key, what in _CAUSES if key in lowered), None)
    first = text.split(" [SQL:")[0][:200]
    return f"{cause} ({first})" if cause else first


def store_error(url: str, exc: BaseException) -> StoreError:
    """The one-line :class:`StoreError` for an exception raised opening or migrating the store at ``url``."""
    from sqlalchemy.engine import make_url

    try:
        where = make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL that does not parse is named as given, without what could be a secret
        where = url.split("@")[-1]
    return StoreError(f"store {where}: {store_cause(exc)}")


def _sqlite_read_only(path: str):
    """A read-only connection to the SQLite file at ``path``, for a user who may not write it or its directory.

    ``mode=ro`` reads a WAL database with its -wal and -shm files; where they are not there and cannot be made (a
    directory the user may not write, a read-only mount), no raswarden is writing (a writer keeps its -wal), and the
    file is read as it is (``immutable``)."""
    import sqlite3

    def connect() -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            if not Path(path).exists() or Path(f"{path}-wal").exists():
                raise
            conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("PRAGMA query_only=ON")
        return conn

    return connect


def make_engine(url: str, read_only: bool = False) -> Engine:
    """An engine for ``url``; SQLite gets WAL and a busy timeout, in-memory SQLite one shared connection.
    ``read_only``: the engine never writes (SQLite opened read-only, PostgreSQL transactions read-only), so a user
    who may only read the store can use it."""
    if url.startswith("sqlite"):
        if url in ("sqlite://", "sqlite:///:memory:"):
            engine = create_engine(url, connect_args={"check_same_thread": False}, poolclass=StaticPool)
        else:
            path = url.split(":///", 1)[1] if ":///" in url else ""
            if read_only and path:
                return create_engine("sqlite://", creator=_sqlite_read_only(path))
            if path:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if read_only and url.startswith("postgresql"):
        return create_engine(url, pool_pre_ping=True,
                             connect_args={"options": "-c default_transaction_read_only=on"})
    return create_engine(url, pool_pre_ping=True)


def alembic_config(engine: Engine) -> Config:
    """Alembic configuration pointing at the packaged migrations and at ``engine``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("daemon") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    cfg.attributes["engine"] = engine
    return cfg


class Store:
    """Typed access to the state database."""

    def __init__(self, url: str = DEFAULT_URL, migrate: bool = True, read_only: bool = False):
        """Open (and migrate) the store; a store that cannot be is a :class:`StoreError`, one line. ``read_only``:
        for commands that only read: nothing is written (no migration, no lock file), and the store must already be
        at this raswarden's schema."""
        self.url = url
        try:
            self.engine = make_engine(url, read_only)
            if read_only:
                self._check_schema()
            elif migrate:
                self.migrate()
            else:
                with self.engine.connect() as conn:  # what a migration would have found out
                    conn.execute(text("SELECT 1"))
        except (SQLAlchemyError, OSError, CommandError, TimeoutError, ValueError) as exc:
            engine = getattr(self, "engine", None)
            if engine is not None:
                engine.dispose()
            raise store_error(url, exc) from exc

    def migrate(self) -> None:
        """Bring the schema to the newest migration, one raswarden at a time: the shards of a cluster started together
        on a new database would otherwise all create its tables (PostgreSQL refuses the second alembic_version,
        SQLite says the database is locked); the later ones find it done."""
        with self.cluster_lock("migrations", timeout_s=600.0), self.engine.begin() as conn:
            cfg = alembic_config(self.engine)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def _check_schema(self) -> None:
        """Raise ValueError (said as one line by the caller) unless the store is at this raswarden's schema."""
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(alembic_config(self.engine))
        with self.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
        head = script.get_current_head()
        if current == head:
            return
        if current is None:
            raise ValueError("no raswarden schema in it: has the daemon (or raswarden init) run with this store?")
        try:
            script.get_revision(current)
        except Exception:  # noqa: BLE001 - alembic's error for a revision it does not know
            raise ValueError(f"can't locate revision {current}") from None
        raise ValueError(f"its schema is at revision {current}, this raswarden's at {head}: a command that writes "
                         "(or the daemon) brings it up to date; one that only reads does not")

    def session(self) -> Session:
        return Session(self.engine)

    @contextmanager
    def cluster_lock(self, name: str, timeout_s: float = 30.0) -> Iterator[None]:
        """Held by one raswarden at a time among all that share this store (the shards of a cluster on one
        PostgreSQL; the service and a ``raswarden playbook run`` on one SQLite file), for a check-then-act that must
        not interleave: the blast-radius budget. PostgreSQL: a session advisory lock (a holder that dies loses it
        with its connection); SQLite: an flock on a file beside the database; in memory: a lock of this process.
        Raises TimeoutError when it is not got within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        if self.engine.dialect.name == "postgresql":
            key = int.from_bytes(hashlib.sha256(f"raswarden:{name}".encode()).digest()[:8], "big", signed=True)
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                while not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
                    _wait(deadline, name)
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            return
        path = self.engine.url.database
        if not path or path == ":memory:":
            lock = _PROCESS_LOCKS.setdefault((id(self.engine), name), threading.Lock())
            while not lock.acquire(timeout=0.05):
                _wait(deadline, name)
            try:
                yield
            finally:
                lock.release()
            return
        fd = os.open(f"{path}.{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    _wait(deadline, name)
            yield
        finally:
            os.close(fd)  # releases the flock

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

    def save_warm_state(self, shard: str, saved_at: float, digest: str, blob: bytes) -> None:
        """Replace the shard's warm state."""
        with self.session() as s:
            s.merge(WarmStateRow(shard=shard, saved_at=saved_at, digest=digest, size=len(blob), blob=blob))
            s.commit()

    def warm_state(self, shard: str) -> WarmStateRow | None:
        with self.session() as s:
            return s.get(WarmStateRow, shard)

    def incidents(self, status: str | None = None) -> list[IncidentRow]:
        with self.session() as s:
            q = select(IncidentRow).order_by(IncidentRow.opened_at, IncidentRow.id)
            if status:
                q = q.where(IncidentRow.status == status)
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

    def collector_states(self) -> list[CollectorStateRow]:
        """The collectors' saved states (their cursors), by name."""
        with self.session() as s:
            return list(s.exec(select(CollectorStateRow).order_by(CollectorStateRow.name)).all())

    def incidents_updated_since(self, since: float) -> list[IncidentRow]:
        """Incidents updated at or after ``since`` (inclusive: a later transaction may share that time), oldest
        update first."""
        with self.session() as s:
            return list(s.exec(_UPDATED_SINCE, params={"since": since}).all())

    def incidents_opened_since(self, since: float) -> int:
        """How many incidents were opened at or after ``since``."""
        with self.session() as s:
            return s.exec(select(func.count()).select_from(IncidentRow).where(IncidentRow.opened_at >= since)).one()

    def incident_cursor(self, name: str) -> float | None:
        """Where reader ``name`` stopped reading the incident table (None: it never read it)."""
        with self.engine.connect() as conn:
            return conn.execute(_CURSOR, {"name": name}).scalar()

    def save_incident_cursor(self, name: str, value: float) -> None:
        with self.session() as s:
            s.merge(IncidentCursorRow(name=name, value=value))
            s.commit()

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

    def node_racks(self) -> dict[str, str | None]:
        """Every known node's rack."""
        with self.session() as s:
            return {r.node: r.rack for r in s.exec(select(EntityRow).where(EntityRow.kind == "node")).all()}

    def count_nodes(self) -> int:
        with self.session() as s:
            return s.exec(select(func.count()).select_from(EntityRow).where(EntityRow.kind == "node")).one()

    def trim(self, cutoff: float) -> dict[str, int]:
        """Remove what is older than ``cutoff``: findings, delivered or failed notifications, alerts told and done;
        how many rows of each."""
        with self.session() as s:
            out = {
                "findings": s.exec(delete(FindingRow).where(FindingRow.ts < cutoff)).rowcount,
                "outbox": s.exec(delete(OutboxRow).where(OutboxRow.status != "pending",
                                                         OutboxRow.created_at < cutoff)).rowcount,
                "alerts": s.exec(delete(AlertRow).where(AlertRow.status == "done",
                                                        AlertRow.updated_at < cutoff)).rowcount,
            }
            s.commit()
        return out

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

    def actions_of(self, incident_id: str) -> list[ActionRow]:
        """An incident's action journal (playbook heads and their steps), in the order written."""
        with self.session() as s:
            return list(s.exec(select(ActionRow).where(ActionRow.incident_id == incident_id)
                               .order_by(ActionRow.id)).all())

    def close(self) -> None:
        self.engine.dispose()


_PROCESS_LOCKS: dict[tuple[int, str], threading.Lock] = {}


# Statements the playbook pass runs every few seconds, built once: building a select and its cache key cost more
# than running it on an idle store (Remediation.sync's two reads, a third of the closed loop's remediation).
_CURSOR = select(IncidentCursorRow.value).where(IncidentCursorRow.name == bindparam("name"))
_UPDATED_SINCE = select(IncidentRow).where(IncidentRow.updated_at >= bindparam("since")).order_by(
    IncidentRow.updated_at)


def _wait(deadline: float, name: str) -> None:
    if stopping.requested():  # a stop does not wait out another raswarden's lock: the caller tries next start
        raise stopping.Stopped(f"raswarden is stopping: gave up waiting for the {name} lock")
    if time.monotonic() > deadline:
        raise TimeoutError(f"another raswarden holds the {name} lock")
    stopping.pause(0.05)


def dumps(obj: Any) -> str:
    """Compact, key-sorted JSON (the form findings and payloads are compared in)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
