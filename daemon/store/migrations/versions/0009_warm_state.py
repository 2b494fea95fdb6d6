"""Warm state: the pipeline's streaming memory per shard, so a restart or a standby does not warm up afresh
(daemon/judgement/warmstate.py).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "warm_state",
        sa.Column("shard", sa.String(), primary_key=True),
        sa.Column("saved_at", sa.Float(), nullable=False),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("warm_state")
