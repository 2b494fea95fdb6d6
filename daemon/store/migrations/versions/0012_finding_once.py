"""A finding is written once: unique on (entity, ts).

A finding is an entity's state transition at a tick; an entity has one state a tick, so (entity, ts) names it. A trace
replayed twice into one database doubled every finding row, and a replay killed late and run again repeated those it
had written (issue 54). Rows written twice before are removed, the first kept; the store then writes a finding that is
there already as nothing (``Store.record_tick``).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM finding WHERE id NOT IN (SELECT min(id) FROM finding GROUP BY entity, ts)")
    with op.batch_alter_table("finding") as batch:
        batch.create_index("ux_finding_entity_ts", ["entity", "ts"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("finding") as batch:
        batch.drop_index("ux_finding_entity_ts")
