"""Indexes on the journal's times: incident.updated_at and action.ts.

The incident and action tables are never trimmed (they are the journal). The foresight that checkpoint advice is
built on reads the last 180 days of both every 5 minutes, and the remediation reads the incidents changed since
its cursor every cycle; without these every read scanned the whole journal (bench/advice.py: a year of a
100,000-card fleet's journal is about 220,000 incidents and as many journal steps).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incident") as batch:
        batch.create_index("ix_incident_updated_at", ["updated_at"])
    with op.batch_alter_table("action") as batch:
        batch.create_index("ix_action_ts", ["ts"])


def downgrade() -> None:
    with op.batch_alter_table("action") as batch:
        batch.drop_index("ix_action_ts")
    with op.batch_alter_table("incident") as batch:
        batch.drop_index("ix_incident_updated_at")
