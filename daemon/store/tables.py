"""The tables of the state database (SQLModel), one class a table. The schema they describe is made and upgraded by
the alembic migrations beside them (``daemon/store/migrations``), never by ``create_all``: a new column is a new
migration and a field here."""

from __future__ import annotations

from sqlalchemy import JSON, Column, Index, LargeBinary, UniqueConstraint
from sqlmodel import Field, SQLModel


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
    failed_at: float | None = None  # when it first became failed (a hard failure; daemon/operations/foresight.py)


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
    """Who acts for a shard, until when (daemon/store/leases.py)."""

    __tablename__ = "lease"
    name: str = Field(primary_key=True)
    holder: str
    acquired_at: float
    expires_at: float


class CollectorStateRow(SQLModel, table=True):
    """Where a live collector stopped reading (daemon/ingest/collectors): saved with the tick that used the data."""

    __tablename__ = "collector_state"
    name: str = Field(primary_key=True)
    value: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    updated_at: float


class RepairOrderRow(SQLModel, table=True):
    """A part to replace or inspect on a node raswarden drained for hardware (daemon/operations/repairs.py): its state,
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
    """Active checks of idle nodes (daemon/operations/validation.py): the one running or the last one, per node."""

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
    """A shard's pipeline warm state (daemon/judgement/warmstate.py): the last one saved."""

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
