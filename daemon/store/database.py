"""The state database: :class:`Store` opens (and migrates) it, hands out sessions, holds the cluster-wide locks,
and carries the incident and progress records (daemon/store/incidents.py, progress.py) as its methods.

SQLite in WAL mode under /var/lib/raswarden by default; PostgreSQL by URL (``postgresql+psycopg://...``) for several
management nodes. The schema is created and upgraded by alembic migrations (``daemon/store/migrations``), never by
``create_all``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, delete

from daemon.store.engine import DEFAULT_URL, alembic_config, make_engine, store_error
from daemon.store.incidents import IncidentRecords
from daemon.store.progress import ProgressRecords
from daemon.store.tables import AlertRow, FindingRow, OutboxRow
from playbooks import stopping


class Store(IncidentRecords, ProgressRecords):
    """Typed access to the state database."""

    def __init__(self, url: str = DEFAULT_URL, migrate: bool = True, read_only: bool = False):
        """Open (and migrate) the store; a store that cannot be is a :class:`StoreError`, one line. ``read_only``:
        for commands that only read: nothing is written (no migration, no lock file), and the store must already be
        at this raswarden's schema."""
        from alembic.util import CommandError  # (alembic here, not at import: 0.3 s off every process's start)

        self.url = url
        try:
            self.engine = make_engine(url, read_only)
            if read_only:
                self._check_schema()
            elif migrate:
                self.migrate()
            else:
                with self.engine.connect() as conn:  # what a migration would have found out
                    conn.execute(text("SELECT 1"))
        except (SQLAlchemyError, OSError, CommandError, TimeoutError, ValueError) as exc:
            engine = getattr(self, "engine", None)
            if engine is not None:
                engine.dispose()
            raise store_error(url, exc) from exc

    def migrate(self) -> None:
        """Bring the schema to the newest migration, one raswarden at a time: the shards of a cluster started together
        on a new database would otherwise all create its tables (PostgreSQL refuses the second alembic_version,
        SQLite says the database is locked); the later ones find it done."""
        from alembic import command

        with self.cluster_lock("migrations", timeout_s=600.0), self.engine.begin() as conn:
            cfg = alembic_config(self.engine)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def _check_schema(self) -> None:
        """Raise ValueError (said as one line by the caller) unless the store is at this raswarden's schema."""
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(alembic_config(self.engine))
        with self.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
        head = script.get_current_head()
        if current == head:
            return
        if current is None:
            raise ValueError("no raswarden schema in it: has the daemon (or raswarden init) run with this store?")
        try:
            script.get_revision(current)
        except Exception:  # noqa: BLE001 - alembic's error for a revision it does not know
            raise ValueError(f"can't locate revision {current}") from None
        raise ValueError(f"its schema is at revision {current}, this raswarden's at {head}: a command that writes "
                         "(or the daemon) brings it up to date; one that only reads does not")

    def session(self) -> Session:
        return Session(self.engine)

    @contextmanager
    def cluster_lock(self, name: str, timeout_s: float = 30.0) -> Iterator[None]:
        """Held by one raswarden at a time among all that share this store (the shards of a cluster on one
        PostgreSQL; the service and a ``raswarden playbook run`` on one SQLite file), for a check-then-act that must
        not interleave: the blast-radius budget. PostgreSQL: a session advisory lock (a holder that dies loses it
        with its connection); SQLite: an flock on a file beside the database; in memory: a lock of this process.
        Raises TimeoutError when it is not got within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        if self.engine.dialect.name == "postgresql":
            key = int.from_bytes(hashlib.sha256(f"raswarden:{name}".encode()).digest()[:8], "big", signed=True)
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                while not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
                    _wait(deadline, name)
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            return
        path = self.engine.url.database
        if not path or path == ":memory:":
            lock = _PROCESS_LOCKS.setdefault((id(self.engine), name), threading.Lock())
            while not lock.acquire(timeout=0.05):
                _wait(deadline, name)
            try:
                yield
            finally:
                lock.release()
            return
        fd = os.open(f"{path}.{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    _wait(deadline, name)
            yield
        finally:
            os.close(fd)  # releases the flock

    def trim(self, cutoff: float) -> dict[str, int]:
        """Remove what is older than ``cutoff``: findings, delivered or failed notifications, alerts told and done;
        how many rows of each."""
        with self.session() as s:
            out = {
                "findings": s.exec(delete(FindingRow).where(FindingRow.ts < cutoff)).rowcount,
                "outbox": s.exec(delete(OutboxRow).where(OutboxRow.status != "pending",
                                                         OutboxRow.created_at < cutoff)).rowcount,
                "alerts": s.exec(delete(AlertRow).where(AlertRow.status == "done",
                                                        AlertRow.updated_at < cutoff)).rowcount,
            }
            s.commit()
        return out

    def close(self) -> None:
        self.engine.dispose()


_PROCESS_LOCKS: dict[tuple[int, str], threading.Lock] = {}


def _wait(deadline: float, name: str) -> None:
    if stopping.requested():  # a stop does not wait out another raswarden's lock: the caller tries next start
        raise stopping.Stopped(f"raswarden is stopping: gave up waiting for the {name} lock")
    if time.monotonic() > deadline:
        raise TimeoutError(f"another raswarden holds the {name} lock")
    stopping.pause(0.05)
