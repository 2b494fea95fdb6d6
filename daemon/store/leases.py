"""One active daemon per shard: a lease in the store that the holder renews and a standby takes over
when it expires (the holder died or lost the database).

Acquiring is one conditional UPDATE (``holder = me OR expires_at < now``), atomic in SQLite and in
PostgreSQL alike, so two management nodes can never both hold a shard. A holder that cannot renew
before ``ttl_s`` passes must stop acting: :meth:`Lease.held` says whether it still may.
"""

from __future__ import annotations

import os
import secrets
import socket
import time

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from daemon.store.tables import LeaseRow


def shard_lease(shard: str) -> str:
    """The lease name of a shard: the daemon (``raswarden run``) and ``raswarden playbook run`` share it, so
    only one of them acts for a shard at a time."""
    return f"shard:{shard}"


def claim_lease(shard: str) -> str:
    """The lease by which an instance configured for ``shard`` (not a pool member) asks for it back: a pool member
    serving the shard hands it over at its next cycle (daemon/service/service.py), so the spare is free again once the
    shard's own management node has come back."""
    return f"claim:{shard}"


class Lease:
    """The lease ``name`` (e.g. ``playbooks:default``) for this process."""

    def __init__(self, store, name: str, ttl_s: float = 30.0, holder: str | None = None,
                 clock=time.time):
        self.store = store
        self.name = name
        self.ttl_s = ttl_s
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.clock = clock
        self._until = 0.0

    def acquire(self) -> bool:
        """Take or renew the lease; False while another live holder has it."""
        now = self.clock()
        with self.store.session() as s:
            if s.get(LeaseRow, self.name) is None:
                try:
                    s.add(LeaseRow(name=self.name, holder=self.holder, acquired_at=now, expires_at=now + self.ttl_s))
                    s.commit()
                    self._until = now + self.ttl_s
                    return True
                except IntegrityError:
                    s.rollback()  # someone else created it first: fall through to the conditional update
            stmt = (update(LeaseRow).where(LeaseRow.name == self.name)
                    .where((LeaseRow.holder == self.holder) | (LeaseRow.expires_at < now))
                    .values(holder=self.holder, expires_at=now + self.ttl_s))
            got = s.exec(stmt).rowcount == 1
            s.commit()
        self._until = now + self.ttl_s if got else 0.0
        return got

    def held(self) -> bool:
        """Whether this process may still act (its last renewal has not run out)."""
        return self.clock() < self._until

    def release(self) -> None:
        with self.store.session() as s:
            s.exec(update(LeaseRow).where(LeaseRow.name == self.name, LeaseRow.holder == self.holder)
                   .values(expires_at=0.0))
            s.commit()
        self._until = 0.0

    def held_by_another(self) -> bool:
        """Whether another holder has this lease and has not let it run out (read only)."""
        row = self.current()
        return row is not None and row.holder != self.holder and row.expires_at > self.clock()

    def current(self) -> LeaseRow | None:
        with self.store.session() as s:
            return s.get(LeaseRow, self.name)


def leases_named(store, names: list[str]) -> dict[str, LeaseRow]:
    """The leases of these names that exist, by name (read only)."""
    with store.session() as s:
        return {r.name: r for r in s.exec(select(LeaseRow).where(LeaseRow.name.in_(names))).all()}
