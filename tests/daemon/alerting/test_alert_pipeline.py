"""The alert pipeline on a real SQLite store: grouping timers, inhibition, silences, routing, resolved."""

from __future__ import annotations

from daemon.alerting.alert_pipeline import AlertingConfig, AlertPipeline
from daemon.alerting.routing import Route
from daemon.alerting.silences import SilenceBook
from daemon.store import OutboxRow
from detectors.schema import State
from sqlmodel import select
from tests.daemon.alerting.conftest import close, make_incident

T0 = 1_000.0


def pipeline(store, **kw) -> AlertPipeline:
    cfg = AlertingConfig(group_wait_s=30, group_interval_s=300, repeat_interval_s=3600,
                         default_receivers=["chat"], **kw)
    return AlertPipeline(store, cfg)


def entities(n) -> list[str]:
    return sorted(a.entity for a in n.alerts)


def test_incidents_of_one_rack_and_category_within_group_wait_make_one_message(store):
    p = pipeline(store)
    store.record_tick([], [make_incident("sn01-b07/gpu3", at=T0)])
    assert p.step(T0) == []  # group_wait not over
    store.record_tick([], [make_incident("sn01-b09/gpu1", at=T0 + 10),
                           make_incident("sn01-b09", category="fabric_link", kind="node", at=T0 + 10)])
    out = p.step(T0 + 31)
    assert [(n.group_key, entities(n)) for n, _ in out] == [
        ("rack=r01,category=gpu_memory", ["sn01-b07/gpu3", "sn01-b09/gpu1"])]
    out = p.step(T0 + 41)  # the fabric group started 10 s later
    assert [(n.group_key, entities(n)) for n, _ in out] == [("rack=r01,category=fabric_link", ["sn01-b09"])]


def test_changes_wait_for_group_interval_and_unchanged_groups_repeat(store):
    p = pipeline(store)
    store.record_tick([], [make_incident("sn01-b07/gpu3", at=T0)])
    assert len(p.step(T0 + 30)) == 1
    store.record_tick([], [make_incident("sn01-b08/gpu0", at=T0 + 60)])
    assert p.step(T0 + 100) == []  # within group_interval
    (n, receivers), = p.step(T0 + 330)
    assert entities(n) == ["sn01-b07/gpu3", "sn01-b08/gpu0"] and n.seq == 2 and receivers == ["chat"]
    assert p.step(T0 + 630) == []  # nothing new, repeat not due
    (n, _), = p.step(T0 + 330 + 3600)
    assert n.seq == 3 and len(n.firing) == 2  # repeated after repeat_interval


def test_resolved_is_told_once(store):
    p = pipeline(store)
    inc = make_incident("sn01-b07/gpu3", at=T0)
    store.record_tick([], [inc])
    p.step(T0 + 30)
    store.record_tick([], [close(inc, T0 + 200)])
    (n, _), = p.step(T0 + 330)
    assert n.status == "resolved" and n.resolved[0].entity == "sn01-b07/gpu3"
    assert p.step(T0 + 700) == [] and p.step(T0 + 9000) == []


def test_a_rack_incident_inhibits_its_node_incidents(store):
    p = pipeline(store)
    rack = make_incident("r01", category="cooling", kind="rack", at=T0)
    nodes = [make_incident(f"sn01-b0{i}/gpu0", category="gpu_thermal", at=T0, parent=rack.id) for i in range(3)]
    store.record_tick([], [rack, *nodes])
    out = p.step(T0 + 30)
    assert [entities(n) for n, _ in out] == [["r01"]]  # the thermal group of the nodes says nothing
    store.record_tick([], [close(rack, T0 + 100)])
    out = p.step(T0 + 400)
    told = {n.group_key: entities(n) for n, _ in out}
    assert told["rack=r01,category=cooling"] == ["r01"]
    assert told["rack=r01,category=gpu_thermal"] == ["sn01-b00/gpu0", "sn01-b01/gpu0", "sn01-b02/gpu0"]


def test_silences_persist_mute_and_expire(store):
    book = SilenceBook(store)
    sil = book.add(["entity=~sn01-b07/.*", "category=gpu_memory"], T0 - 1, T0 + 1000, "alice", "swapping HBM")
    p = pipeline(store)
    store.record_tick([], [make_incident("sn01-b07/gpu3", at=T0), make_incident("sn01-b08/gpu3", at=T0)])
    (n, _), = p.step(T0 + 30)
    assert entities(n) == ["sn01-b08/gpu3"]
    assert [s.id for s in SilenceBook(store).active(T0 + 500)] == [sil.id]  # persisted
    assert book.expire(sil.id, T0 + 600)
    (n, _), = p.step(T0 + 630)
    assert entities(n) == ["sn01-b07/gpu3", "sn01-b08/gpu3"]


def test_routes_by_severity_and_rack(store):
    routes = [Route(receivers=["pager"], severities=["critical"], continue_=True),
              Route(receivers=["rack7-chat"], racks=["r07"])]
    p = pipeline(store, routes=routes)
    store.record_tick([], [make_incident("sn07-b01/gpu0", state=State.FAILED, rack="r07", at=T0),
                           make_incident("sn01-b01/gpu0", category="gpu_bus", at=T0),
                           make_incident("sn07-b02/gpu0", category="gpu_bus", rack="r07", at=T0)])
    got = {n.group_key: receivers for n, receivers in p.step(T0 + 30)}
    assert got == {"rack=r07,category=gpu_memory": ["pager", "rack7-chat"],
                   "rack=r01,category=gpu_bus": ["chat"],
                   "rack=r07,category=gpu_bus": ["rack7-chat"]}


def test_restart_between_ticks_repeats_nothing(store):
    store.record_tick([], [make_incident("sn01-b07/gpu3", at=T0)])
    assert len(pipeline(store).step(T0 + 30)) == 1
    again = pipeline(store)  # a new process reading the same store
    assert again.step(T0 + 31) == [] and again.step(T0 + 400) == []
    with store.session() as s:
        assert len(s.exec(select(OutboxRow)).all()) == 1


def test_silence_cli_add_list_expire(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    cfg = tmp_path / "raswarden.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n')

    def run(*args):
        return subprocess.run([sys.executable, "-m", "daemon", *args, "--config", str(cfg)], cwd=root,
                              capture_output=True, text=True, timeout=60)

    added = run("silence", "add", "rack=r07", "category=gpu_thermal", "--duration", "2h", "--comment", "CDU work",
                "--by", "alice")
    assert added.returncode == 0, added.stderr
    sid = added.stdout.split()[0]
    listed = run("silence", "list")
    assert sid in listed.stdout and "rack=r07 category=gpu_thermal" in listed.stdout and "CDU work" in listed.stdout
    assert run("silence", "expire", sid).returncode == 0
    assert "no active silences" in run("silence", "list").stdout
    assert "expired" in run("silence", "list", "--all").stdout
    bad = run("silence", "add", "rack~r07")
    assert bad.returncode == 2 and "expected label=value" in bad.stderr
    forever = run("silence", "add", "rack=r07", "--duration", "99999999999h")  # issue 54: then 'list' crashed
    assert forever.returncode == 2 and "at most a year" in forever.stderr and "Traceback" not in forever.stderr
    assert run("silence", "list").returncode == 0
    ok = run("check-config")
    assert ok.returncode == 0 and "0 receivers" in ok.stdout


def test_messages_say_what_raswarden_did_and_a_new_step_is_news(store):
    from daemon.store.journal import StoreJournal
    from playbooks.engine import Action, IncidentRef, StepState

    p = pipeline(store)
    inc = make_incident("sn01-b07/gpu3", at=T0)
    store.record_tick([], [inc])
    (n, _), = p.step(T0 + 30)
    assert n.alerts[0].action == ""
    ref = IncidentRef(inc.id, inc.entity, inc.kind, "subhealthy", inc.category)
    action = Action(f"{inc.id}:subhealthy-node-idle", ref, "subhealthy-node-idle", "dry-run", False,
                    [StepState("notify", {}, 60, 2, status="done"), StepState("drain", {}, 60, 2, status="dry-run")],
                    T0 + 40, status="done")
    StoreJournal(store).save(action)  # the incident itself does not change
    (n, _), = p.step(T0 + 330)
    assert n.alerts[0].action == "subhealthy-node-idle: dry-run, nothing done; would drain on sn01-b07"
    from daemon.alerting.render import commands

    assert not any(c.startswith("raswarden resume") for c in commands(n.alerts[0]))  # nothing was drained
    action.mode = "act"
    action.steps[1].status = "done"
    StoreJournal(store).save(action)
    (n, _), = p.step(T0 + 700)
    assert n.alerts[0].action == "subhealthy-node-idle on sn01-b07: done: notify, drain"
    assert any(c.startswith("raswarden resume sn01-b07") and c.endswith("--repaired") for c in commands(n.alerts[0]))
    action.status, action.approval = "awaiting_approval", True
    StoreJournal(store).save(action)
    (n, _), = p.step(T0 + 1100)
    assert n.alerts[0].action == ("subhealthy-node-idle: waiting for an operator's approval to notify, drain on "
                                  "sn01-b07")
    assert f"raswarden approve {inc.id}" in commands(n.alerts[0])


def test_repair_orders_reach_chat_through_the_same_pipeline(store):
    """A repair order is an alert of category ``repair`` (grouped by rack, routable to a technicians' channel): told
    when opened, again at each change of state (a failed validation is critical), resolved when it closes; its link
    is the order's page and its commands the technician's next step."""
    from daemon.alerting.render import Renderer, commands
    from daemon.operations.repairs import RepairBook

    p = pipeline(store, status_url="http://rw.example:9470", routes=[
        Route(receivers=["technicians"], categories=["repair"])])
    inc = make_incident("sn01-b07/gpu3", category="gpu_bus", state=State.FAILED, at=T0)
    store.record_tick([], [inc], now=T0)
    book = RepairBook(store, clock=lambda: T0 + 5)
    (order,) = book.open_for(inc.id)
    out = p.step(T0 + 60)
    told = {a.incident_id: (n, r) for n, r in out for a in n.alerts}
    n, receivers = told[f"repair-{order.id}"]
    a = next(a for a in n.alerts if a.category == "repair")
    assert receivers == ["technicians"] and a.status == "firing" and a.severity == "critical"
    assert a.summary == f"repair order {order.id}: reseat sn01-b07/gpu3 (to do)" and "reseat it" in a.runbook
    assert Renderer(status_url="http://rw.example:9470").incident_url(a) == f"http://rw.example:9470/repairs/{order.id}"
    assert commands(a) == [f"raswarden repairs show {order.id}", f"raswarden repairs start {order.id}"]
    book.clock = lambda: T0 + 400
    book.start(order.id, "dana")
    out = p.step(T0 + 400)
    (a,) = [a for n, _ in out for a in n.alerts if a.category == "repair"]
    assert a.state == "in_progress" and a.action == "open -> in_progress by dana"
    book.clock = lambda: T0 + 800
    book.done(order.id, "dana")
    book.move(order.id, "validating", "raswarden")
    book.move(order.id, "closed", "raswarden", "validation passed")
    out = p.step(T0 + 800)
    (a,) = [a for n, _ in out for a in n.alerts if a.category == "repair"]
    assert a.status == "resolved" and a.summary.endswith("(done, back in service)")
    assert not [a for n, _ in p.step(T0 + 2000) for a in n.alerts if a.category == "repair"]  # told once
