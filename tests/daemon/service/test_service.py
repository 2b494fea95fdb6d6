"""The service in-process against a live simulated supernode: collect and tick, restart from the store, standby."""

from __future__ import annotations

import logging
import time

from sqlmodel import select

from daemon.config import load
from daemon.service.service import Service
from daemon.store import CollectorStateRow, IncidentRow
from tests.daemon.service.conftest import dead_target_config


def until(check, timeout=60.0, every=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("condition not met in time")


def test_cycles_collect_tick_and_open_an_incident_for_a_gpu_off_the_bus(live):
    cfg = load(live.config())
    svc = Service(cfg)
    try:
        first = until(lambda: (r := svc.cycle()) is not None and r.samples > 0 and r)
        assert svc.active
        assert first.outcomes["exporters"].ok and first.outcomes["exporters"].targets_total == 4
        def gpu5_failed():
            svc.cycle()
            h = svc.pipeline.health.entities.get("sn01-b02/gpu5")
            return h is not None and h.state.label == "failed"

        until(gpu5_failed)
        assert any(i.entity == "sn01-b02/gpu5" and i.category == "gpu_bus"
                   for i in svc.pipeline.incidents.open.values())
        with svc.store.session() as s:
            kernel = s.get(CollectorStateRow, "kernel")
        assert kernel is not None and kernel.value["offset"] > 0  # saved with the tick that read it
        ok, detail = svc.healthz()
        assert ok, detail
        assert "open incidents" in svc.status_line()
    finally:
        svc.stop()


def test_an_operator_resume_as_repaired_makes_the_running_daemon_forget_the_node(live):
    """`raswarden resume NODE --repaired` (or the API) writes the journal; the daemon's next cycle takes it in
    and its detectors drop what they remember of the node (here the latched Xid 79), no other node's."""
    from daemon.operations.operator import node_action
    from lab.sim.cluster import SimScheduler

    svc = Service(load(live.config()))
    try:
        def gpu5_latched():
            svc.cycle()
            return "sn01-b02/gpu5" in svc.pipeline.rules._latches

        until(gpu5_latched)
        done = node_action(SimScheduler(["sn01-b02"]), svc.store, "resume", "sn01-b02", "GPU replaced", "tester",
                           repaired=True)
        assert done.endswith("parts replaced")
        svc.cycle()
        assert "sn01-b02/gpu5" not in svc.pipeline.rules._latches
        assert svc.repairs_seen > 0
    finally:
        svc.stop()


def test_a_restarted_daemon_takes_up_its_incidents_and_reads_no_event_twice(live):
    path = live.config()
    svc = Service(load(path))
    def gpu5_failed():
        svc.cycle()
        h = svc.pipeline.health.entities.get("sn01-b02/gpu5")
        return h is not None and h.state.label == "failed" and svc.pipeline.events_by_kind.get("xid", 0)

    until(gpu5_failed)
    xids_before = svc.pipeline.events_by_kind.get("xid", 0)
    assert xids_before >= 1
    open_before = {i.fingerprint: i.id for i in svc.pipeline.incidents.open.values()}
    # no stop(): the process is gone as after SIGKILL, its lease still held until it runs out
    svc.store.close()
    for c in svc.collectors:
        c.close()
    again = Service(load(path))
    try:
        assert again.cycle() is None and not again.active  # the dead holder's lease has not run out yet
        until(lambda: again.cycle() is not None, timeout=10)
        assert {i.fingerprint: i.id for i in again.pipeline.incidents.open.values()}.items() >= open_before.items()
        for _ in range(3):
            again.cycle()
            time.sleep(0.3)
        assert again.pipeline.events_by_kind.get("xid", 0) == 0  # the Xid 79 line was not read again
        with again.store.session() as s:
            rows = s.exec(select(IncidentRow).where(IncidentRow.category == "gpu_bus")).all()
        fingerprints = [r.fingerprint for r in rows]
        assert len(fingerprints) == len(set(fingerprints))  # no second incident for the same fault
        assert again.pipeline.health.entities["sn01-b02/gpu5"].state.label == "failed"
    finally:
        again.stop()


def test_one_active_per_shard_the_standby_takes_over_when_released(live):
    path = live.config()
    a = Service(load(path))
    b = Service(load(path))
    try:
        assert a.cycle() is not None and b.cycle() is None
        assert b.status_line().startswith("standby:") and b.playbooks() is None and b.alerts() is None
        ok, detail = b.healthz()
        assert ok and detail["active"] is False
        a.stop()
        assert b.cycle() is not None and b.active
    finally:
        b.stop()


def test_reload_refuses_a_bad_config_and_keeps_the_running_one(live):
    path = live.config()
    svc = Service(load(path))
    try:
        svc.cycle()
        good = path.read_text()
        path.write_text(good + "\n[service.extra]\n")
        assert not svc.reload(path)
        path.write_text(good.replace('type = "journald"', 'type = "journald"\nbogus = 1'))
        assert not svc.reload(path)
        assert [c.name for c in svc.collectors] == ["exporters", "kernel"]
        running = (svc.pipeline, svc.remediation, svc.alerting, svc.collectors)
        path.write_text(good.replace("[service]\n", f'[service]\nmodel = "{live.root / "no-model"}"\n'))
        assert not svc.reload(path)  # valid TOML, but the model cannot be loaded: nothing is swapped
        assert (svc.pipeline, svc.remediation, svc.alerting, svc.collectors) == running
        offset = svc.collectors[1].state.get("offset", 0)
        path.write_text(good.replace('name = "exporters"', 'name = "exporters"\nenabled = false'))
        assert svc.reload(path)
        assert [c.name for c in svc.collectors] == ["kernel"]
        assert svc.collectors[0].state.get("offset", 0) == offset  # the cursor survives the reload
        assert svc.cycle() is not None
    finally:
        svc.stop()


def test_a_restarted_or_reloaded_daemon_keeps_what_its_detectors_learned(live):
    """A clean stop saves the warm state and the next daemon takes it up; a reload hands it on in memory unless
    detection changed. (The crash case, with no save since the start, is the test above: nothing carried over.)"""
    path = live.config(service_extra="warm_state_interval_s = 1")
    svc = Service(load(path))
    try:
        until(lambda: svc.cycle() and svc.pipeline.events_by_kind.get("xid", 0))
        known = set(svc.pipeline.known_entities)
        good = path.read_text()
        path.write_text(good.replace("[http]", "[http]\nmax_connections = 16"))  # not detection
        assert svc.reload(path)
        assert svc.pipeline.known_entities == known and svc.pipeline.events_by_kind.get("xid", 0) >= 1
        assert svc.cycle() is not None
        xids = svc.pipeline.events_by_kind["xid"]
        trend = svc.pipeline.detectors[[d.name for d in svc.pipeline.detectors].index("trend")]
    finally:
        svc.stop()
    again = Service(load(path))
    try:
        assert again.cycle() is not None and again.active
        assert again.pipeline.events_by_kind.get("xid", 0) == xids  # carried, and the Xid line not read again
        assert again.pipeline.known_entities >= known
        mine = again.pipeline.detectors[[d.name for d in again.pipeline.detectors].index("trend")]
        assert mine is not trend and len(mine._series) == len(trend._series) > 0
        path.write_text(good.replace("\ninterval_s = 1.0\n", "\ninterval_s = 2.0\n"))
        assert again.reload(path)  # the tick interval is detection: the detectors start afresh
        assert not again.pipeline.known_entities and not again.pipeline.events_by_kind
    finally:
        again.stop()


def test_a_target_that_does_not_answer_and_a_collector_that_raises_are_logged_once_not_every_cycle(tmp_path, caplog):
    config, target = dead_target_config(tmp_path)  # nothing listens there: every scrape is refused
    svc = Service(load(config))
    caplog.set_level(logging.INFO, logger="raswarden.service")
    try:
        for _ in range(3):
            report = svc.cycle()
            assert report is not None and not report.outcomes["exporters"].ok
        refused = [r for r in caplog.records if target in r.getMessage()]
        assert len(refused) == 1 and refused[0].levelname == "WARNING", [r.getMessage() for r in refused]
        collector = svc.collectors[0]

        def broken(now):
            raise RuntimeError("a bug")
        collector.collect = broken  # a collector's own bug: the traceback once, the daemon goes on
        caplog.clear()
        for _ in range(3):
            assert svc.cycle() is not None
        assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == ["collector exporters failed"]
        assert sum("RuntimeError: a bug" in r.getMessage() for r in caplog.records) == 1
        assert any(r.levelname == "INFO" and r.getMessage().startswith("collector exporters: cleared after 3 ticks")
                   for r in caplog.records)
    finally:
        svc.stop()
