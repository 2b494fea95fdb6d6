"""Idle checks: the validation job run on an idle node on a schedule, per node (daemon/operations/validation.py).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idle_check",
        sa.Column("node", sa.String(), primary_key=True),
        sa.Column("checks", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("job", sa.String(), nullable=False),
        sa.Column("reservation", sa.String(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("checked_at", sa.Float(), nullable=True),
        sa.Column("result", sa.String(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idle_check")
