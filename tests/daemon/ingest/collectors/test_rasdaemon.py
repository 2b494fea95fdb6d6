"""rasdaemon databases tailed by id: several per glob, new rows only, state restored, a missing one reported."""

from daemon.ingest.collectors.rasdaemon import RasdaemonCollector
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.topology import Topology
from tests.daemon.ingest.formats.test_rasdaemon_sqlite import make_db


def test_tails_every_database_of_a_glob_and_resumes_from_saved_state(tmp_path):
    a = make_db(tmp_path / "sn01-b01.db")
    make_db(tmp_path / "sn01-b02.db").close()
    ctx = ReadContext()
    c = RasdaemonCollector("ras", ctx, databases=[str(tmp_path / "*.db"), str(tmp_path / "gone.db")])
    batch, outcome = c.collect(0.0)
    assert outcome.targets_total == 3 and outcome.targets_up == 2 and "gone.db: no such file" in outcome.errors[0]
    assert sorted(set(batch.events["entity"])) == ["sn01-b01", "sn01-b02"] and len(batch.events) == 6
    batch, _ = c.collect(1.0)
    assert len(batch.events) == 0  # nothing new
    a.execute("INSERT INTO aer_event (timestamp, dev_name, err_type, err_msg) VALUES "
              "('2026-03-02 00:09:00 +0000', '0000:3b:00.0', 'Corrected', 'Receiver Error')")
    a.commit()
    saved = dict(c.state)
    again = RasdaemonCollector("ras", ReadContext(), databases=[str(tmp_path / "*.db")])
    again.restore(saved)  # a restarted daemon
    batch, _ = again.collect(2.0)
    assert list(batch.events["kind"]) == ["aer"] and list(batch.events["severity"]) == ["corrected"]


def test_a_shard_reads_only_its_nodes_databases(tmp_path):
    for host in ("sn01-b01", "sn01-b02", "10.0.0.3"):
        make_db(tmp_path / f"{host}.db").close()
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [
        "sn01-b01", "sn01-b02", {"name": "sn01-b03", "aliases": ["10.0.0.3"]}]}]})
    ctx = ReadContext(mapper=SeriesMapper(topology=topo),
                      shard_hosts=frozenset({"sn01-b02", "sn01-b03", "10.0.0.3"}))  # its nodes' names and aliases
    c = RasdaemonCollector("ras", ctx, databases=[str(tmp_path / "*.db")])
    assert sorted(p.name for p in c.paths()) == ["10.0.0.3.db", "sn01-b02.db"]
    batch, outcome = c.collect(0.0)
    assert outcome.targets_total == 2 and outcome.targets_up == 2
    assert sorted(set(batch.events["entity"])) == ["sn01-b02", "sn01-b03"]  # the address's database is sn01-b03's
