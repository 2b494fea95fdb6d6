"""The playbook engine against the simulated scheduler, journaled in a real SQLite store: steps, guards,
modes, approval, and resuming after a crash without repeating a drain or a requeue."""

from __future__ import annotations

import pytest

from daemon.store.journal import StoreJournal
from lab.sim.cluster import SimJob, SimScheduler
from daemon.store import Store
from playbooks.engine import Engine, IncidentRef
from playbooks.guards import Guards, incident_in_reason
from playbooks.model import load, parse
from playbooks.scheduler import DRAIN
from tests.conftest import Clock


@pytest.fixture
def world(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    sched = SimScheduler([f"sn01-b{i:02d}" for i in range(1, 9)])
    for k in range(4):
        sched.submit(SimJob(f"j{k}", 1, work_s=86400.0, opt_in=(k != 3)))
    sched.step(60.0)
    yield store, sched
    store.close()


def node_of(sched, job):
    return sched.jobs[job].nodes[0]


def incident(entity, state="subhealthy", category="gpu_memory", **kw) -> IncidentRef:
    return IncidentRef(id=f"inc-{entity.replace('/', '-')}", entity=entity, kind="accelerator" if "/" in entity
                       else "node", state=state, category=category, rack="r01", opened_at=900.0, **kw)


def engine(store, sched, playbooks=None, clock=None, **guards):
    return Engine(sched, StoreJournal(store), playbooks or load(), Guards(**guards), clock=clock or Clock())


def drains(sched):
    return [x for x in sched.log if x[1] == "drain"]


def test_subhealthy_node_with_jobs_checkpoints_drains_requeues(world, tmp_path):
    store, sched = world
    node = node_of(sched, "j0")
    marker = tmp_path / "ckpt-j0.done"
    custom = [parse({"name": "subhealthy-node-with-jobs", "priority": 20,
                     "match": {"states": ["subhealthy"], "jobs": "running"},
                     "steps": [{"step": "notify"}, {"step": "checkpoint"},
                               {"step": "wait_checkpoint", "confirm": "marker",
                                "marker": str(tmp_path / "ckpt-{job}.done"), "timeout": "10m"},
                               {"step": "drain"}, {"step": "requeue"}]})]
    clock = Clock()
    eng = engine(store, sched, custom, clock)
    action = eng.submit(incident(f"{node}/gpu3"), sched.snapshot())
    assert action.playbook == "subhealthy-node-with-jobs"
    assert eng.submit(incident(f"{node}/gpu3"), sched.snapshot()) is None  # one action per incident
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert [s.status for s in a.steps] == ["done", "done", "started", "pending", "pending"]
    assert a.steps[1].detail["signalled"] == ["j0"]
    assert ("signal" in [x[1] for x in sched.log]) and not drains(sched)  # waiting for the checkpoint
    marker.write_text("saved")
    clock.t += 30
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.status == "done" and [s.status for s in a.steps] == ["done"] * 5
    info = sched.snapshot().nodes[node]
    assert DRAIN in info.states and info.reason.startswith(f"raswarden: {action.incident.id} gpu_memory")
    assert a.steps[4].detail["requeued"] == ["j0"]
    sched.step(120.0)
    assert sched.jobs["j0"].nodes and node_of(sched, "j0") != node  # running again elsewhere


def test_checkpoint_timeout_goes_on_and_non_opted_jobs_are_not_signalled(world):
    store, sched = world
    node = node_of(sched, "j3")  # j3 did not opt in
    clock = Clock()
    eng = engine(store, sched, clock=clock)
    action = eng.submit(incident(node), sched.snapshot())
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.steps[1].detail == {"signalled": [], "left_running": ["j3"], "signalled_at": clock.t,
                                 "comments_at_signal": {}}
    assert a.status == "done" and DRAIN in sched.snapshot().nodes[node].states
    # the requeue leaves it running too: its TERM would cost j3 the work since its own last checkpoint
    assert a.steps[4].type == "requeue" and a.steps[4].detail["requeued"] == []
    assert a.steps[4].detail["left_running"] == ["j3"]
    assert sched.jobs["j3"].state == "running" and node_of(sched, "j3") == node


def test_an_operators_drain_is_left_alone(world):
    store, sched = world
    node = node_of(sched, "j1")
    sched.operator_drain(node, "HW swap ticket 4711", user="alice")
    eng = engine(store, sched)
    action = eng.submit(incident(f"{node}/gpu0", state="failed"), sched.snapshot())
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert [s.status for s in a.steps] == ["done", "skipped", "skipped"]
    assert "left alone" in a.steps[1].detail["note"]
    info = sched.snapshot().nodes[node]
    assert info.reason == "HW swap ticket 4711" and info.reason_set_by == "alice"
    assert sched.jobs["j1"].state == "running"


def test_blast_radius_budget_holds_a_drain(world):
    store, sched = world
    sched.operator_drain("sn01-b08", "maintenance")
    eng = engine(store, sched, max_drained_nodes=1)
    node = node_of(sched, "j2")
    action = eng.submit(incident(f"{node}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.status == "held" and "budget 1" in a.steps[1].detail["held"]
    assert not drains(sched)


def test_a_stop_leaves_a_held_action_held_and_starts_no_step(world, tmp_path):
    """Told to stop (playbooks/stopping.py) while another raswarden holds the blast-radius lock: the held drain gives
    up its wait at once and the action stays held, its step `started` for the next start; a planned action starts
    nothing."""
    import threading
    import time

    from playbooks import stopping

    store, sched = world
    sched.operator_drain("sn01-b08", "maintenance")
    eng = engine(store, sched, max_drained_nodes=1)
    held = eng.submit(incident(f"{node_of(sched, 'j2')}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    assert StoreJournal(store).get(held.key).status == "held"
    fresh = eng.submit(incident(f"{node_of(sched, 'j0')}/gpu1", state="failed"), sched.snapshot())
    other = Store(f"sqlite:///{tmp_path / 'state.db'}")
    stop = threading.Event()
    try:
        with other.cluster_lock("blast-radius"), stopping.watching(stop):
            threading.Timer(0.3, stop.set).start()
            began = time.monotonic()
            eng.run()
            assert time.monotonic() - began < 5.0  # not the lock's 30 s
    finally:
        other.close()
    journal = StoreJournal(store)
    assert journal.get(held.key).status == "held" and journal.get(held.key).steps[1].status == "started"
    assert journal.get(fresh.key).status == "planned"
    assert [st.status for st in journal.get(fresh.key).steps] == ["pending"] * len(fresh.steps)
    assert not drains(sched)


def test_circuit_breaker_stops_acting_until_reset(world):
    store, sched = world
    eng = engine(store, sched, breaker_incidents=5)
    eng.observe(new_incidents=12, nodes=8, stale_nodes=0)
    action = eng.submit(incident(f"{node_of(sched, 'j0')}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.status == "held" and "circuit breaker: 12 new incidents" in a.note and not drains(sched)
    StoreJournal(store).set_breaker(None)
    eng.run()
    assert StoreJournal(store).get(action.key).status == "done" and len(drains(sched)) == 1


@pytest.mark.parametrize("mode", ["dry-run", "shadow"])
def test_dry_run_and_shadow_decide_and_record_but_do_nothing(world, mode):
    store, sched = world
    eng = engine(store, sched, mode=mode)
    action = eng.submit(incident(f"{node_of(sched, 'j0')}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.status == "done" and a.mode == mode and not drains(sched)
    if mode == "dry-run":
        assert a.steps[1].status == "dry-run" and a.steps[1].detail["would"].startswith("drain sn01-b")
    else:
        assert {s.status for s in a.steps} == {"skipped"}


def test_approval_waits_for_an_operator(world):
    store, sched = world
    pbs = [parse({"name": "careful", "match": {"states": ["failed"]}, "guards": {"approval": True},
                  "steps": [{"step": "drain"}]})]
    eng = engine(store, sched, pbs)
    action = eng.submit(incident(f"{node_of(sched, 'j0')}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    assert StoreJournal(store).get(action.key).status == "awaiting_approval" and not drains(sched)
    assert eng.approve(action.key, "alice")
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.status == "done" and a.approved_by == "alice" and len(drains(sched)) == 1


def test_rate_limit_per_playbook(world):
    store, sched = world
    pbs = [parse({"name": "drainer", "match": {"states": ["failed"]}, "guards": {"rate_limit": {"max": 1, "per": "1h"}},
                  "steps": [{"step": "drain"}]})]
    eng = engine(store, sched, pbs)
    first = eng.submit(incident(f"{node_of(sched, 'j0')}/gpu1", state="failed"), sched.snapshot())
    second = eng.submit(incident(f"{node_of(sched, 'j1')}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    j = StoreJournal(store)
    assert j.get(first.key).status == "done"
    assert j.get(second.key).status == "held" and "rate limit" in j.get(second.key).note


def test_restart_after_a_drain_took_effect_does_not_drain_again(world):
    """The process died after the drain reached the scheduler but before 'done' was journaled."""
    store, sched = world
    node = node_of(sched, "j0")
    eng = engine(store, sched)
    action = eng.submit(incident(f"{node}/gpu1", state="failed"), sched.snapshot())
    a = StoreJournal(store).get(action.key)
    a.steps[0].status = "done"
    a.steps[1].status, a.steps[1].started_at, a.steps[1].attempts = "started", 1000.0, 1
    a.status = "running"
    StoreJournal(store).save(a)
    sched.drain(node, f"raswarden: {action.incident.id} failed: gpu_memory")  # it did happen
    engine(store, sched).run()  # a new process
    a = StoreJournal(store).get(action.key)
    assert a.status == "done" and a.steps[1].detail.get("verified_after_restart")
    assert len(drains(sched)) == 1 and a.steps[2].detail["requeued"] == ["j0"]


def test_resume_only_own_drains_after_the_clean_period_and_not_repeat_offenders(world):
    store, sched = world
    clock = Clock(1000.0)
    eng = engine(store, sched, clock=clock, repeat_offender=2)
    node = node_of(sched, "j0")
    failed = eng.submit(incident(f"{node}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    assert DRAIN in sched.snapshot().nodes[node].states
    healed = IncidentRef(id=failed.incident.id + "-ok", entity=node, kind="node", state="healthy",
                         category="gpu_memory", closed_at=1100.0)
    action = eng.submit(healed, sched.snapshot())
    assert action.playbook == "recovered-node"
    clock.t = 1200.0
    eng.run()
    assert StoreJournal(store).get(action.key).status == "running"  # clean period (30 min) not over
    clock.t = 1100.0 + 1801
    eng.run()
    assert StoreJournal(store).get(action.key).status == "done" and DRAIN not in sched.snapshot().nodes[node].states
    # an operator's drain is never resumed
    sched.operator_drain("sn01-b08", "RMA")
    other = eng.submit(IncidentRef(id="inc-x", entity="sn01-b08", kind="node", state="healthy",
                                   category="gpu_memory", closed_at=0.0), sched.snapshot())
    eng.run()
    assert StoreJournal(store).get(other.key).steps[0].status == "skipped"
    assert sched.snapshot().nodes["sn01-b08"].reason == "RMA"


def test_a_node_that_is_down_is_resumed_only_once_it_is_back(world):
    """Drained for a fault, then down for repair: quiet while down says nothing about the hardware."""
    store, sched = world
    clock = Clock(1000.0)
    eng = engine(store, sched, clock=clock)
    node = node_of(sched, "j0")
    eng.submit(incident(f"{node}/gpu1", state="failed"), sched.snapshot())
    eng.run()
    sched.repair(node, until=20_000.0)  # the technicians have it
    healed = IncidentRef(id="inc-healed", entity=node, kind="node", state="healthy", category="gpu_memory",
                         closed_at=1100.0)
    action = eng.submit(healed, sched.snapshot())
    clock.t = 1100.0 + 1801  # the clean period is over, but the node is down
    sched.step(clock.t)
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.status == "running" and a.steps[0].detail["note"] == "down: resumed once it is back"
    assert DRAIN in sched.snapshot().nodes[node].states
    clock.t = 20_001.0
    sched.step(clock.t)
    eng.run()
    assert StoreJournal(store).get(action.key).status == "done" and DRAIN not in sched.snapshot().nodes[node].states


def test_builtin_playbook_waits_for_the_jobs_comment(world):
    """The built-in waits until the job sets its comment to raswarden:checkpointed (the simulated launcher
    does so once the requested checkpoint is saved)."""
    store, sched = world
    clock = Clock()
    eng = engine(store, sched, clock=clock)
    node = node_of(sched, "j0")
    action = eng.submit(incident(f"{node}/gpu2"), sched.snapshot())
    eng.run()
    assert StoreJournal(store).get(action.key).steps[2].detail["waiting_for"] == ["j0"]
    sched.step(60.0 + 61)  # the checkpoint (60 s) is saved
    clock.t += 61
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.status == "done" and DRAIN in sched.snapshot().nodes[node].states
    assert sched.jobs["j0"].comment.startswith("raswarden:checkpointed ") and sched.jobs["j0"].restarts == 1
    steps = StoreJournal(store).get(action.key).steps
    # the measured checkpoint cost (daemon/operations/advice.py): signal to confirmation, as the playbook's passes saw
    # them
    assert steps[2].detail["confirmed_at"]["j0"] - steps[1].detail["signalled_at"] == 61.0


def test_an_earlier_confirmation_still_in_the_comment_is_not_this_checkpoints(world):
    """A job confirmed a checkpoint once (raswarden:checkpointed in its comment, as Slurm keeps it) and is signalled
    again for another incident: the old comment does not confirm the new checkpoint; a new one does."""
    store, sched = world
    clock = Clock()
    eng = engine(store, sched, clock=clock)
    node = node_of(sched, "j0")
    job = sched.jobs["j0"]
    sched.signal_job = lambda job_id, signal: None  # a launcher that leaves its comment as it was until it is done
    job.comment = "raswarden:checkpoint raswarden:checkpointed 1000"
    action = eng.submit(incident(f"{node}/gpu2"), sched.snapshot())
    eng.run()
    clock.t += 30
    eng.run()
    assert StoreJournal(store).get(action.key).steps[2].detail["waiting_for"] == ["j0"]
    job.comment = "raswarden:checkpoint raswarden:checkpointed 1090"
    clock.t += 30
    eng.run()
    a = StoreJournal(store).get(action.key)
    assert a.steps[2].status == "done" and a.steps[2].detail["confirmed_at"] == {"j0": clock.t}


def test_a_node_drained_once_is_not_a_repeat_offender(world):
    """The with-jobs playbook drains; an update of the same incident (its jobs have moved away) plans no second
    action, and the node is resumed after its clean period (it was counted three times once)."""
    store, sched = world
    clock = Clock(1000.0)
    eng = engine(store, sched, clock=clock, repeat_offender=2)
    node = node_of(sched, "j0")
    inc = incident(f"{node}/gpu2")
    eng.submit(inc, sched.snapshot())
    for _ in range(6):
        eng.run()
        sched.step(sched.now + 120)
        clock.t += 120
    assert DRAIN in sched.snapshot().nodes[node].states and not sched.snapshot().jobs_on(node)
    assert eng.submit(inc, sched.snapshot()) is None  # one action per incident and severity
    failed = eng.submit(IncidentRef(**{**inc.__dict__, "state": "failed"}), sched.snapshot())
    assert failed.playbook == "failed-node"  # an escalation gets its own
    eng.run()
    assert StoreJournal(store).get(failed.key).status == "done"
    assert StoreJournal(store).drains_of(node, 0.0) == 1
    healed = eng.submit(IncidentRef(id=inc.id + "-recovered", entity=node, kind="node", state="healthy",
                                    category="gpu_memory", closed_at=clock.t), sched.snapshot())
    clock.t += 1801
    eng.run()
    assert StoreJournal(store).get(healed.key).status == "done" and DRAIN not in sched.snapshot().nodes[node].states


def test_a_drain_reason_names_its_incident_by_the_whole_id():
    assert incident_in_reason("raswarden: inc-12 sub-healthy: gpu_thermal") == "inc-12"
    assert incident_in_reason("raswarden: inc-12 sub-healthy") != "inc-1"  # a prefix of the id is another incident
    assert incident_in_reason("raswarden:") is None
    assert incident_in_reason("maintenance by ops") is None
