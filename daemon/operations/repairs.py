"""Repair orders: what to replace or inspect on a node raswarden drained for hardware, and where the repair stands.

When a playbook's drain step has taken a node out of service for a hardware incident (not for telemetry loss,
not for a rack's or cooling loop's trouble), raswarden opens one order per part: the incident's part, or for a
node's incident each part of it with an open hardware incident (the blade itself when none). An order carries
where the part is (rack, node, slot, serial, UUID, PCI bus id, the far end of a link: ``Topology.place``), the
evidence (the incident's findings, the part's earlier incidents and repair orders: a repeat offender says so), a
priority (a failed part before a sub-healthy one) and what is expected of the technician (:data:`EXPECTED`).

States: ``open`` → ``in_progress`` (a technician took it) → ``repaired`` (the part was reseated or replaced; a
new serial is recorded) → ``validating`` → ``closed`` (back in service), or back to ``open`` (given back, or the
validation failed). Every change is one transaction that checks the state it leaves (two technicians cannot both
take an order) and appends who, when and why to the order's ``history``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from daemon.judgement.incidents import NOT_A_NODE
from daemon.store import IncidentRow, RepairOrderRow, Store
from daemon.store.repairs import RepairRecords, RepairTransaction
from daemon.topology import Topology
from detectors.xid_catalog import vendor_repair
from playbooks.engine import Action
from playbooks.guards import Guards

STATES = ("open", "in_progress", "repaired", "validating", "closed")
ACTIVE = ("open", "in_progress", "repaired", "validating")
TRANSITIONS = {
    "open": ("in_progress",),
    "in_progress": ("repaired", "open"),
    "repaired": ("validating",),
    "validating": ("closed", "open"),
}
# Categories a technician can repair; a node drained for telemetry loss or a cooling loop's trouble gets no order.
# category -> (what is expected first, what when the part is a repeat offender, why)
EXPECTED = {
    "gpu_memory": ("rma", "rma", "HBM errors do not heal: replace the GPU and return it to the vendor"),
    "gpu_bus": ("reseat", "replace", "a GPU off the bus or with PCIe errors: reseat it and its riser first"),
    "gpu_thermal": ("inspect", "replace", "a GPU hotter than its peers at equal power: check its cold plate "
                    "and thermal interface"),
    "gpu_compute": ("inspect", "rma", "a GPU slower than its peers: check its clocks and power, then replace"),
    "scaleup_link": ("inspect", "replace", "NVLink errors: inspect the baseboard and its NVSwitch links"),
    "fabric_link": ("reseat", "replace", "a degrading fabric link: reseat the cable and transceiver at both ends, "
                    "replace them if it comes back"),
    "host": ("inspect", "inspect", "host hardware errors (memory, CPU): inspect the blade"),
}
SEVERITY_PRIORITY = {"failed": 0, "unknown": 1, "subhealthy": 2}
ALL_CATEGORIES = tuple(EXPECTED)


class RepairError(ValueError):
    """A change an order cannot make (unknown order, a state it cannot go to from where it is)."""


def is_hardware(category: str, kind: str) -> bool:
    """Whether a drained node's incident is something a technician repairs."""
    return category in EXPECTED and kind not in NOT_A_NODE


class RepairBook:
    """Opens repair orders for nodes drained for hardware and moves them through their states."""

    def __init__(self, store: Store, topology: Topology | None = None, clock=time.time):
        self.store = store
        self.records = RepairRecords(store)
        self.topology = topology or Topology()
        self.clock = clock
        self._handled: set[str] = set()  # incidents whose orders exist (a cache: the table's unique key decides)

    # -- opening -------------------------------------------------------------------------------------------
    def open_for_actions(self, actions: Iterable[Action]) -> list[RepairOrderRow]:
        """Orders for every action whose drain step is done on a hardware incident (idempotent: an incident's
        orders are opened once, whatever calls it again, a restart included)."""
        out: list[RepairOrderRow] = []
        for action in actions:
            inc = action.incident
            if inc.id in self._handled or not is_hardware(inc.category, inc.kind):
                continue
            if any(st.type == "drain" and st.status == "done" for st in action.steps):
                out += self.open_for(inc.id)
                self._handled.add(inc.id)
        return out

    def open_for(self, incident_id: str) -> list[RepairOrderRow]:
        """Open the orders of one incident whose node was drained; returns those opened now."""
        now = self.clock()
        opened = []
        with self.records.transaction() as tx:
            inc = tx.incident(incident_id)
            if inc is None:
                raise RepairError(f"no incident {incident_id}")
            node = inc.entity.split("/", 1)[0]
            parts = self._parts(tx, inc, node)
            for part, category, severity, evidence in parts:
                if tx.order_of(inc.id, part) is not None:
                    continue
                active = tx.order_in(part, ACTIVE)
                if active is not None:  # the part already has an order under way: the incident joins it
                    active.evidence = [*active.evidence, f"also incident {inc.id}: {'; '.join(evidence[:2])}"]
                    active.updated_at = now
                    tx.save(active)
                    continue
                # a part replaced in its slot starts afresh: the old part's orders and incidents are its own
                # history (kept for the RMA), not the new part's
                since = tx.installed_at(part)
                earlier_orders = tx.orders_of_part(part, since)
                earlier_incidents = tx.incidents_of_part(part, since, but=inc.id)
                repeat = [f"repair order {o.id} ({o.expected}, {o.state})" for o in earlier_orders] + \
                    [f"incident {i.id} ({i.category}, {i.severity})" for i in earlier_incidents
                     if i.opened_at < inc.opened_at]
                first, again, why = EXPECTED.get(category, EXPECTED["host"])
                vendor = vendor_repair(evidence)
                if vendor is not None:  # the vendor's catalog names the repair (an Xid's or SXid's bucket)
                    first, why = vendor, f"the vendor's catalog asks for a {vendor} ({why})"
                expected = again if earlier_orders else first
                if earlier_orders:
                    why += f"; a repeat offender: {len(earlier_orders)} earlier repair order(s), so {again}"
                order = RepairOrderRow(
                    incident_id=inc.id, part=part, node=node, rack=inc.rack,
                    kind="node" if "/" not in part else ("port" if ":" in part.split("/", 1)[1] else "accelerator"),
                    category=category, severity=severity, expected=expected, expected_why=why, state="open",
                    priority=SEVERITY_PRIORITY.get(severity, 3), opened_at=now, updated_at=now,
                    where=[list(p) for p in self.topology.place(part)],
                    evidence=list(evidence) + ([f"earlier: {', '.join(repeat)}"] if repeat else []),
                    history=[{"ts": now, "from": None, "to": "open", "by": "raswarden",
                              "note": f"node {node} drained for incident {inc.id}"}])
                tx.save(order)
                opened.append(order)
        return opened

    def open_for_check(self, node: str, rack: str | None, check: str, why: str) -> RepairOrderRow:
        """An order for a node whose active check failed (no incident: the telemetry saw nothing); idempotent per
        check (``check``: its job's name)."""
        now = self.clock()
        with self.records.transaction() as tx:
            known = tx.order_of(check, node)
            if known is not None:
                return known
            order = RepairOrderRow(
                incident_id=check, part=node, node=node, rack=rack, kind="node", category="host",
                severity="subhealthy", expected="inspect",
                expected_why="an active check on the idle node failed: read its output, inspect the blade",
                state="open", priority=SEVERITY_PRIORITY["subhealthy"], opened_at=now, updated_at=now,
                where=[list(p) for p in self.topology.place(node)], evidence=[why],
                history=[{"ts": now, "from": None, "to": "open", "by": "raswarden", "note": f"idle check {check}"}])
            tx.save(order)
        return order

    @staticmethod
    def _parts(tx: RepairTransaction, inc: IncidentRow, node: str) -> list[tuple[str, str, str, list[str]]]:
        """(part, category, severity, evidence) to repair for an incident: its own part, or for a node's
        incident each part of the node with an open hardware incident (the blade itself when none)."""
        if "/" in inc.entity:
            return [(inc.entity, inc.category, inc.severity, list(inc.evidence or []))]
        children = tx.open_incidents_under(node)
        parts = [(c.entity, c.category, c.severity, list(c.evidence or [])) for c in children
                 if is_hardware(c.category, c.kind)]
        return parts or [(inc.entity, inc.category, inc.severity, list(inc.evidence or []))]

    # -- reading -------------------------------------------------------------------------------------------
    def orders(self, states: Iterable[str] | None = ACTIVE) -> list[RepairOrderRow]:
        """Orders in ``states`` (all with None), the queue's order: priority, then age."""
        return sorted(self.records.orders(states), key=lambda r: (r.state == "closed", r.priority, r.opened_at, r.id))

    def by_node(self, owns: Callable[[str], bool] = lambda node: True) -> dict[str, list[RepairOrderRow]]:
        """The active orders of each node ``owns`` says is this shard's, in the queue's order."""
        out: dict[str, list[RepairOrderRow]] = {}
        for order in self.orders():
            if owns(order.node):
                out.setdefault(order.node, []).append(order)
        return out

    def active_on(self, node: str) -> bool:
        """Whether the node has repair orders under way (it returns through validation, not on a timer)."""
        return self.records.any_on(node, ACTIVE)

    def counts(self) -> dict[str, int]:
        """How many orders are in each state (every state, 0 included)."""
        return {state: 0 for state in STATES} | self.records.counts()

    def order(self, order_id: int) -> RepairOrderRow:
        row = self.records.order(order_id)
        if row is None:
            raise RepairError(f"no repair order {order_id}")
        return row

    # -- changes -------------------------------------------------------------------------------------------
    def start(self, order_id: int, by: str, note: str = "") -> RepairOrderRow:
        """A technician takes the order."""
        return self.move(order_id, "in_progress", by, note)

    def give_back(self, order_id: int, by: str, note: str = "") -> RepairOrderRow:
        """A technician gives a taken order back to the queue."""
        return self.move(order_id, "open", by, note, expect="in_progress")

    def done(self, order_id: int, by: str, new_serial: str = "", note: str = "") -> RepairOrderRow:
        """The part was reseated or replaced (``new_serial``: the replacement's); an open order is taken and
        done at once (both changes recorded)."""
        if self.order(order_id).state == "open":
            self.move(order_id, "in_progress", by, "taken and done at once")
        return self.move(order_id, "repaired", by, note, new_serial=new_serial)

    def expect(self, order_id: int, expected: str, why: str, by: str = "raswarden",
               extra: dict | None = None) -> RepairOrderRow:
        """What the order's part now needs (``expected``, e.g. a reboot after a reset that did not clear the
        fault), kept in its history; the order stays where it is."""
        now = self.clock()
        with self.records.transaction() as tx:
            row = tx.order_to_change(order_id)
            if row is None:
                raise RepairError(f"no repair order {order_id}")
            row.history = [*row.history, {"ts": now, "from": row.state, "to": row.state, "by": by,
                                          "note": f"expected {row.expected} -> {expected}: {why}", **(extra or {})}]
            row.expected, row.expected_why, row.updated_at = expected, why, now
            tx.save(row)
        return row

    def move(self, order_id: int, to: str, by: str, note: str = "", expect: str | None = None,
             new_serial: str | None = None, extra: dict | None = None, evidence: str = "") -> RepairOrderRow:
        """One change of state, checked against where the order is (``expect``: only from there); ``extra`` goes
        into the history entry (a validation's job), ``evidence`` onto the order's evidence."""
        now = self.clock()
        with self.records.transaction() as tx:
            row = tx.order_to_change(order_id)
            if row is None:
                raise RepairError(f"no repair order {order_id}")
            if to not in TRANSITIONS.get(row.state, ()) or (expect is not None and row.state != expect):
                allowed = ", ".join(TRANSITIONS.get(row.state, ())) or "nothing (it is closed)"
                raise RepairError(f"repair order {order_id} is {row.state}: it can go to {allowed}, not {to}")
            entry = {"ts": now, "from": row.state, "to": to, "by": by, "note": note, **(extra or {})}
            if evidence:
                row.evidence = [*row.evidence, evidence]
            if new_serial:
                entry["new_serial"] = new_serial
                row.new_serial = new_serial
            row.history = [*row.history, entry]
            row.state, row.updated_at = to, now
            if to == "closed":
                row.closed_at = now
            tx.save(row)
        return row


class OrderWorker:
    """What raswarden's own repair steps share (an automatic reset, an automatic reboot): the book they move orders
    in, the scheduler they act through (by its names of the nodes), the guards' mode, the circuit breaker's reason
    when tripped (no new step then) and the shard's ownership of each node."""

    def __init__(self, book: RepairBook, scheduler, cfg, scheduler_names: dict[str, str] | None = None,
                 guards: Guards | None = None, breaker=lambda: None, owns=lambda node: True):
        self.book = book
        self.scheduler = scheduler
        self.cfg = cfg
        self.scheduler_names = scheduler_names or {}
        self.guards = guards or Guards()
        self.breaker = breaker
        self.owns = owns

    def target(self, node: str) -> str:
        """The node as the scheduler knows it."""
        return self.scheduler_names.get(node, node)
