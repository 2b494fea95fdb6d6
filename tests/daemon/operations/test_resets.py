"""Automatic GPU resets on the simulated scheduler (the Slurm side is tests/playbooks/test_slurm_reset.py): a part
whose vendor asks for a reset is reset by raswarden in its reservation, then validated, and returns only on a pass;
a reset that fails, or whose validation fails, sends the order to a technician expecting a reboot, never a second
reset; nothing is reset in dry-run, under a tripped breaker, without a command, or beside hands-on work."""

from __future__ import annotations

import pytest

from daemon.config import Config, ConfigError, parse
from daemon.operations.remediation import Remediation
from daemon.store import Store
from lab.sim.cluster import SimScheduler
from playbooks.scheduler import DRAIN, MAINT
from tests.daemon.operations.test_repairs import TOPOLOGY, incident

XID_46 = "Xid 46 on n1/gpu0: GPU timeout (NVIDIA: RESET_GPU; repair: reset)"


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    yield s
    s.close()


def config(tmp_path, command: str = "nvidia-smi --gpu-reset -i {uuids} # {node} {gpus} {pci_bus_ids}") -> Config:
    cfg = Config()
    cfg.repairs.output_dir = str(tmp_path)
    cfg.repairs.reset_command = command
    return cfg


def drained(store: Store, tmp_path, *evidence: str, cfg: Config | None = None, mode: str = "act",
            sched: SimScheduler | None = None):
    """n1 drained for a failed GPU whose evidence is ``evidence`` (an Xid asking for a reset by default)."""
    cfg = cfg or config(tmp_path)
    cfg.guards.mode = mode
    sched = sched or SimScheduler(["n1", "n2", "n3"])
    rem = Remediation.from_config(cfg, store, sched, clock=lambda: sched.now, topology=TOPOLOGY)
    inc = incident("inc-1", "n1/gpu0", "gpu_bus")
    inc.evidence = list(evidence or [XID_46])
    store.record_tick([], [inc], now=100.0)
    rem.step()
    rem.step()
    return rem, sched


def events(sched: SimScheduler, node: str = "n1") -> list[str]:
    return [e[1] for e in sched.log if e[2].startswith(node)]


def states(sched: SimScheduler, node: str = "n1") -> frozenset[str]:
    return sched.snapshot().nodes[node].states


def test_a_reset_then_a_validation_returns_the_node_without_a_technician(store, tmp_path):
    rem, sched = drained(store, tmp_path)
    (order,) = rem.repairs.orders()
    assert order.expected == "reset" and order.state == "in_progress"  # reset on the pass that opened it
    entry = order.history[-1]
    assert entry["by"] == "raswarden" and entry["reset_job"] and entry["job_name"] == "raswarden-reset-n1-1"
    assert "nvidia-smi --gpu-reset -i GPU-0a # n1 0 00000000:3B:00.0" in entry["note"]
    assert MAINT in states(sched) and DRAIN not in states(sched)  # held for raswarden's job alone
    assert not rem.step()["resets_passed"] and not rem.settled  # the job runs: time alone moves it on
    sched.now += sched.validation_s
    moved = rem.step()
    assert moved["resets_passed"] == 1 and moved["validations_started"] == 1  # validated in the same pass
    assert rem.repairs.order(order.id).state == "validating"
    sched.now += sched.validation_s
    assert rem.step()["validations_passed"] == 1 and rem.settled
    o = rem.repairs.order(order.id)
    assert o.state == "closed" and [h["by"] for h in o.history] == ["raswarden"] * len(o.history)
    assert not states(sched) & {MAINT, DRAIN}
    assert events(sched) == ["drain", "reserve", "resume", "validate", "reserve", "validate", "release"]  # resumed once


def test_a_failed_reset_goes_to_a_technician_expecting_a_reboot_and_is_never_tried_again(store, tmp_path):
    rem, sched = drained(store, tmp_path)
    (order,) = rem.repairs.orders()
    sched.validation_fails["n1"] = 9
    (tmp_path / "raswarden-reset-n1-1.out").write_text("Unable to reset GPU 00000000:3B:00.0: In use by another "
                                                       "client\n")
    sched.now += sched.validation_s
    assert rem.step()["resets_failed"] == 1
    o = rem.repairs.order(order.id)
    assert o.state == "open" and o.expected == "reboot" and "NVIDIA's next step is a reboot" in o.expected_why
    assert "exit status 9" in o.evidence[-1] and "In use by another client" in o.evidence[-1]
    assert DRAIN in states(sched) and MAINT not in states(sched)
    assert "reset failed" in sched.snapshot().nodes["n1"].reason
    for _ in range(3):  # never reset again: the technician has it
        sched.now += sched.validation_s
        assert not rem.step()["resets_started"]
    assert events(sched).count("validate") == 1
    # the technician reboots it; the validation returns it
    del sched.validation_fails["n1"]
    rem.repairs.done(order.id, "tech", note="rebooted")
    rem.step()
    sched.now += sched.validation_s
    rem.step()
    assert rem.repairs.order(order.id).state == "closed"


def test_a_reset_whose_validation_fails_expects_a_reboot(store, tmp_path):
    rem, sched = drained(store, tmp_path)
    (order,) = rem.repairs.orders()
    sched.now += sched.validation_s
    rem.step()  # reset passed, validation started
    sched.validation_fails["n1"] = 1
    sched.now += sched.validation_s
    assert rem.step()["validations_failed"] == 1
    rem.step()
    o = rem.repairs.order(order.id)
    assert o.state == "open" and o.expected == "reboot" and "validation after raswarden's reset failed" in \
        o.expected_why
    assert DRAIN in states(sched)
    rem.step()
    assert rem.repairs.order(order.id).history == o.history  # escalated once, nothing more


@pytest.mark.parametrize("case", ["dry-run", "no command", "breaker", "hands-on work too", "not a reset"])
def test_nothing_is_reset_where_it_must_not_be(store, tmp_path, case):
    """Orders opened by a daemon without a reset command; then one with it (a restart), under each condition."""
    evidence = [XID_46]
    if case == "not a reset":
        evidence = ["Xid 79 on n1/gpu0: GPU has fallen off the bus (NVIDIA: RESTART_BM; repair: reboot)"]
    rem, sched = drained(store, tmp_path, *evidence, cfg=config(tmp_path, ""))
    if case == "hands-on work too":  # the node's cable needs a technician, who resets the GPU too
        store.record_tick([], [incident("inc-2", "n1/mlx5_0:1", "fabric_link", kind="port")], now=200.0)
        assert rem.repairs.open_for("inc-2")[0].expected == "reseat"
    assert rem.repairs.orders() and "validate" not in events(sched)
    cfg = config(tmp_path, "" if case == "no command" else "gpu-reset {gpus}")
    cfg.guards.mode = "dry-run" if case == "dry-run" else "act"
    again = Remediation.from_config(cfg, store, sched, clock=lambda: sched.now, topology=TOPOLOGY)
    if case == "breaker":
        again.journal.set_breaker("20 incidents in 10 minutes")
    for _ in range(3):
        sched.now += sched.validation_s
        assert not again.step().get("resets_started")
    assert "validate" not in events(sched) and DRAIN in states(sched)
    assert {o.state for o in again.repairs.orders()} == {"open"}


def test_a_command_the_topology_cannot_fill_leaves_the_reset_to_a_technician(store, tmp_path):
    cfg = config(tmp_path, "nvidia-smi -r -i {uuids}")
    sched = SimScheduler(["n1", "n2", "n3"])
    rem = Remediation.from_config(cfg, store, sched, clock=lambda: sched.now, topology=TOPOLOGY)
    inc = incident("inc-2", "n2/gpu1", "gpu_bus")  # the topology lists no UUID for n2's GPUs
    inc.evidence = [XID_46.replace("n1/gpu0", "n2/gpu1")]
    store.record_tick([], [inc], now=100.0)
    for _ in range(3):
        rem.step()
    (order,) = rem.repairs.orders()
    assert order.state == "open" and order.expected == "reset"
    assert "no automatic reset: repairs.reset_command needs {uuids}" in order.expected_why
    assert sum("reset_job" in h for h in order.history) == 1 and "validate" not in events(sched, "n2")


def test_the_reset_command_is_checked_when_the_configuration_is_read():
    with pytest.raises(ConfigError, match=r"reset_command: unknown host"):
        parse({"repairs": {"reset_command": "nvidia-smi -r -i {uuids} --on {host}"}})
    with pytest.raises(ConfigError, match=r"hold_s: must be at least"):
        parse({"repairs": {"reset_command": "x", "reset_timeout_s": 3 * 86400}})
    cfg = parse({"repairs": {"reset_command": "nvidia-smi -r -i {uuids}", "reset_timeout_s": 900}})
    assert cfg.repairs.reset_command == "nvidia-smi -r -i {uuids}" and cfg.repairs.reset_timeout_s == 900
