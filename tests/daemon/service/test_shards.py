"""Shards by topology (issue 27, daemon/shards.py): two instances serving two shards of one live supernode on one
store each keep, restore and act on their own nodes only, and the cluster's alert pipeline runs in one of them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from daemon import metrics
from daemon.cli import main
from daemon.config import ConfigError, load
from daemon.service.service import Service
from daemon.shards import ShardSpec, cycle_phase
from tests.daemon.alerting.receiver_server import ChatServer
from tests.daemon.service.test_service import until

SHARDS = '''
[shards.a]
nodes = ["sn01-b01"]
matchers = 'instance=~"127[.]1[.]0[.]1:.*"'
[shards.b]
nodes = ["sn01-b02"]
matchers = 'instance=~"127[.]1[.]0[.]2:.*"'
'''


def failed_after_cycles(a: Service, b: Service, gpu: str) -> bool:
    """One cycle of each shard's instance; whether ``b`` holds ``gpu`` (the simulator's off-the-bus GPU) failed."""
    a.cycle()
    b.cycle()
    h = b.pipeline.health.entities.get(gpu)
    return h is not None and h.state.label == "failed"


def test_two_shards_split_the_nodes_and_the_alerts_run_once(live):
    a = Service(load(live.config("a.toml", extra=SHARDS, service_extra='shard = "a"')))
    b = Service(load(live.config("b.toml", extra=SHARDS, service_extra='shard = "b"')))
    try:
        assert a.cycle() is not None and b.cycle() is not None and a.active and b.active  # a lease each
        # both nodes are in one rack, split between the shards: the cluster's to group (daemon/judgement/splitracks.py)
        rack = a.pipeline.mapper.topology.rack_of("sn01-b01")
        assert a.ownership.split_racks == b.ownership.split_racks == {rack}
        assert a.split_racks.racks == {rack: ["a", "b"]} and not a.pipeline.incidents.groups_rack(rack)

        until(lambda: failed_after_cycles(a, b, "sn01-b02/gpu5"))
        nodes_of = {s: {e.split("/", 1)[0] for e in svc.pipeline.known_entities} for s, svc in (("a", a), ("b", b))}
        assert nodes_of == {"a": {"sn01-b01"}, "b": {"sn01-b02"}}  # each reads only its own nodes' telemetry
        scraped = {s: svc.last.outcomes["exporters"] for s, svc in (("a", a), ("b", b))}
        assert {s: (o.targets_total, o.targets_up) for s, o in scraped.items()} == {"a": (2, 2), "b": (2, 2)}
        assert not [i for i in a.pipeline.incidents.open.values() if i.entity.startswith("sn01-b02")]
        mine = [i.entity for i in b.pipeline.incidents.open.values()]
        assert "sn01-b02/gpu5" in mine or "sn01-b02" in mine
        # the cluster's alert pipeline: one of them, not both
        told = [svc.alerts() is not None for svc in (a, b)]
        assert told.count(True) == 1
        assert [svc.alerts() is not None for svc in (a, b)] == told  # and it stays with that one
        # playbooks: each from its own cursor, each on its own incidents
        a.playbooks()
        b.playbooks()
        assert b.store.incident_cursor("playbooks:b") is not None  # b read its incidents from its own cursor
        assert a.store.incident_cursor("playbooks:a") is None  # a had none to read (b's are not a's)
        assert a.store.incident_cursor("playbooks") is None
        assert not [x for x in a.remediation.journal.actions() if x.incident.entity.startswith("sn01-b01")]
        # checkpoint advice: each shard advises the jobs whose first node it owns, from the cluster's journal
        from lab.sim.cluster import SimJob, SimScheduler

        sched = SimScheduler(["sn01-b01", "sn01-b02"])
        sched.submit(SimJob("ja", 1, 1e6))
        sched.submit(SimJob("jb", 1, 1e6))
        sched.step(0.0)
        assert {sched.jobs["ja"].nodes, sched.jobs["jb"].nodes} == {("sn01-b01",), ("sn01-b02",)}
        for svc in (a, b):
            svc.remediation.engine.scheduler = sched
        mine = {"a": set(a.advise()), "b": set(b.advise())}
        assert mine == {"a": {j for j in ("ja", "jb") if sched.jobs[j].nodes == ("sn01-b01",)},
                        "b": {j for j in ("ja", "jb") if sched.jobs[j].nodes == ("sn01-b02",)}}
    finally:
        a.stop()
    again = Service(load(live.config("a2.toml", extra=SHARDS, service_extra='shard = "a"')))
    try:
        assert again.cycle() is not None
        assert not [i for i in again.pipeline.incidents.open.values() if i.entity.startswith("sn01-b02")]
        assert not [e for e in again.pipeline.health.entities if e.startswith("sn01-b02")]  # b's, not restored
        assert [svc.alerts() is not None for svc in (again, b)].count(True) == 1  # a let go of it at its stop
    finally:
        again.stop()
        b.stop()


def test_a_shard_config_that_cannot_be_right_is_refused(tmp_path):
    base = '[store]\nurl = "sqlite://"\n[service]\nshard = "%s"\n'
    cases = {
        ("a", '[shards.a]\nracks = ["r01"]\n[shards.b]\nracks = ["r01"]\n'): "'r01' is in shards.a too",
        ("c", '[shards.a]\nracks = ["r01"]\n'): "'c' is not one of the [shards] (a)",
        ("a", '[shards.a]\n'): "names no supernode, rack or node",
        ("a", '[shards.a]\nrack = ["r01"]\n'): "rack",
        ("*", ''): "needs [shards.NAME] tables",
    }
    for (shard, text), why in cases.items():
        path = tmp_path / "c.toml"
        path.write_text(base % shard + text)
        with pytest.raises(ConfigError, match=why.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                           .replace(")", r"\)")):
            load(path)


def test_a_pool_member_serves_whichever_shard_has_no_live_holder(live):
    """service.shard = "*": a pool member takes the first shard nobody holds and becomes its instance; a second
    one waits while both are held, and takes the shard whose holder stops."""
    a = Service(load(live.config("a.toml", extra=SHARDS, service_extra='shard = "a"')))
    p1 = Service(load(live.config("p1.toml", extra=SHARDS, service_extra='shard = "*"')))
    p2 = Service(load(live.config("p2.toml", extra=SHARDS, service_extra='shard = "*"')))
    try:
        assert a.cycle() is not None
        assert p1.cycle() is not None and p1.cfg.service.shard == "b"  # a is held: the first free one
        assert p1.ownership.nodes == {"sn01-b02"} and p1.remediation.cursor == "playbooks:b"
        assert p1.ctx.shard_matchers == 'instance=~"127[.]1[.]0[.]2:.*"'  # what its PromQL collectors ask with
        # its cycle on b's half of the interval from now on (a's on the first half: they take turns at Prometheus)
        assert [j.phase_s for j in p1.jobs.jobs if j.name == "cycle"] == [0.5] and a._cycle_job().phase_s == 0.0
        assert p2.cycle() is None and not p2.active  # both held: it waits
        a.stop()
        assert p2.cycle() is not None and p2.cfg.service.shard == "a" and p2.ownership.nodes == {"sn01-b01"}
        until(lambda: p2.cycle() and {e.split("/", 1)[0] for e in p2.pipeline.known_entities} == {"sn01-b01"})
        assert p2.reload(p2.cfg.path) and p2.cfg.service.shard == "a"  # a reload keeps the shard it took
    finally:
        for svc in (p1, p2):
            svc.stop()


def test_a_stopping_pool_member_takes_no_shard(live):
    """A pool member told to stop takes no shard a stopping instance leaves (systemctl stops a node's instances
    together): it would activate and run a cycle only to let the shard go again, holding its stop past systemd's
    timeout; until it is told, it takes the shard as before."""
    a = Service(load(live.config("a.toml", extra=SHARDS, service_extra='shard = "a"')))
    b = Service(load(live.config("b.toml", extra=SHARDS, service_extra='shard = "b"')))
    pool = Service(load(live.config("p.toml", extra=SHARDS, service_extra='shard = "*"')))
    try:
        assert a.cycle() is not None and b.cycle() is not None and pool.cycle() is None  # both held: it waits
        a.stop()
        pool.stop_event.set()
        assert pool.cycle() is None and not pool.active and pool.cfg.service.shard == "*"
        pool.stop_event.clear()
        assert pool.cycle() is not None and pool.cfg.service.shard == "a"
    finally:
        for svc in (pool, b):
            svc.stop()


def test_a_pool_member_hands_a_shard_back_when_its_own_instance_returns(live, capsys):
    """Rebalancing when a management node comes back: a pool member that took shard a while a's own instance was
    away hands it over at its next cycle once that instance stands by again (warm state, cursors and incidents go
    with the shard; never two holders), waits in the pool and takes a shard nobody holds."""
    a = Service(load(live.config("a.toml", extra=SHARDS, service_extra='shard = "a"')))
    b = Service(load(live.config("b.toml", extra=SHARDS, service_extra='shard = "b"')))
    pool = Service(load(live.config("p.toml", extra=SHARDS, service_extra='shard = "*"')))
    back = None
    try:
        assert a.cycle() is not None and b.cycle() is not None and pool.cycle() is None  # both held: it waits
        a.stop()  # a's management node leaves
        assert pool.cycle() is not None and pool.cfg.service.shard == "a"
        until(lambda: pool.cycle() and {e.split("/", 1)[0] for e in pool.pipeline.known_entities} == {"sn01-b01"})
        handed = metrics.SHARD_HANDOVERS._value.get()
        back = Service(load(live.config("a2.toml", extra=SHARDS, service_extra='shard = "a"')))  # and comes back
        assert back.cycle() is None and not back.active  # the pool member holds a: it stands by and asks for it
        assert main(["status", "--config", str(back.cfg.path)]) == 1  # (no daemon answers on its port)
        out = capsys.readouterr().out
        assert f"shard a: held by {pool.lease.holder}; cycles at +0 s of every 1 s" in out
        assert f"shard a: its own instance {back.lease.holder} stands by" in out and "shard b: its own" not in out
        assert pool.lease.held() and pool.cfg.service.shard == "a"  # not yet handed over: never two holders
        cursor = pool.store.collector_state("kernel")
        last_tick = pool.previous_tick
        assert pool.cycle() is None  # hands a over; b is held, so it waits in the pool again
        assert not pool.active and pool.cfg.service.shard == "*" and not pool.lease.held()
        assert metrics.SHARD_HANDOVERS._value.get() == handed + 1
        assert pool.store.warm_state("a").saved_at == last_tick  # what it learned of a goes with the shard
        assert pool.playbooks() is None  # it acts for a no more
        assert back.cycle() is not None and back.active and back.cfg.service.shard == "a"
        # the kernel journal from where the pool member's last tick was: every line since its cursor read (the live
        # simulator may have written some since)
        state = back.collectors[1].state
        since = Path(back.collectors[1].file).read_bytes()[cursor["offset"]:state["offset"]]
        assert state["inode"] == cursor["inode"] and state["line"] - cursor["line"] == since.count(b"\n")
        assert back.warm_saved_at >= last_tick
        assert pool.cycle() is None  # a's own instance holds it now: the pool member does not take it back
        b.stop()  # a free shard: the pool member serves it
        assert pool.cycle() is not None and pool.cfg.service.shard == "b" and pool.ownership.nodes == {"sn01-b02"}
    finally:
        for svc in (pool, back):
            if svc is not None:
                svc.stop()


def test_no_alert_lost_or_told_twice_when_a_shard_and_the_alerts_move(live):
    """Shard b's holder, which also runs the cluster's alerts, stops while its alert about b's failed GPU is still
    in the outbox (the receiver answers 503): a pool member takes b over with the same incident (nothing opened
    again) and the alerts go on in another instance, which delivers that alert exactly once."""
    chat = ChatServer()
    chat.answers = [(503, {}, b"down")] * 3
    alerting = f'''
[alerting]
group_wait_s = 0
default_receivers = ["hook"]
[alerting.delivery]
base_s = 0.5
max_s = 1
[[alerting.receivers]]
name = "hook"
type = "webhook"
url = "{chat.url()}"
'''
    a = Service(load(live.config("a.toml", extra=SHARDS + alerting, service_extra='shard = "a"')))
    b = Service(load(live.config("b.toml", extra=SHARDS + alerting, service_extra='shard = "b"')))
    pool = Service(load(live.config("p.toml", extra=SHARDS + alerting, service_extra='shard = "*"')))
    stopped = []
    try:
        until(lambda: failed_after_cycles(a, b, "sn01-b02/gpu5"))
        assert b.alerts() is not None and a.alerts() is None  # b runs the cluster's alerts
        until(lambda: b.alerts() is not None and len(chat.received) >= 2)  # told, refused by the receiver
        ours = {i.id for i in b.pipeline.incidents.open.values() if i.entity.startswith("sn01-b02")}
        assert ours
        b.stop()  # the last delivery fails too: the alert stays in the outbox
        stopped.append(b)
        assert pool.cycle() is not None and pool.cfg.service.shard == "b"
        assert {i.id for i in pool.pipeline.incidents.open.values() if i.entity.startswith("sn01-b02")} == ours

        def delivered():
            for svc in (a, pool):
                svc.cycle()
                svc.alerts()
            return len(chat.received) > 3
        until(delivered)
        for _ in range(5):  # a few more passes: nothing more to tell about b's GPU
            delivered()
            time.sleep(0.3)
        about_b = [r for r in chat.received[3:] if b"sn01-b02" in r.body]
        assert len(about_b) == 1, [r.body[:300] for r in chat.received]
    finally:
        for svc in (a, b, pool):
            if svc not in stopped:
                svc.stop()
        chat.close()


def test_the_shards_cycles_take_turns_over_the_interval():
    specs = {name: ShardSpec(name, supernodes=frozenset({name})) for name in ("sn03", "sn01", "sn02", "sn04")}
    assert [cycle_phase(specs, name, 15.0) for name in ("sn01", "sn02", "sn03", "sn04")] == [0.0, 3.75, 7.5, 11.25]
    assert cycle_phase(specs, "*", 15.0) is None and cycle_phase({}, "default", 15.0) is None


def test_a_shard_plan_that_leaves_a_node_out_is_told():
    from daemon.shards import plan_warnings
    from daemon.topology import Topology

    topo = Topology.from_dict({"racks": [
        {"name": "r01", "cooling": "cdu1", "nodes": ["n1", "n2"]},
        {"name": "r02", "cooling": "cdu1", "nodes": ["n3"]},
        {"name": "r03", "nodes": ["n4"]}]})
    shards = {"a": ShardSpec("a", nodes=frozenset({"n1"})), "b": ShardSpec("b", nodes=frozenset({"n2", "n3"}))}
    warnings = plan_warnings(shards, topo)
    # a rack (r01) or a cooling loop (cdu1) across shards is judged for the cluster (splitracks.py, cooling.py)
    assert warnings == ["1 node(s) in no shard, watched by no instance: n4"]
    by_supernode = {"a": ShardSpec("a", racks=frozenset({"r01", "r02"})), "b": ShardSpec("b", racks=frozenset({"r03"}))}
    assert plan_warnings(by_supernode, topo) == []


def test_a_shard_keeps_only_its_nodes_rows_of_a_batch():
    import pandas as pd

    from daemon.ingest.batch import Batch
    from daemon.shards import Ownership
    from detectors.schema import events_frame

    own = Ownership("a", frozenset({"n1"}))
    samples = pd.DataFrame({"ts": [1.0, 1.0, 1.0], "entity": pd.Categorical(["n1/gpu0", "n2/gpu0", "n1"]),
                            "metric": pd.Categorical(["gpu_temp_c"] * 3), "value": [50.0, 60.0, 1.0]})
    events = events_frame([(1.0, "n2", "xid", 79, "error", "off the bus", "kernel", "0000:3b:00", None),
                           (1.0, "n1", "boot", None, "info", "booted", "kernel", None, None)])
    kept = own.keep(Batch(samples, events))
    assert list(kept.samples["entity"].astype(str)) == ["n1/gpu0", "n1"] and list(kept.samples["value"]) == [50, 1]
    assert list(kept.events["entity"]) == ["n1"]
    assert Ownership().keep(Batch(samples, events)).samples is samples  # not sharded: untouched


def test_a_shards_hosts_are_its_nodes_and_their_aliases():
    from daemon.shards import Ownership
    from daemon.topology import Topology

    topo = Topology()
    topo.aliases.update({"10.0.0.1": "n1", "n1.cluster": "n1", "10.0.0.2": "n2"})
    assert Ownership("a", frozenset({"n1"})).hosts(topo) == {"n1", "10.0.0.1", "n1.cluster"}
    assert Ownership().hosts(topo) is None  # not sharded: every host


def test_a_shard_no_instance_holds_is_an_incident_until_one_does(tmp_path):
    import time

    from sqlmodel import select

    from daemon import metrics
    from daemon.store import AlertRow, IncidentRow

    (tmp_path / "topology.yaml").write_text("racks:\n- {name: r01, nodes: [n1, n2]}\n- {name: r02, nodes: [n3]}\n")

    def config(shard: str) -> Service:
        path = tmp_path / f"{shard}.toml"
        path.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "state.db"}"\n[service]\ninterval_s = 0.5\n'
                        f'lease_ttl_s = 1.0\nshard = "{shard}"\ntopology = "{tmp_path / "topology.yaml"}"\n'
                        '[shards.a]\nracks = ["r01"]\n[shards.b]\nracks = ["r02"]\n')
        return Service(load(path))

    def shard_incidents():  # (about shard a, which a holds, never one)
        with a.store.session() as s:
            return s.exec(select(IncidentRow).where(IncidentRow.kind == "shard").order_by(IncidentRow.opened_at)).all()

    a = config("a")
    b = None
    try:
        assert a.cycle() is not None and a.active
        assert a.alerts() is not None  # a runs the cluster's alerts
        assert shard_incidents() == [] and a.unwatched.unwatched == ["b"]  # within the grace: a standby may come
        time.sleep(1.2)
        a.cycle()  # (as the service's cycle job does every interval: a keeps its own shard's lease)
        a.alerts()
        [inc] = shard_incidents()
        assert (inc.entity, inc.category, inc.status) == ("shard:b", "telemetry", "open")
        assert "shard b has no live instance: its 1 node(s) are watched by nobody (no instance has held it yet)" \
            in inc.evidence[0]
        assert metrics.SHARDS_UNWATCHED._value.get() == 1
        a.alerts()
        assert len(shard_incidents()) == 1  # told once
        with a.store.session() as s:  # the alert: no node, part or jobs to name; what to start
            alert = s.get(AlertRow, inc.id).content
        assert alert["where"] == [] and alert["runbook"].startswith("start raswarden on a management node")
        b = config("b")
        assert b.cycle() is not None and b.active
        a.alerts()
        [inc] = shard_incidents()
        assert inc.status == "closed" and inc.close_reason.startswith("held by ")
        assert metrics.SHARDS_UNWATCHED._value.get() == 0
        b.stop()  # its holder goes (releasing the lease), no standby comes: a new incident after the grace
        b = None
        a.alerts()
        time.sleep(1.2)
        a.cycle()
        a.alerts()
        assert [(i.entity, i.status, "stopped renewing its lease" in i.evidence[0]) for i in shard_incidents()] == [
            ("shard:b", "closed", False), ("shard:b", "open", True)]
    finally:
        for svc in (a, b):
            if svc is not None:
                svc.stop()
