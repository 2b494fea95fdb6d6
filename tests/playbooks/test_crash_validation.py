"""``raswarden playbook run`` killed with SIGKILL at every step of a repaired node's validation on a real Slurm, then
started again: one reservation, one validation job, the node back in service once, the order closed through each of
its states once."""

from __future__ import annotations

import signal
import time

from daemon.judgement.incidents import Incident
from daemon.operations.repairs import RepairBook
from daemon.store import Store
from detectors.schema import State
from tests.playbooks.conftest import LAB_DIR, require_reboots, slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)
from tests.playbooks.test_crash_slurm import follow, lab_config, run_once

def _failed_gpu(tmp_path, slurm_conf: str, repairs: str, category: str, evidence: str):
    """A config for ``playbook run`` on the lab with ``repairs`` (lines of its [repairs] table), and node4's GPU 1
    failed for ``evidence``: the config, the store, its repair book, slurmctld's log and where this test's lines in
    it begin."""
    config = lab_config(tmp_path / "raswarden.toml", slurm_conf,
                        f"[repairs]\n{repairs}\noutput_dir = \"{LAB_DIR / 'jobs'}\"\n")
    ctld_log = LAB_DIR / "log" / "slurmctld.log"
    ctld_from = ctld_log.stat().st_size
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    now = time.time()
    iid = f"inc-{category}"
    store.record_tick([], [Incident(iid, f"fp-{iid}", "node4/gpu1", "accelerator", category, State.FAILED, now, now,
                                    evidence=[evidence])], now=now)
    return config, store, RepairBook(store), ctld_log, ctld_from


FAULTS = ["validate:reserved", "validate:resumed", "validate:submitted", "validate:moved", "validate:released"]


def test_sigkill_at_every_step_of_a_validation_then_restart(slurm, tmp_path):  # noqa: F811
    config, store, book, ctld_log, ctld_from = _failed_gpu(
        tmp_path, slurm.conf, 'validation_command = "sleep 2; echo diag PASS"', "gpu_memory", "gpu1 row remap failure")
    proc = follow(config)
    try:
        slurm.wait(lambda: bool(book.orders()) and "drain" in slurm.node_state("node4"), 60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    (order,) = book.orders()
    book.done(order.id, "tech", new_serial="1653222014801")
    killed = []
    for fault in FAULTS:
        killed.append((fault, run_once(config, fault, timeout=60)))
        if book.order(order.id).state == "closed":
            break
    proc = follow(config)
    try:
        slurm.wait(lambda: book.order(order.id).state == "closed", 90)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert all(rc == -signal.SIGKILL for _, rc in killed), killed  # each fault point was reached
    assert [f for f, _ in killed] == FAULTS
    o = book.order(order.id)
    assert [h["to"] for h in o.history] == ["open", "in_progress", "repaired", "validating", "closed"]
    jobs = slurm.run("scontrol", "show", "job", "-o")
    assert jobs.count("JobName=raswarden-validate-node4") == 1  # one validation job, whatever was killed
    log = ctld_log.read_bytes()[ctld_from:].decode(errors="replace")
    assert log.count("Created reservation=raswarden-validate-node4") == 1  # asked again after a kill: a duplicate
    assert log.count("delete_reservation complete for raswarden-validate-node4") == 1
    assert "raswarden-validate-node4" not in slurm.run("scontrol", "show", "reservation")
    assert slurm.node_state("node4") == "idle"
    store.close()


def _closed_after_kills(lab, config, book: RepairBook, faults: list[str], ctld_log, ctld_from: int) -> str:
    """``playbook run`` killed at each of ``faults`` in turn, then followed until node4's one order is closed: each
    fault point reached, the order through each of its states once and by raswarden alone, one reservation made
    and deleted; slurmctld's log lines of the test."""
    killed = [(fault, run_once(config, fault, timeout=60)) for fault in faults]
    proc = follow(config)
    try:
        lab.wait(lambda: book.orders(None) and book.orders(None)[0].state == "closed", 90)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert all(rc == -signal.SIGKILL for _, rc in killed), killed  # each fault point was reached
    (o,) = book.orders(None)
    assert [(h["to"], h["by"]) for h in o.history] == [(s, "raswarden") for s in (
        "open", "in_progress", "repaired", "validating", "closed")]
    log = ctld_log.read_bytes()[ctld_from:].decode(errors="replace")
    assert log.count("Created reservation=raswarden-validate-node4") == 1
    assert log.count("delete_reservation complete for raswarden-validate-node4") == 1
    return log


RESET_FAULTS = ["reset:reserved", "reset:resumed", "reset:submitted", "reset:moved", "reset:repaired"]


def test_sigkill_at_every_step_of_an_automatic_reset_then_restart(slurm, tmp_path):  # noqa: F811
    """The GPU reset and the validation after it, killed at each boundary: one reset job, one validation job, one
    reservation, the order through each of its states once, no technician."""
    config, store, book, ctld_log, ctld_from = _failed_gpu(
        tmp_path, slurm.conf, 'validation_command = "echo diag PASS"\nreset_command = "sleep 1; echo reset {gpus}"',
        "gpu_compute", "Xid 46 on node4/gpu1: GPU timeout (NVIDIA: RESET_GPU; repair: reset)")
    _closed_after_kills(slurm, config, book, RESET_FAULTS, ctld_log, ctld_from)
    jobs = slurm.run("scontrol", "show", "job", "-o")
    assert jobs.count("JobName=raswarden-reset-node4") == 1 and jobs.count("JobName=raswarden-validate-node4") == 1
    assert slurm.node_state("node4") == "idle"
    store.close()


REBOOT_FAULTS = ["reboot:reserved", "reboot:moved", "reboot:repaired"]


def test_sigkill_at_every_step_of_an_automatic_reboot_then_restart(slurm, tmp_path):  # noqa: F811
    """The node's reboot and the validation after it, killed after the reservation, after the orders moved (before
    Slurm was asked: the restart asks) and after the reboot was seen through: one reboot, one validation job, one
    reservation, the order through each of its states once, no technician."""
    require_reboots()
    booted = slurm.boot_time("node4")
    config, store, book, ctld_log, ctld_from = _failed_gpu(
        tmp_path, slurm.conf, 'validation_command = "echo diag PASS"\nreboot = true', "gpu_bus",
        "Xid 79 on node4/gpu1: GPU has fallen off the bus (NVIDIA: RESTART_BM; repair: reboot)")
    log = _closed_after_kills(slurm, config, book, REBOOT_FAULTS, ctld_log, ctld_from)
    assert log.count("reboot request queued for nodes node4") == 1  # asked once, by the run after the kill
    slurm.wait(lambda: slurm.boot_time("node4") > booted, 30)  # it did reboot
    assert slurm.node_state("node4") == "idle"
    store.close()
