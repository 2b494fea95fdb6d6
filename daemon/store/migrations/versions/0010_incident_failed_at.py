"""When an incident first became ``failed``: incident.failed_at (daemon/operations/foresight.py counts hard failures by
it).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incident") as batch:
        batch.add_column(sa.Column("failed_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("incident") as batch:
        batch.drop_column("failed_at")
