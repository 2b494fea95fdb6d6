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
from tests.playbooks.conftest import LAB_DIR, slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)
from tests.playbooks.test_crash_slurm import follow, lab_config, run_once

FAULTS = ["validate:reserved", "validate:resumed", "validate:submitted", "validate:moved", "validate:released"]


def test_sigkill_at_every_step_of_a_validation_then_restart(slurm, tmp_path):  # noqa: F811
    db = tmp_path / "state.db"
    config = lab_config(tmp_path / "raswarden.toml", slurm.conf, f"""[repairs]
validation_command = "sleep 2; echo diag PASS"
output_dir = "{LAB_DIR / 'jobs'}"
""")
    ctld_log = LAB_DIR / "log" / "slurmctld.log"
    ctld_from = ctld_log.stat().st_size
    store = Store(f"sqlite:///{db}")
    now = time.time()
    store.record_tick([], [Incident("inc-val01", "fp-val01", "node4/gpu1", "accelerator", "gpu_memory", State.FAILED,
                                    now, now, evidence=["gpu1 row remap failure"])], now=now)
    book = RepairBook(store)
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


RESET_FAULTS = ["reset:reserved", "reset:resumed", "reset:submitted", "reset:moved", "reset:repaired"]


def test_sigkill_at_every_step_of_an_automatic_reset_then_restart(slurm, tmp_path):  # noqa: F811
    """The GPU reset and the validation after it, killed at each boundary: one reset job, one validation job, one
    reservation, the order through each of its states once, no technician."""
    db = tmp_path / "state.db"
    config = lab_config(tmp_path / "raswarden.toml", slurm.conf, f"""[repairs]
validation_command = "echo diag PASS"
reset_command = "sleep 1; echo reset {{gpus}}"
output_dir = "{LAB_DIR / 'jobs'}"
""")
    ctld_log = LAB_DIR / "log" / "slurmctld.log"
    ctld_from = ctld_log.stat().st_size
    store = Store(f"sqlite:///{db}")
    now = time.time()
    store.record_tick([], [Incident("inc-rst01", "fp-rst01", "node4/gpu1", "accelerator", "gpu_compute", State.FAILED,
                                    now, now, evidence=["Xid 46 on node4/gpu1: GPU timeout (NVIDIA: RESET_GPU; "
                                                        "repair: reset)"])], now=now)
    book = RepairBook(store)
    killed = [(fault, run_once(config, fault, timeout=60)) for fault in RESET_FAULTS]
    proc = follow(config)
    try:
        slurm.wait(lambda: book.orders(None) and book.orders(None)[0].state == "closed", 90)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert all(rc == -signal.SIGKILL for _, rc in killed), killed  # each fault point was reached
    (o,) = book.orders(None)
    assert [(h["to"], h["by"]) for h in o.history] == [(s, "raswarden") for s in (
        "open", "in_progress", "repaired", "validating", "closed")]
    jobs = slurm.run("scontrol", "show", "job", "-o")
    assert jobs.count("JobName=raswarden-reset-node4") == 1 and jobs.count("JobName=raswarden-validate-node4") == 1
    log = ctld_log.read_bytes()[ctld_from:].decode(errors="replace")
    assert log.count("Created reservation=raswarden-validate-node4") == 1
    assert log.count("delete_reservation complete for raswarden-validate-node4") == 1
    assert slurm.node_state("node4") == "idle"
    store.close()
