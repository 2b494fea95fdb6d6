"""Cooling-loop incidents (daemon/judgement/cooling.py): racks of one loop in thermal trouble, written to the store by
different
shards, make one incident on the loop, whoever judges and however often; it follows the racks and closes after them."""

from __future__ import annotations

import threading

from daemon.judgement.cooling import CoolingLoops
from daemon.judgement.incidents import Incident, incident_id
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.ingest.naming import SeriesMapper
from daemon.store import Store
from daemon.topology import Topology
from detectors.schema import State

LOOPS = {"r01": "cdu1", "r02": "cdu1", "r03": "cdu1", "r04": "cdu2", "r05": "cdu1"}


def topology() -> Topology:
    return Topology(rack_cooling=dict(LOOPS))


def rack_incident(store: Store, rack: str, at: float, category: str = "gpu_thermal",
                  state: State = State.SUBHEALTHY, closed: float | None = None) -> None:
    """What a shard's incident book writes for one of its racks."""
    fp = f"{rack}|{category}"
    inc = Incident(incident_id(fp, at), fp, rack, "rack", category, state, at, closed or at, rack,
                   [f"3 nodes of {rack} with {category} incidents"], closed, "fewer nodes affected" if closed else "")
    store.record_tick([], [inc], now=closed or at)


def loop_rows(store: Store) -> list:
    return [r for r in store.incidents() if r.kind == "cooling"]


def test_racks_of_one_loop_from_two_shards_make_one_incident(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    shard_a, shard_b, judge = Store(url), Store(url), Store(url)
    rack_incident(shard_a, "r01", 1000.0)
    assert CoolingLoops(topology()).step(judge, 1010.0) == []  # one rack is the rack's problem
    rack_incident(shard_b, "r02", 1600.0)
    opened = CoolingLoops(topology()).step(judge, 1610.0)
    assert [(i.entity, i.kind, i.category, i.severity) for i in opened] == [("cdu1", "cooling", "cooling",
                                                                             State.SUBHEALTHY)]
    assert "2 racks of cooling loop cdu1 with thermal incidents: r01, r02" in opened[0].evidence
    # judged again, by another instance after a failover: the same incident, nothing changed or doubled
    assert CoolingLoops(topology()).step(judge, 1620.0) == []
    assert [r.id for r in loop_rows(judge)] == [opened[0].id]
    # a third rack fails: the same incident, worse and with the new evidence
    rack_incident(shard_a, "r03", 1700.0, category="cooling", state=State.FAILED)
    [updated] = CoolingLoops(topology()).step(judge, 1710.0)
    assert updated.id == opened[0].id and updated.severity == State.FAILED and updated.opened_at == 1610.0
    assert "3 racks of cooling loop cdu1 with thermal incidents: r01, r02, r03" in updated.evidence
    # a fourth rack of the loop in trouble hours later joins the open incident (the window is for opening one)
    rack_incident(shard_b, "r05", 9000.0)
    [joined] = CoolingLoops(topology()).step(judge, 9010.0)
    assert joined.id == opened[0].id and joined.closed_at is None
    assert joined.evidence[-1] == "4 racks of cooling loop cdu1 with thermal incidents: r01, r02, r03, r05"
    # the racks recover one by one: the loop incident closes when one is left
    rack_incident(shard_a, "r01", 1000.0, closed=10000.0)
    rack_incident(shard_b, "r02", 1600.0, closed=10000.0)
    [still] = CoolingLoops(topology()).step(judge, 10010.0)
    assert still.id == opened[0].id and still.closed_at is None
    assert still.evidence[-1] == "2 racks of cooling loop cdu1 with thermal incidents: r03, r05"
    rack_incident(shard_b, "r05", 9000.0, closed=10100.0)
    [closed] = CoolingLoops(topology()).step(judge, 10110.0)
    assert closed.id == opened[0].id and closed.closed_at == 10110.0 and closed.close_reason == "fewer racks affected"
    assert [r.status for r in loop_rows(judge)] == ["closed"]
    for s in (shard_a, shard_b, judge):
        s.close()


def test_what_is_not_a_loop_problem_opens_none(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    rack_incident(store, "r01", 1000.0, category="gpu_memory")  # not thermal
    rack_incident(store, "r02", 1000.0, category="fabric_link")
    rack_incident(store, "r03", 1000.0)
    rack_incident(store, "r04", 1000.0)  # thermal, but on another loop than r03
    rack_incident(store, "r09", 1000.0)  # a rack the topology puts on no loop
    assert CoolingLoops(topology()).step(store, 1010.0) == []
    rack_incident(store, "r01", 9000.0)  # r03's incident is more than the window older
    assert CoolingLoops(topology(), window_s=3600.0).step(store, 9010.0) == []
    assert CoolingLoops(Topology()).step(store, 9010.0) == []  # no loops in the topology
    assert loop_rows(store) == []
    store.close()


def test_a_shards_pipeline_leaves_the_loop_incident_to_the_cluster(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    rack_incident(store, "r01", 1000.0)
    rack_incident(store, "r02", 1000.0)
    [loop] = CoolingLoops(topology()).step(store, 1010.0)
    pipeline = Pipeline(SeriesMapper(topology=topology()), PipelineConfig(interval_s=30.0), store)
    pipeline.restore(store)
    assert loop.fingerprint not in pipeline.incidents.open  # the racks' are restored, the loop's is not the book's
    assert {"r01|gpu_thermal", "r02|gpu_thermal"} <= set(pipeline.incidents.open)
    store.close()


def test_two_judges_at_once_on_postgresql_open_one_incident(pg_url):
    stores = [Store(pg_url) for _ in range(3)]
    rack_incident(stores[0], "r01", 1000.0)
    rack_incident(stores[0], "r02", 1000.0)
    gate = threading.Barrier(2)
    got: list = []

    def judge(store: Store, now: float) -> None:  # (at different moments: ids from the same moment would agree)
        gate.wait()
        got.append(CoolingLoops(topology()).step(store, now))

    threads = [threading.Thread(target=judge, args=(s, 1010.0 + i)) for i, s in enumerate(stores[1:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(len(g) for g in got) == [0, 1]  # the second, after the first's lock, finds it open
    assert len(loop_rows(stores[0])) == 1
    for s in stores:
        s.close()


def test_the_service_judges_the_loops_where_it_runs_the_alerts(tmp_path):
    from sqlmodel import select

    from daemon.config import load
    from daemon.service.service import Service
    from daemon.store import AlertRow

    (tmp_path / "topology.yaml").write_text("racks:\n- {name: r01, cooling: cdu1, nodes: [n1]}\n"
                                            "- {name: r02, cooling: cdu1, nodes: [n2]}\n")
    (tmp_path / "raswarden.toml").write_text(f'[store]\nurl = "sqlite:///{tmp_path / "state.db"}"\n[service]\n'
                                             f'interval_s = 1\ntopology = "{tmp_path / "topology.yaml"}"\n')
    svc = Service(load(tmp_path / "raswarden.toml"))
    try:
        assert svc.cycle() is not None and svc.active
        rack_incident(svc.store, "r01", 1000.0)
        rack_incident(svc.store, "r02", 1000.0)
        assert svc.alerts() is not None
        [loop] = loop_rows(svc.store)
        assert (loop.entity, loop.status) == ("cdu1", "open")
        with svc.store.session() as s:  # and the alert pipeline took it up in the same pass
            assert s.get(AlertRow, loop.id) is not None
            assert len(s.exec(select(AlertRow)).all()) == 3
    finally:
        svc.stop()
