"""The store: raswarden's persistence boundary. No module outside this package (and its migrations) imports
sqlmodel or sqlalchemy; the rest of the code calls the methods of the records here and gets rows back.

- ``tables``: one SQLModel class a table; ``migrations``: alembic, the only maker of the schema.
- ``engine``: the engine for a URL (SQLite, PostgreSQL, read-only), and what a database error means in one line.
- ``database``: :class:`Store`, the open database (sessions, cluster-wide locks, housekeeping), which carries
  ``incidents`` (incidents, findings, health, entities) and ``progress`` (readers' cursors, warm state).
- One module per aggregate beside them: ``journal`` (playbook actions and their steps, manual commands),
  ``leases`` (shard leases), ``alerting`` (alerts, groups, the outbox, tickets, silences), ``repairs`` (repair
  orders and idle checks).

May import: :mod:`playbooks` (for the stop flag and the action model) and nothing else of raswarden's.
"""

from daemon.store.database import Store
from daemon.store.engine import (DEFAULT_URL, STORE_TROUBLE, StoreError, alembic_config, dumps, make_engine,
                                 store_cause, store_error)
from daemon.store.tables import (ActionRow, AlertGroupRow, AlertRow, CollectorStateRow, EntityRow, FindingRow,
                                 HealthRow, IdleCheckRow, IncidentCursorRow, IncidentRow, LeaseRow, OutboxRow,
                                 RepairOrderRow, SilenceRow, TicketRow, WarmStateRow)

__all__ = [
    "DEFAULT_URL", "STORE_TROUBLE", "ActionRow", "AlertGroupRow", "AlertRow", "CollectorStateRow", "EntityRow",
    "FindingRow", "HealthRow", "IdleCheckRow", "IncidentCursorRow", "IncidentRow", "LeaseRow", "OutboxRow",
    "RepairOrderRow", "SilenceRow", "Store", "StoreError", "TicketRow", "WarmStateRow", "alembic_config", "dumps",
    "make_engine", "store_cause", "store_error",
]
