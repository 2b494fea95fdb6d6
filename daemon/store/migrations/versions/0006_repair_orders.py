"""Repair orders: a part to replace or inspect on a node drained for hardware (daemon/operations/repairs.py).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repair_order",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("incident_id", sa.String(), nullable=False, index=True),
        sa.Column("part", sa.String(), nullable=False, index=True),
        sa.Column("node", sa.String(), nullable=False, index=True),
        sa.Column("rack", sa.String(), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("category", sa.String(), nullable=False),
        sa.Column("severity", sa.String(), nullable=False),
        sa.Column("expected", sa.String(), nullable=False),
        sa.Column("expected_why", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False, index=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=True),
        sa.Column("new_serial", sa.String(), nullable=False),
        sa.Column("where", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.UniqueConstraint("incident_id", "part"),
    )


def downgrade() -> None:
    op.drop_table("repair_order")
