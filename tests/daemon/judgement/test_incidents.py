from daemon.judgement.incidents import IncidentBook, RackRule, incident_id
from detectors.schema import State

RACK = {f"sn01-b0{i}": "r01" for i in range(1, 10)}


def test_fingerprint_updates_instead_of_duplicating_and_recovery_closes():
    book = IncidentBook(RACK.get)
    book.on_entity(10, "sn01-b01/gpu0", State.SUBHEALTHY, "gpu_memory", ["a"])
    book.on_entity(20, "sn01-b01/gpu0", State.FAILED, "gpu_memory", ["b"])
    (inc,) = book.open.values()
    assert inc.severity == State.FAILED and inc.evidence == ["a", "b"] and inc.id == incident_id(inc.fingerprint, 10)
    book.on_entity(30, "sn01-b01/gpu0", State.HEALTHY, "", [])
    assert not book.open and book.closed[0].close_reason == "recovered"


def test_several_nodes_in_a_rack_become_one_rack_incident():
    book = IncidentBook(RACK.get, rack_rule=RackRule(nodes=3))
    for i, t in ((1, 10), (2, 20)):
        book.on_entity(t, f"sn01-b0{i}/gpu3", State.SUBHEALTHY, "gpu_thermal", ["hot"])
        book.escalate(t)
    assert all(i.kind != "rack" for i in book.open.values())
    book.on_entity(30, "sn01-b03/gpu1", State.SUBHEALTHY, "gpu_thermal", ["hot"])
    book.on_entity(30, "sn01-b04/mlx5_0:1", State.FAILED, "fabric_link", ["down"])
    book.escalate(30)
    rack = book.open["r01|gpu_thermal"]
    assert rack.kind == "rack" and "3 nodes of r01" in rack.evidence[0]
    children = [i for i in book.open.values() if i.parent == rack.id]
    assert len(children) == 3 and book.open["sn01-b04/mlx5_0:1|fabric_link"].parent is None
    book.on_entity(40, "sn01-b01/gpu3", State.HEALTHY, "", [])
    book.escalate(40)
    assert "r01|gpu_thermal" not in book.open


def test_independent_faults_on_a_big_rack_stay_node_incidents():
    big = {f"sn01-b{i:02d}": "r01" for i in range(1, 81)}
    book = IncidentBook(big.get, rack_size=lambda rack: 80)  # 80 blades: a rack problem needs 8 nodes
    for i in range(1, 6):
        book.on_entity(10 * i, f"sn01-b{i:02d}/gpu0", State.FAILED, "gpu_memory", ["DBE"])
    book.escalate(60)
    assert not any(i.kind == "rack" for i in book.open.values())
    for i in range(6, 10):
        book.on_entity(100, f"sn01-b{i:02d}/gpu1", State.SUBHEALTHY, "gpu_memory", ["ECC"])
    book.escalate(100)
    assert book.open["r01|gpu_memory"].kind == "rack"
    # Spread over more than the window, they would not have been one problem:
    book2 = IncidentBook(big.get, rack_size=lambda rack: 80, rack_rule=RackRule(window_s=3600))
    for i in range(1, 10):
        book2.on_entity(i * 7200, f"sn01-b{i:02d}/gpu0", State.FAILED, "gpu_memory", ["DBE"])
        book2.escalate(i * 7200)
    assert not any(i.kind == "rack" for i in book2.open.values())
