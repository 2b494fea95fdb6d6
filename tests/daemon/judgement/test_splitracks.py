"""A rack split between two shards (by node lists): each shard's book leaves it alone, the cluster's judge opens one
rack incident from both shards' node incidents in the store, and both books point their members to it."""

from __future__ import annotations

from daemon.judgement.incidents import IncidentBook, RackRule
from daemon.shards import Ownership, ShardSpec, plan_warnings, split_racks
from daemon.judgement.splitracks import SplitRacks, parents
from daemon.store import Store
from daemon.topology import Topology
from detectors.schema import State

TOPO = Topology.from_dict({"racks": [
    {"name": "r01", "nodes": ["n1", "n2", "n3", "n4", "n5"]},
    {"name": "r02", "nodes": ["n6", "n7", "n8"]}]})
SHARDS = {"a": ShardSpec("a", nodes=frozenset({"n1", "n2"})),
          "b": ShardSpec("b", nodes=frozenset({"n3", "n4", "n5", "n6", "n7", "n8"}))}


def shard(name: str) -> tuple[Ownership, IncidentBook]:
    own = Ownership.of(SHARDS[name], TOPO)
    sizes = {rack: list(TOPO.node_rack.values()).count(rack) for rack in set(TOPO.node_rack.values())}
    return own, IncidentBook(TOPO.rack_of, rack_size=lambda rack: sizes.get(rack, 0),
                             groups_rack=lambda rack: rack not in own.split_racks)


def test_who_holds_a_split_rack():
    a, b = Ownership.of(SHARDS["a"], TOPO), Ownership.of(SHARDS["b"], TOPO)
    assert (a.racks, a.split_racks) == (frozenset(), frozenset({"r01"}))
    assert (b.racks, b.split_racks) == (frozenset({"r02"}), frozenset({"r01"}))
    assert not a.owns_entity("r01") and not b.owns_entity("r01")  # the cluster's, not a shard's
    assert b.owns_entity("r02") and a.owns_entity("n1/gpu0") and not a.owns_entity("n3")
    assert split_racks(SHARDS, TOPO) == {"r01": ["a", "b"]}
    assert plan_warnings(SHARDS, TOPO) == []  # no longer a plan to warn of


def test_a_rack_failing_across_two_shards_is_one_incident(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'cluster.db'}")
    (own_a, book_a), (own_b, book_b) = shard("a"), shard("b")
    judge = SplitRacks(split_racks(SHARDS, TOPO), TOPO)

    def tick(ts: float) -> None:
        for own, book in ((own_a, book_a), (own_b, book_b)):
            book.outside_parents = parents(store, own.split_racks)
            book.escalate(ts)
            store.record_tick([], book.take_changed(), now=ts)

    # two nodes in shard a and one in shard b overheat: neither shard alone has three nodes of the rack
    for ts, book, node in ((100.0, book_a, "n1"), (160.0, book_a, "n2"), (220.0, book_b, "n3")):
        book.raise_(ts, f"{node}/gpu0", "gpu_thermal", State.SUBHEALTHY, [f"{node} hot"])
    tick(230.0)
    assert not [i for b in (book_a, book_b) for i in b.open.values() if i.kind == "rack"]  # no book groups it
    opened = judge.step(store, 240.0)
    assert [(i.entity, i.kind, i.category, i.severity) for i in opened] == \
        [("r01", "rack", "gpu_thermal", State.SUBHEALTHY)]
    assert "3 nodes of r01 with gpu_thermal incidents: n1, n2, n3" in opened[0].evidence[0]
    assert judge.step(store, 250.0) == []  # nothing new: the same incident, not a second one
    tick(260.0)  # each shard's members point to it
    rack_id = opened[0].id
    assert {i.entity: i.parent for b in (book_a, book_b) for i in b.open.values()} == \
        {"n1/gpu0": rack_id, "n2/gpu0": rack_id, "n3/gpu0": rack_id}
    stored = {r.entity: r.parent for r in store.incidents("open") if r.kind != "rack"}
    assert stored == {"n1/gpu0": rack_id, "n2/gpu0": rack_id, "n3/gpu0": rack_id}
    # two more nodes of shard b, one failed: updated, still one, though shard b alone now has three of the rack
    book_b.raise_(300.0, "n4/gpu0", "gpu_thermal", State.FAILED, ["n4 hot"])
    book_b.raise_(305.0, "n5/gpu0", "gpu_thermal", State.SUBHEALTHY, ["n5 hot"])
    tick(310.0)
    updated = judge.step(store, 320.0)
    assert [(i.id, i.severity) for i in updated] == [(rack_id, State.FAILED)]
    assert [r.entity for r in store.incidents("open") if r.kind == "rack"] == ["r01"]
    assert not [i for i in book_b.open.values() if i.kind == "rack"]
    # an incident opened in the rack long before the rack's trouble is not the rack's: it keeps its own way
    old = book_a.raise_(-7200.0, "n1/nic0", "gpu_thermal", State.SUBHEALTHY, ["an older, unrelated fault"])
    tick(330.0)
    assert old.parent is None and book_a.open["n1/gpu0|gpu_thermal"].parent == rack_id
    book_a.resolve(331.0, "n1/nic0", "recovered")
    # shard b's three recover: two nodes left, the rack incident closes and the members let go of it
    for node in ("n3", "n4", "n5"):
        book_b.resolve(400.0, f"{node}/gpu0", "recovered")
    tick(410.0)
    closed = judge.step(store, 420.0)
    assert [(i.id, i.close_reason) for i in closed] == [(rack_id, "fewer nodes affected")]
    tick(430.0)
    assert {i.entity: i.parent for i in book_a.open.values()} == {"n1/gpu0": None, "n2/gpu0": None}


def test_a_rack_a_shard_holds_whole_is_its_own(tmp_path):
    """Shard b's whole rack r02: its book groups it as before, and the cluster's judge does not look at it."""
    store = Store(f"sqlite:///{tmp_path / 'cluster.db'}")
    _, book_b = shard("b")
    for ts, node in ((100.0, "n6"), (110.0, "n7"), (120.0, "n8")):
        book_b.raise_(ts, node, "fabric_link", State.SUBHEALTHY, ["down"])
    book_b.escalate(130.0)
    store.record_tick([], book_b.take_changed(), now=130.0)
    assert [i.entity for i in book_b.open.values() if i.kind == "rack"] == ["r02"]
    assert SplitRacks(split_racks(SHARDS, TOPO), TOPO).step(store, 140.0) == []


def test_a_split_rack_incident_each_shard_opened_before_becomes_one(tmp_path):
    """Before racks split between shards were judged for the cluster, each shard could have opened its own incident
    on the rack: the judge keeps one (the first) and closes the other."""
    store = Store(f"sqlite:///{tmp_path / 'cluster.db'}")
    (_, book_a), (_, book_b) = shard("a"), shard("b")
    for book, nodes in ((book_a, ("n1", "n2")), (book_b, ("n3", "n4", "n5"))):
        for node in nodes:
            book.raise_(100.0, node, "fabric_link", State.SUBHEALTHY, ["down"])
        book.groups_rack = lambda rack: True  # as the books grouped before
        book.rack_rule = RackRule(nodes=2)
        book.escalate(110.0 if book is book_a else 120.0)
        store.record_tick([], book.take_changed(), now=130.0)
    assert len([r for r in store.incidents("open") if r.kind == "rack"]) == 2
    changed = SplitRacks(split_racks(SHARDS, TOPO), TOPO).step(store, 140.0)
    assert [(i.closed_at is None, i.close_reason) for i in changed] == \
        [(True, ""), (False, "the rack's incident is judged for the cluster, once")]
    assert len([r for r in store.incidents("open") if r.kind == "rack"]) == 1
