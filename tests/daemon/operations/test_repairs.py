"""Repair orders: opened when a node is drained for hardware, one per part, moved through their states by
technicians (the CLI), never twice for one incident and part, a restart included."""

from __future__ import annotations

import pytest

from daemon.cli import main
from daemon.config import Config
from daemon.judgement.incidents import Incident
from daemon.operations.remediation import Remediation
from daemon.operations.repairs import RepairBook, RepairError
from daemon.store import Store
from daemon.topology import Topology
from detectors.schema import State
from lab.sim.cluster import SimScheduler

TOPOLOGY = Topology.from_dict({"racks": [{"name": "r01", "nodes": [
    {"name": "n1", "accelerators": [{"index": 0, "uuid": "GPU-0a", "serial": "1652", "pci_bus_id": "00000000:3B:00.0",
                                     "model": "NVIDIA H100 80GB HBM3"}]},
    {"name": "n2"}, {"name": "n3"}]}]})


def incident(iid: str, entity: str, category: str, severity: State = State.FAILED, at: float = 100.0,
             kind: str = "accelerator") -> Incident:
    return Incident(iid, f"fp-{iid}", entity, kind, category, severity, at, at, rack="r01",
                    evidence=[f"{category} evidence of {entity}"])


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    yield s
    s.close()


def drained(store: Store, *incidents: Incident, clock: float = 100.0) -> Remediation:
    """Record the incidents and let remediation plan and run their actions (act mode: the node is drained)."""
    rem = Remediation.from_config(Config(), store, SimScheduler(["n1", "n2", "n3"]), clock=lambda: clock,
                                  topology=TOPOLOGY)
    store.record_tick([], list(incidents), now=clock)
    rem.step()
    rem.step()
    return rem


def test_a_node_drained_for_hardware_gets_one_order_per_part_and_telemetry_loss_none(store):
    rem = drained(store, incident("inc-1", "n1/gpu0", "gpu_memory"),
                  incident("inc-2", "n2", "telemetry", State.UNKNOWN, kind="node"))
    orders = rem.repairs.orders()
    assert [(o.part, o.expected, o.state, o.severity) for o in orders] == [("n1/gpu0", "rma", "open", "failed")]
    o = orders[0]
    assert ["serial", "1652"] in o.where and ["UUID", "GPU-0a"] in o.where and ["rack", "r01"] in o.where
    assert o.evidence == ["gpu_memory evidence of n1/gpu0"] and o.history[0]["to"] == "open"
    # a node drained for telemetry loss or for its cooling loop's trouble: nothing for a technician
    import dataclasses

    (done,) = [a for a in rem.journal.actions() if a.incident.id == "inc-1"]
    for category, kind in (("telemetry", "node"), ("cooling", "cooling")):
        other = dataclasses.replace(done, incident=dataclasses.replace(done.incident, id="inc-2", category=category,
                                                                       kind=kind))
        assert rem.repairs.open_for_actions([other]) == []
    # again, and after a restart (the drain was done before it): nothing opened twice
    rem.step()
    again = Remediation.from_config(Config(), store, SimScheduler(["n1", "n2", "n3"]), clock=lambda: 200.0,
                                    topology=TOPOLOGY)
    assert again.step()["repair_orders"] == 0 and len(again.repairs.orders(None)) == 1


def test_the_vendors_repair_is_the_orders_first_action(store):
    """An Xid whose catalog bucket names the repair (RESET_GPU: reset; CHECK_MECHANICALS: reseat) asks for it."""
    inc = incident("inc-x", "n1/gpu0", "gpu_compute")
    inc.evidence = ["Xid 46 ROBUST_CHANNEL_GPU_TIMEOUT_ERROR: pid=7, ... (NVIDIA: RESET_GPU; repair: reset)"]
    rem = drained(store, inc)
    (order,) = rem.repairs.orders()
    assert order.expected == "reset" and "the vendor's catalog asks for a reset" in order.expected_why


def test_a_nodes_incident_orders_each_of_its_failing_parts(store):
    """A node's incident (its rollup) asks for its parts with open hardware incidents, not for the blade."""
    rem = drained(store, incident("inc-n", "n3", "fabric_link", kind="node"),
                  incident("inc-p", "n3/mlx5_0:1", "fabric_link", State.SUBHEALTHY, kind="port"))
    parts = sorted((o.part, o.kind, o.expected) for o in rem.repairs.orders())
    assert ("n3/mlx5_0:1", "port", "reseat") in parts and all(p[0] != "n3" for p in parts)


def test_the_states_of_an_order_and_a_repeat_offender(store):
    rem = drained(store, incident("inc-1", "n1/gpu0", "gpu_bus"))
    book: RepairBook = rem.repairs
    (o,) = book.orders()
    assert o.expected == "reseat"
    with pytest.raises(RepairError, match="it can go to in_progress, not repaired"):
        book.move(o.id, "repaired", "tech")
    book.start(o.id, "alice")
    with pytest.raises(RepairError, match="is in_progress"):
        book.start(o.id, "bob")  # taken already
    book.give_back(o.id, "alice", "no spare riser")
    done = book.done(o.id, "bob", new_serial="1700", note="reseated, riser replaced")
    assert done.state == "repaired" and done.new_serial == "1700"
    assert [(h["from"], h["to"], h["by"]) for h in done.history] == [
        (None, "open", "raswarden"), ("open", "in_progress", "alice"), ("in_progress", "open", "alice"),
        ("open", "in_progress", "bob"), ("in_progress", "repaired", "bob")]
    book.move(o.id, "validating", "raswarden")
    closed = book.move(o.id, "closed", "raswarden", "validation passed")
    assert closed.closed_at is not None and book.orders() == []
    with pytest.raises(RepairError, match="closed"):
        book.move(o.id, "open", "tech")
    # the same GPU off the bus again, later: a repeat offender, replaced this time
    drained(store, incident("inc-2", "n1/gpu0", "gpu_bus", at=500.0), clock=500.0)
    (second,) = book.orders()
    assert second.expected == "replace" and "repeat offender" in second.expected_why
    assert any("earlier:" in e and f"repair order {o.id}" in e for e in second.evidence)


def test_the_repairs_command(store, tmp_path, capsys):
    drained(store, incident("inc-1", "n1/gpu0", "gpu_memory"))
    db = ["--db", f"sqlite:///{tmp_path / 'rw.db'}"]
    assert main(["repairs", "list", *db]) == 0
    listed = capsys.readouterr().out
    assert "n1/gpu0" in listed and "rma" in listed and "inc-1" in listed
    order = RepairBook(store).orders()[0].id
    assert main(["repairs", "show", str(order), *db]) == 0
    shown = capsys.readouterr().out
    assert "serial 1652" in shown and "HBM errors do not heal" in shown and "-> open by raswarden" in shown
    assert main(["repairs", "done", str(order), "--part-serial", "1799", "--by", "carol", *db]) == 0
    assert "repaired" in capsys.readouterr().out
    assert main(["repairs", "start", str(order), *db]) == 2
    assert "is repaired: it can go to validating" in capsys.readouterr().err
    assert main(["repairs", "list", *db]) == 0 and "repaired" in capsys.readouterr().out


def test_a_replaced_part_starts_afresh(store):
    """The GPU in the slot was replaced (a new UUID): the old part's orders and incidents stay its own history, and
    the new part's first trouble is not a repeat offender's."""
    rem = drained(store, incident("inc-1", "n1/gpu0", "gpu_bus"))
    (o,) = rem.repairs.orders()
    rem.repairs.done(o.id, "tech", new_serial="1799")
    rem.repairs.move(o.id, "validating", "raswarden")
    rem.repairs.move(o.id, "closed", "raswarden")
    store.upsert_entities([{"id": "n1/gpu0", "kind": "accelerator", "node": "n1", "rack": "r01", "first_seen": 0.0,
                            "attrs": {}}])
    assert store.note_identities([("n1/gpu0", "GPU-0a", 150.0)]) == []  # first identity known: no change
    assert store.note_identities([("n1/gpu0", "GPU-0b", 300.0)]) == [("n1/gpu0", "GPU-0a", "GPU-0b")]
    drained(store, incident("inc-2", "n1/gpu0", "gpu_bus", at=500.0), clock=500.0)
    (new,) = rem.repairs.orders()
    assert new.expected == "reseat" and "repeat offender" not in new.expected_why
    assert not any(e.startswith("earlier:") for e in new.evidence)
    assert rem.repairs.order(o.id).state == "closed"  # the old part's order keeps its history (for the RMA)
