"""Incidents grouped under a rack or cooling-loop incident: incident.parent.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incident") as batch:
        batch.add_column(sa.Column("parent", sa.String(), nullable=True))
        batch.create_index("ix_incident_parent", ["parent"])


def downgrade() -> None:
    with op.batch_alter_table("incident") as batch:
        batch.drop_index("ix_incident_parent")
        batch.drop_column("parent")
