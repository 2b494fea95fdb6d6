"""Validation before return, on the simulated scheduler (the Slurm side is tests/playbooks/test_slurm_validation.py):
a repaired node is held, validated and returned only on a pass; a fail drains it again and reopens its orders; a
daemon killed between the scheduler's calls repeats none that took effect; the recovery playbook does not resume a
node whose repairs are under way."""

from __future__ import annotations

import pytest

from daemon.config import Config
from daemon.operations.remediation import Remediation
from daemon.store import Store
from detectors.schema import State
from lab.sim.cluster import SimScheduler
from playbooks.scheduler import DRAIN, MAINT
from tests.daemon.operations.test_repairs import TOPOLOGY, incident


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    yield s
    s.close()


CLOCK = [100.0]


def setup(store: Store, tmp_path) -> tuple[Remediation, SimScheduler]:
    CLOCK[0] = 100.0
    sched = SimScheduler(["n1", "n2", "n3"])
    rem = Remediation.from_config(config(tmp_path), store, sched, clock=lambda: CLOCK[0], topology=TOPOLOGY)
    store.record_tick([], [incident("inc-1", "n1/gpu0", "gpu_memory")], now=100.0)
    rem.step()
    rem.step()
    return rem, sched


def config(tmp_path) -> Config:
    cfg = Config()
    cfg.repairs.output_dir = str(tmp_path)
    return cfg


def states(sched: SimScheduler, node: str) -> frozenset[str]:
    return sched.snapshot().nodes[node].states


def test_a_repaired_node_returns_only_after_its_validation_passed(store, tmp_path):
    rem, sched = setup(store, tmp_path)
    (order,) = rem.repairs.orders()
    assert DRAIN in states(sched, "n1")
    rem.step()
    assert rem.repairs.order(order.id).state == "open"  # not repaired yet: nothing to validate
    assert rem.settled  # nothing moves until someone repairs it
    rem.repairs.done(order.id, "tech", new_serial="1799")
    moved = rem.step()
    assert moved["validations_started"] == 1 and moved["validations_running"] == 1
    assert not rem.settled  # the job runs until a pass reads it: time alone moves it on
    o = rem.repairs.order(order.id)
    assert o.state == "validating" and o.history[-1]["job"] and o.history[-1]["reservation"] == "raswarden-validate-n1"
    assert states(sched, "n1") >= {MAINT} and DRAIN not in states(sched, "n1")  # held for raswarden alone
    moved = rem.step()
    assert moved["validations_passed"] == 0 and moved["validations_running"] == 1  # still running
    assert not rem.settled  # time alone moves it on: the next pass reads the job
    sched.now += sched.validation_s
    assert rem.step()["validations_passed"] == 1
    assert rem.settled
    o = rem.repairs.order(order.id)
    assert o.state == "closed" and "validation passed" in o.history[-1]["note"]
    assert not states(sched, "n1") & {MAINT, DRAIN}  # back in service
    assert [e[1] for e in sched.log if e[2].startswith("n1")] == ["drain", "reserve", "resume", "validate", "release"]


def test_a_failed_validation_drains_the_node_again_and_reopens_its_orders(store, tmp_path):
    rem, sched = setup(store, tmp_path)
    (order,) = rem.repairs.orders()
    rem.repairs.done(order.id, "tech")
    sched.validation_fails["n1"] = 3
    rem.step()
    (tmp_path / "raswarden-validate-n1-1-1.out").write_text("diag: memory test FAIL on GPU 0\n")
    sched.now += sched.validation_s
    assert rem.step()["validations_failed"] == 1
    o = rem.repairs.order(order.id)
    assert o.state == "open" and "exit status 3" in o.evidence[-1] and "memory test FAIL" in o.evidence[-1]
    assert DRAIN in states(sched, "n1") and MAINT not in states(sched, "n1")
    assert "validation failed" in sched.snapshot().nodes["n1"].reason
    # repaired again: a second validation job (its own name), which passes
    del sched.validation_fails["n1"]
    rem.repairs.done(order.id, "tech", new_serial="1800")
    rem.step()
    assert rem.repairs.order(order.id).history[-1]["job_name"] == "raswarden-validate-n1-1-2"
    sched.now += sched.validation_s
    rem.step()
    assert rem.repairs.order(order.id).state == "closed" and not states(sched, "n1") & {MAINT, DRAIN}


def test_killed_between_the_schedulers_calls_repeats_none(store, tmp_path, monkeypatch):
    rem, sched = setup(store, tmp_path)
    (order,) = rem.repairs.orders()
    rem.repairs.done(order.id, "tech")
    moves = rem.repairs.move

    def crash(*args, **kwargs):
        raise SystemExit("killed after the job was submitted, before the order moved")

    monkeypatch.setattr(rem.repairs, "move", crash)
    with pytest.raises(SystemExit):
        rem.step()
    monkeypatch.setattr(rem.repairs, "move", moves)
    again = Remediation.from_config(config(tmp_path), store, sched, clock=lambda: 200.0, topology=TOPOLOGY)  # restarted
    again.step()
    assert [e[1] for e in sched.log].count("validate") == 1  # the job of that name was found, not submitted again
    assert again.repairs.order(order.id).state == "validating"


def test_the_recovery_playbook_leaves_a_node_under_repair_drained(store, tmp_path):
    rem, sched = setup(store, tmp_path)
    closed = incident("inc-1", "n1/gpu0", "gpu_memory")
    closed.severity, closed.closed_at, closed.updated_at = State.HEALTHY, 900.0, 900.0
    store.record_tick([], [closed], now=900.0)
    for t in range(900, 900 + 3 * 3600, 300):  # hours past the recovery playbook's clean period
        CLOCK[0] = sched.now = float(t)
        rem.step()
    assert DRAIN in states(sched, "n1") and "resume" not in [e[1] for e in sched.log]
    assert rem.repairs.orders()[0].state == "open"


def test_idle_nodes_are_checked_on_a_schedule_within_the_budget(store, tmp_path):
    """Checks every day, one at a time: an idle node is held (not drained) and checked; a pass releases it; a node
    whose check fails is drained and gets a repair order for a technician; a busy node is not checked; nothing is
    taken out while the circuit breaker is tripped; a dry-run daemon checks nothing."""
    cfg = config(tmp_path)
    cfg.repairs.idle_check_every_s = 86400.0
    cfg.guards.max_cluster_fraction = 0.5
    sched = SimScheduler(["n1", "n2", "n3"])
    from lab.sim.cluster import SimJob

    sched.submit(SimJob("j1", n_nodes=1, work_s=10 * 86400.0))
    sched.step(0.0)
    busy = sched.jobs["j1"].nodes[0]
    CLOCK[0] = 100.0
    rem = Remediation.from_config(cfg, store, sched, clock=lambda: CLOCK[0], topology=TOPOLOGY)
    out = rem.step()
    assert out["checks_started"] == 1
    first = next(e for e in sched.log if e[1] == "reserve")[2].split()[0]
    assert first != busy and MAINT in states(sched, first) and DRAIN not in states(sched, first)
    assert rem.step()["checks_started"] == 0  # one at a time (and one look a minute)
    sched.now += sched.validation_s
    CLOCK[0] += 120.0
    out = rem.step()
    assert out["checks_passed"] == 1 and out["checks_started"] == 1 and MAINT not in states(sched, first)
    second = [e for e in sched.log if e[1] == "reserve"][-1][2].split()[0]
    assert second not in (first, busy)
    sched.validation_fails[second] = 2
    sched.now += sched.validation_s
    CLOCK[0] += 120.0
    out = rem.step()
    assert out["checks_failed"] == 1 and DRAIN in states(sched, second)
    (order,) = rem.repairs.orders()
    assert (order.part, order.kind, order.expected) == (second, "node", "inspect")
    assert "idle check failed" in order.evidence[0] and "exit status 2" in order.evidence[0]
    CLOCK[0] += 120.0
    assert rem.step().get("checks_started", 0) == 0  # both idle nodes checked today; the busy one never
    assert busy not in [e[2].split()[0] for e in sched.log if e[1] == "reserve"]
    CLOCK[0] += 2 * 86400.0  # due again, but the circuit breaker is tripped: nothing taken out
    rem.journal.set_breaker("telemetry gone from 3 of 3 nodes")
    assert rem.step()["checks_started"] == 0
    rem.journal.set_breaker(None)
    CLOCK[0] += 120.0
    assert rem.step()["checks_started"] == 0  # the budget: with the failed node drained, 2 of 3 > 50 %
    cfg.guards.max_cluster_fraction = 0.7
    CLOCK[0] += 120.0
    assert rem.step()["checks_started"] == 1
    cfg.guards.mode = "dry-run"
    CLOCK[0] += 2 * 86400.0
    rem2 = Remediation.from_config(cfg, store, sched, clock=lambda: CLOCK[0], topology=TOPOLOGY)
    assert "checks_started" not in rem2.step()
