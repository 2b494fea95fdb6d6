"""Automatic reboots on the simulated scheduler (the Slurm side is tests/playbooks/test_slurm_reboot.py): a node whose
vendor asks for a reboot is rebooted by the scheduler in raswarden's reservation, then validated, and returns only on
a pass; a node that does not come back, or whose validation after the reboot fails, goes to a technician expecting an
inspection, never a second reboot; nothing is rebooted in dry-run, under a tripped breaker, when the setting is off,
beside hands-on work or on a node someone else has taken."""

from __future__ import annotations

import dataclasses

import pytest

from daemon.config import Config, ConfigError, parse
from daemon.operations.reboots import REBOOT_AT
from daemon.operations.remediation import Remediation
from daemon.store import Store
from lab.sim.cluster import SimScheduler
from playbooks.scheduler import DRAIN, MAINT, REBOOT, SchedulerError
from tests.daemon.operations.test_repairs import TOPOLOGY, incident
from tests.daemon.operations.test_resets import drained as drained_for
from tests.daemon.operations.test_resets import events, states

XID_79 = "Xid 79 on n1/gpu0: GPU has fallen off the bus (NVIDIA: RESTART_BM; repair: reboot)"
XID_46 = "Xid 46 on n1/gpu0: GPU timeout (NVIDIA: RESET_GPU; repair: reset)"


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    yield s
    s.close()


def config(tmp_path, reboot: bool = True, reset_command: str = "") -> Config:
    cfg = Config()
    cfg.repairs.output_dir = str(tmp_path)
    cfg.repairs.reboot = reboot
    cfg.repairs.reset_command = reset_command
    return cfg


def drained(store: Store, tmp_path, *evidence: str, cfg: Config | None = None, sched: SimScheduler | None = None):
    """n1 drained for a failed GPU whose evidence is ``evidence`` (an Xid asking for a reboot by default)."""
    return drained_for(store, tmp_path, *(evidence or [XID_79]), cfg=cfg or config(tmp_path), sched=sched)


def test_a_reboot_then_a_validation_returns_the_node_without_a_technician(store, tmp_path):
    rem, sched = drained(store, tmp_path)
    (order,) = rem.repairs.orders()
    assert order.expected == "reboot" and order.state == "in_progress"  # rebooted on the pass that opened it
    entry = order.history[-1]
    assert entry["by"] == "raswarden" and entry[REBOOT_AT] == sched.now and entry["reservation"] == \
        "raswarden-validate-n1"
    assert {MAINT, DRAIN, REBOOT} <= states(sched)  # held and drained while it reboots
    sched.now += sched.reboot_s - 1
    assert rem.step()["reboots_running"] == 1 and not rem.settled  # not back yet
    sched.now += 1
    moved = rem.step()
    assert moved["reboots_passed"] == 1 and moved["validations_started"] == 1  # validated in the same pass
    o = rem.repairs.order(order.id)
    assert o.state == "validating" and "rebooted by raswarden (booted " in o.history[-2]["note"]
    sched.now += sched.validation_s
    assert rem.step()["validations_passed"] == 1 and rem.settled
    o = rem.repairs.order(order.id)
    assert o.state == "closed" and [h["by"] for h in o.history] == ["raswarden"] * len(o.history)
    assert not states(sched) & {MAINT, DRAIN, REBOOT}
    assert events(sched) == ["drain", "reserve", "reboot", "reserve", "resume", "validate", "release"]


def test_a_node_that_does_not_come_back_goes_to_a_technician_and_is_never_rebooted_again(store, tmp_path):
    sched = SimScheduler(["n1", "n2", "n3"])
    sched.reboot_hangs.add("n1")
    rem, sched = drained(store, tmp_path, sched=sched)
    (order,) = rem.repairs.orders()
    sched.now += rem.rebooter.cfg.reboot_timeout_s
    assert rem.step()["reboots_running"] == 1  # the timeout is not over yet
    sched.now += 1
    assert rem.step()["reboots_failed"] == 1
    o = rem.repairs.order(order.id)
    assert o.state == "open" and o.expected == "inspect" and "NVIDIA's next step is support" in o.expected_why
    assert "was not back 1801 s after the request" in o.evidence[-1]
    assert DRAIN in states(sched) and MAINT not in states(sched)
    assert "raswarden: reboot failed (repair order 1)" in sched.snapshot().nodes["n1"].reason
    for _ in range(3):
        sched.now += sched.reboot_s
        assert not rem.step()["reboots_started"]
    assert events(sched).count("reboot") == 1


def test_a_reboot_whose_validation_fails_expects_an_inspection(store, tmp_path):
    rem, sched = drained(store, tmp_path)
    (order,) = rem.repairs.orders()
    sched.validation_fails["n1"] = 1
    sched.now += sched.reboot_s
    rem.step()  # back, validation started
    sched.now += sched.validation_s
    assert rem.step()["validations_failed"] == 1
    rem.step()
    o = rem.repairs.order(order.id)
    assert o.state == "open" and o.expected == "inspect" and "validation after raswarden's reboot failed" in \
        o.expected_why
    rem.step()
    assert rem.repairs.order(order.id).history == o.history and events(sched).count("reboot") == 1


def test_a_reset_that_fails_is_followed_by_a_reboot_then_a_technician(store, tmp_path):
    """NVIDIA's order of steps: a reset, then a reboot, then support; each once."""
    rem, sched = drained(store, tmp_path, XID_46, cfg=config(tmp_path, reset_command="gpu-reset {gpus}"))
    (order,) = rem.repairs.orders()
    assert order.expected == "reset" and "reset_job" in order.history[-1]
    sched.validation_fails["n1"] = 3  # the reset job fails
    sched.now += sched.validation_s
    assert rem.step()["resets_failed"] == 1
    assert rem.step()["reboots_started"] == 1  # the order now expects a reboot: done next
    assert rem.repairs.order(order.id).expected == "reboot"
    sched.now += sched.reboot_s
    rem.step()
    sched.now += sched.validation_s
    rem.step()  # the validation after the reboot fails too (the fault is still there)
    rem.step()
    o = rem.repairs.order(order.id)
    assert o.state == "open" and o.expected == "inspect"
    for _ in range(3):
        sched.now += sched.validation_s
        step = rem.step()
        assert not step["resets_started"] and not step["reboots_started"]
    assert events(sched).count("reboot") == 1


def test_a_reboot_the_scheduler_did_not_take_is_asked_again(store, tmp_path):
    """The order is moved before the scheduler is asked: a request that did not reach it (a daemon killed between
    the two, slurmctld not answering) is asked again on the next pass, and the reboot's clock runs from the first."""
    class Refusing(SimScheduler):
        refusals = 2  # the pass that opens the order, and the next

        def reboot(self, node: str) -> None:
            if self.refusals:
                self.refusals -= 1
                raise SchedulerError("reboot n1: slurmctld not answering", retryable=True)
            super().reboot(node)

    rem, sched = drained(store, tmp_path, sched=Refusing(["n1", "n2", "n3"]))
    (order,) = rem.repairs.orders()
    assert order.state == "in_progress" and "reboot" not in events(sched)
    sched.now += 30
    assert rem.step()["reboots_running"] == 1 and events(sched).count("reboot") == 1
    sched.now += sched.reboot_s
    assert rem.step()["reboots_passed"] == 1


def test_a_boot_time_the_scheduler_does_not_show_for_a_moment_is_waited_for_not_asked_again(store, tmp_path):
    """slurmctld shows BootTime=None for a moment as a rebooted node registers: neither back nor a reason to ask
    for a second reboot."""
    class Blank(SimScheduler):
        blank = 0

        def snapshot(self):
            state = super().snapshot()
            if self.blank:
                self.blank -= 1
                state.nodes["n1"] = dataclasses.replace(state.nodes["n1"], boot_time=None)
            return state

    rem, sched = drained(store, tmp_path, sched=Blank(["n1", "n2", "n3"]))
    sched.now += sched.reboot_s
    sched.blank = 1
    assert rem.step()["reboots_running"] == 1 and events(sched).count("reboot") == 1
    assert rem.step()["reboots_passed"] == 1 and events(sched).count("reboot") == 1


class NoRebootProgram(SimScheduler):
    def reboot(self, node: str) -> None:
        raise SchedulerError("reboot n1: RebootProgram isn't defined", retryable=False)


class PartlyKubernetes(SimScheduler):
    def can_reboot(self, node: str) -> bool:
        return node != "n1"  # (a cluster of Slurm and Kubernetes parts: n1 is a Kubernetes node)


@pytest.mark.parametrize("sched", [NoRebootProgram, PartlyKubernetes])
def test_a_scheduler_that_cannot_reboot_leaves_the_reboot_to_a_technician_at_once(store, tmp_path, sched):
    rem, sched = drained(store, tmp_path, sched=sched(["n1", "n2", "n3"]))
    (order,) = rem.repairs.orders()
    assert order.state == "open" and order.expected == "reboot"
    assert "no automatic reboot: " in order.expected_why and ("RebootProgram isn't defined" in order.expected_why or
                                                              "cannot reboot it" in order.expected_why)
    assert MAINT not in states(sched) and DRAIN in states(sched)  # not held: the technician's
    for _ in range(3):
        sched.now += sched.reboot_s
        assert not rem.step()["reboots_started"]
    assert "reboot" not in events(sched) and rem.repairs.order(order.id).state == "open"


@pytest.mark.parametrize("case", ["off", "dry-run", "breaker", "hands-on work too", "not a reboot", "theirs"])
def test_nothing_is_rebooted_where_it_must_not_be(store, tmp_path, case):
    """Orders opened by a daemon that does not reboot; then one that does (a restart), under each condition."""
    evidence = [XID_46] if case == "not a reboot" else [XID_79]
    rem, sched = drained(store, tmp_path, *evidence, cfg=config(tmp_path, reboot=False))
    if case == "hands-on work too":  # the node's cable needs a technician, who reboots it too
        store.record_tick([], [incident("inc-2", "n1/mlx5_0:1", "fabric_link", kind="port")], now=200.0)
        assert rem.repairs.open_for("inc-2")[0].expected == "reseat"
    if case == "theirs":
        sched.operator_drain("n1", "bios update")
    cfg = config(tmp_path, reboot=case != "off")
    cfg.guards.mode = "dry-run" if case == "dry-run" else "act"
    again = Remediation.from_config(cfg, store, sched, clock=lambda: sched.now, topology=TOPOLOGY)
    if case == "breaker":
        again.journal.set_breaker("20 incidents in 10 minutes")
    for _ in range(3):
        sched.now += sched.reboot_s
        assert not again.step().get("reboots_started")
    assert "reboot" not in events(sched) and DRAIN in states(sched)
    assert {o.state for o in again.repairs.orders()} == {"open"}


def test_the_reboot_settings_are_checked_when_the_configuration_is_read():
    with pytest.raises(ConfigError, match=r"repairs.reboot: expected bool"):
        parse({"repairs": {"reboot": "yes"}})
    with pytest.raises(ConfigError, match=r"hold_s: must be at least"):
        parse({"repairs": {"reboot": True, "reboot_timeout_s": 3 * 86400}})
    cfg = parse({"repairs": {"reboot": True, "reboot_timeout_s": 900}})
    assert cfg.repairs.reboot and cfg.repairs.reboot_timeout_s == 900
