"""Initial schema: entities, health, findings, incidents, action journal, alert outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entity",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("node", sa.String(), nullable=False, index=True),
        sa.Column("rack", sa.String(), nullable=True),
        sa.Column("first_seen", sa.Float(), nullable=False),
        sa.Column("attrs", sa.JSON(), nullable=False),
    )
    op.create_table(
        "health",
        sa.Column("entity", sa.String(), primary_key=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
    )
    op.create_table(
        "finding",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Float(), nullable=False, index=True),
        sa.Column("entity", sa.String(), nullable=False, index=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("detector", sa.String(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
    )
    op.create_table(
        "incident",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("fingerprint", sa.String(), nullable=False, index=True),
        sa.Column("entity", sa.String(), nullable=False, index=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("category", sa.String(), nullable=False),
        sa.Column("severity", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False, index=True),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=True),
        sa.Column("rack", sa.String(), nullable=True),
        sa.Column("close_reason", sa.String(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
    )
    op.create_table(
        "action",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("idempotency_key", sa.String(), nullable=False, unique=True),
        sa.Column("incident_id", sa.String(), nullable=False, index=True),
        sa.Column("playbook", sa.String(), nullable=False),
        sa.Column("step", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False, index=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
    )
    op.create_table(
        "alert_outbox",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("idempotency_key", sa.String(), nullable=False),
        sa.Column("receiver", sa.String(), nullable=False, index=True),
        sa.Column("group_key", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False, index=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_error", sa.String(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.UniqueConstraint("idempotency_key", "receiver"),
    )


def downgrade() -> None:
    for table in ("alert_outbox", "action", "incident", "finding", "health", "entity"):
        op.drop_table(table)
