"""Alert pipeline state: alerts per incident, aggregation groups, silences, a cursor; outbox delivery times.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert",
        sa.Column("incident_id", sa.String(), primary_key=True),
        sa.Column("group_key", sa.String(), nullable=False, index=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
    )
    op.create_table(
        "alert_group",
        sa.Column("group_key", sa.String(), primary_key=True),
        sa.Column("first_at", sa.Float(), nullable=False),
        sa.Column("flushed_at", sa.Float(), nullable=True),
        sa.Column("sent_at", sa.Float(), nullable=True),
        sa.Column("sent_digest", sa.String(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
    )
    op.create_table(
        "silence",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("starts_at", sa.Float(), nullable=False),
        sa.Column("ends_at", sa.Float(), nullable=False, index=True),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("comment", sa.String(), nullable=False),
    )
    op.create_table(
        "alert_cursor",
        sa.Column("name", sa.String(), primary_key=True),
        sa.Column("value", sa.Float(), nullable=False),
    )
    with op.batch_alter_table("alert_outbox") as batch:
        batch.add_column(sa.Column("delivered_at", sa.Float(), nullable=True))
        batch.create_index("ix_alert_outbox_group_key", ["group_key"])


def downgrade() -> None:
    with op.batch_alter_table("alert_outbox") as batch:
        batch.drop_index("ix_alert_outbox_group_key")
        batch.drop_column("delivered_at")
    for table in ("alert_cursor", "silence", "alert_group", "alert"):
        op.drop_table(table)
