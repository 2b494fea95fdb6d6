"""Tickets: the tracker's key of the ticket made for an alert (daemon/alerting/receivers/ticket.py).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ticket",
        sa.Column("receiver", sa.String(), primary_key=True),
        sa.Column("ref", sa.String(), primary_key=True),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ticket")
