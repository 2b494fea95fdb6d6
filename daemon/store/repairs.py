"""Repair orders and the active checks of idle nodes: :class:`RepairRecords`, what the repair book, the validator
and the reliability report call. Opening an incident's orders and moving one order are a transaction each
(:meth:`RepairRecords.transaction`), so two shards opening orders for one part cannot both open one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sqlalchemy import bindparam
from sqlmodel import Session, func, select

from daemon.store.tables import EntityRow, IdleCheckRow, IncidentRow, RepairOrderRow

# built once: the validator and the closed loop's technician read the queue every pass (daemon/store/incidents.py
# says why)
_ORDERS = select(RepairOrderRow)
_ORDERS_IN = _ORDERS.where(RepairOrderRow.state.in_(bindparam("states", expanding=True)))


class RepairTransaction:
    """One transaction over the repair orders and what they are opened from, committed when it ends; the orders
    saved in it are read back (their ids) after the commit."""

    def __init__(self, session: Session):
        self._s = session
        self.saved: list[RepairOrderRow] = []

    def incident(self, incident_id: str) -> IncidentRow | None:
        return self._s.get(IncidentRow, incident_id)

    def open_incidents_under(self, node: str) -> list[IncidentRow]:
        """The open incidents of the node's parts (entities ``node/...``)."""
        return list(self._s.exec(select(IncidentRow).where(IncidentRow.entity.startswith(f"{node}/"),
                                                           IncidentRow.status == "open")).all())

    def incidents_of_part(self, part: str, since: float, but: str) -> list[IncidentRow]:
        """The part's incidents opened at or after ``since``, other than ``but``."""
        return list(self._s.exec(select(IncidentRow).where(IncidentRow.entity == part, IncidentRow.id != but,
                                                           IncidentRow.opened_at >= since)).all())

    def installed_at(self, part: str) -> float:
        """When the part now in the slot was first seen (its entity's last replacement), or -inf."""
        row = self._s.get(EntityRow, part)
        replaced = (row.attrs or {}).get("replaced") if row is not None else None
        return float(replaced[-1]["until"]) if replaced else float("-inf")

    def order_of(self, incident_id: str, part: str) -> RepairOrderRow | None:
        """The order opened for ``part`` by incident (or check) ``incident_id``."""
        return self._s.exec(select(RepairOrderRow).where(RepairOrderRow.incident_id == incident_id,
                                                         RepairOrderRow.part == part)).first()

    def order_in(self, part: str, states: Iterable[str]) -> RepairOrderRow | None:
        """An order of ``part`` in one of ``states`` (one under way)."""
        return self._s.exec(select(RepairOrderRow).where(RepairOrderRow.part == part,
                                                         RepairOrderRow.state.in_(list(states)))).first()

    def orders_of_part(self, part: str, since: float) -> list[RepairOrderRow]:
        """The part's orders opened at or after ``since``."""
        return list(self._s.exec(select(RepairOrderRow).where(RepairOrderRow.part == part,
                                                              RepairOrderRow.opened_at >= since)).all())

    def order_to_change(self, order_id: int) -> RepairOrderRow | None:
        """Order ``order_id``, locked until the transaction ends (PostgreSQL: FOR UPDATE)."""
        return self._s.get(RepairOrderRow, order_id, with_for_update=True)

    def save(self, row: RepairOrderRow) -> None:
        self._s.add(row)
        self.saved.append(row)


class RepairRecords:
    """The repair order and idle check tables of a store."""

    def __init__(self, store):
        self.store = store

    @contextmanager
    def transaction(self) -> Iterator[RepairTransaction]:
        """One transaction, committed when the block ends without an exception (rolled back otherwise)."""
        with self.store.session() as s:
            tx = RepairTransaction(s)
            yield tx
            s.commit()
            for row in tx.saved:
                s.refresh(row)

    # -- orders ----------------------------------------------------------------------------------------------
    def orders(self, states: Iterable[str] | None = None) -> list[RepairOrderRow]:
        """The orders in ``states`` (every order with None), unsorted."""
        with self.store.session() as s:
            rows = s.exec(_ORDERS) if states is None else s.exec(_ORDERS_IN, params={"states": list(states)})
            return list(rows.all())

    def orders_opened(self, since: float, until: float) -> list[RepairOrderRow]:
        """The orders opened in ``[since, until]``."""
        with self.store.session() as s:
            return list(s.exec(select(RepairOrderRow).where(RepairOrderRow.opened_at >= since,
                                                            RepairOrderRow.opened_at <= until)).all())

    def any_on(self, node: str, states: Iterable[str]) -> bool:
        """Whether the node has an order in one of ``states``."""
        with self.store.session() as s:
            return s.exec(select(RepairOrderRow.id).where(RepairOrderRow.node == node,
                                                          RepairOrderRow.state.in_(list(states)))).first() is not None

    def counts(self) -> dict[str, int]:
        """How many orders are in each state that has any."""
        with self.store.session() as s:
            return {state: int(n) for state, n in s.exec(select(RepairOrderRow.state, func.count())
                                                          .group_by(RepairOrderRow.state)).all()}

    def order(self, order_id: int) -> RepairOrderRow | None:
        with self.store.session() as s:
            return s.get(RepairOrderRow, order_id)

    # -- idle checks -----------------------------------------------------------------------------------------
    def idle_checks(self, status: str | None = None) -> list[IdleCheckRow]:
        """Every node's idle check (of one ``status`` only, e.g. ``running``, when given)."""
        with self.store.session() as s:
            q = select(IdleCheckRow)
            if status is not None:
                q = q.where(IdleCheckRow.status == status)
            return list(s.exec(q).all())

    def save_idle_check(self, node: str, **changes) -> None:
        """Change a node's idle check (made when it has none)."""
        with self.store.session() as s:
            current = s.get(IdleCheckRow, node) or IdleCheckRow(node=node)
            for k, v in changes.items():
                setattr(current, k, v)
            s.add(current)
            s.commit()
