"""Remediation: incidents from the store planned into playbook actions, once per incident state."""

from daemon.config import Config
from daemon.judgement.incidents import Incident
from daemon.operations.remediation import Remediation
from lab.sim.cluster import SimScheduler
from daemon.store import Store
from detectors.schema import State


def incident(severity: State, updated_at: float) -> Incident:
    return Incident("inc-1", "fp-1", "n1/gpu0", "accelerator", "gpu_memory", severity, 100.0, updated_at)


def states(rem: Remediation) -> list[str]:
    return [a.incident.state for a in rem.journal.actions()]


def test_each_state_of_an_incident_is_planned_once_even_at_the_cursors_own_time(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    rem = Remediation.from_config(Config(), store, SimScheduler(["n1", "n2"]), clock=lambda: 100.0)
    store.record_tick([], [incident(State.SUBHEALTHY, 100.0)], now=100.0)
    assert rem.sync() == 1
    assert rem.sync() == 0  # nothing changed: nothing planned, nothing read but the cursor
    rem.engine.run()  # the sub-healthy action (an idle node: drained) runs to its end
    # Escalated by a later transaction with the same timestamp: the inclusive cursor still sees it.
    store.record_tick([], [incident(State.FAILED, 100.0)], now=100.0)
    assert rem.sync() == 1
    assert rem.sync() == 0
    assert states(rem) == ["subhealthy", "failed"]
    store.close()


def test_an_escalation_while_an_action_is_open_is_planned_when_it_ends_even_after_a_restart(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    sched = SimScheduler(["n1", "n2"])
    rem = Remediation.from_config(Config(), store, sched, clock=lambda: 100.0)
    store.record_tick([], [incident(State.SUBHEALTHY, 100.0)], now=100.0)
    assert rem.sync() == 1
    store.record_tick([], [incident(State.FAILED, 130.0)], now=130.0)
    assert rem.sync() == 0  # the sub-healthy action has not run yet: one action at a time
    other = Incident("inc-2", "fp-2", "n2/gpu1", "accelerator", "gpu_thermal", State.SUSPECT, 145.0, 145.0)
    store.record_tick([], [other], now=145.0)  # the cursor moves past the escalation
    assert rem.sync() == 0
    rem = Remediation.from_config(Config(), store, sched, clock=lambda: 160.0)  # the daemon restarts meanwhile
    assert rem.sync() == 0 and states(rem) == ["subhealthy"]
    rem.engine.run()
    assert rem.sync() == 1  # no incident changed, but the deferred escalation is planned now
    assert states(rem) == ["subhealthy", "failed"]
    store.close()


def test_a_pass_is_settled_only_when_nothing_is_under_way(tmp_path):
    """An open action or an incident waiting for one to end is work time alone moves on: not settled."""
    store = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    sched = SimScheduler(["n1", "n2"])
    rem = Remediation.from_config(Config(), store, sched, clock=lambda: 100.0)
    rem.step()
    assert rem.settled  # nothing happened yet
    store.record_tick([], [incident(State.SUBHEALTHY, 100.0)], now=100.0)
    rem.sync()
    store.record_tick([], [incident(State.FAILED, 130.0)], now=130.0)
    rem.step()  # the sub-healthy action runs; the escalation waits for it
    assert not rem.settled
    for _ in range(10):
        rem.step()
        if rem.settled:
            break
    assert rem.settled and states(rem) == ["subhealthy", "failed"]
    store.close()


def test_without_a_scheduler_it_decides_and_records_and_leaves_the_config_as_it_was(tmp_path):
    cfg = Config()
    assert cfg.guards.mode == "act"
    rem = Remediation.from_config(cfg, Store(f"sqlite:///{tmp_path}/s.db"), None, clock=lambda: 100.0)
    assert rem.engine.guards.mode == "dry-run" and rem.validator.guards.mode == "dry-run"
    assert cfg.guards.mode == "act"  # the caller's config (a reload compares it) is not written into
