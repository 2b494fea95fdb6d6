"""Automatic reboots on a real Slurm (scripts/slurm-lab.sh, whose RebootProgram restarts a node's slurmd as a machine
just booted), through the daemon's own Remediation: a node whose Xid asks for a reboot is rebooted by
``scontrol reboot`` in raswarden's reservation, validated, and returns with no technician; a node that does not come
back is drained again and its order left for a technician expecting an inspection."""

from __future__ import annotations

import time

from daemon.judgement.incidents import Incident
from playbooks.slurm import SlurmScheduler
from tests.playbooks.conftest import LAB_DIR, require_reboots, slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)
from tests.playbooks.test_slurm_repair_loop import until
from tests.playbooks.test_slurm_reset import failed_gpu, lab_remediation


def xid_79(iid: str, gpu: str, at: float) -> Incident:
    return failed_gpu(iid, gpu, at, "gpu_bus",
                      f"Xid 79 on {gpu}: GPU has fallen off the bus (NVIDIA: RESTART_BM; repair: reboot)")


def test_reboot_validated_and_returned_or_left_for_a_technician(slurm, tmp_path):  # noqa: F811
    require_reboots()
    cfg, store, rem = lab_remediation(slurm.conf, tmp_path, reboot=True)
    booted = slurm.boot_time("node3")
    store.record_tick([], [xid_79("inc-b1", "node3/gpu1", time.time())], now=time.time())
    until(rem, lambda: bool(rem.repairs.orders(("closed",))) or any(o.state == "open" for o in rem.repairs.orders()))
    (order,) = rem.repairs.orders(None)
    assert order.state == "closed", order.history
    assert [(h["to"], h["by"]) for h in order.history] == [
        ("open", "raswarden"), ("in_progress", "raswarden"), ("repaired", "raswarden"), ("validating", "raswarden"),
        ("closed", "raswarden")]
    assert order.expected == "reboot" and "rebooted by raswarden" in order.history[2]["note"]
    slurm.wait(lambda: slurm.boot_time("node3") > booted, 30)  # it did reboot
    assert "gpu diag PASS" in (LAB_DIR / "jobs" / f"{order.history[3]['job_name']}.out").read_text()
    assert slurm.node_state("node3") == "idle"  # back in service, no technician
    assert "raswarden-validate-node3" not in slurm.run("scontrol", "show", "reservation")

    # a node that does not come back: drained again, its order in the queue for a technician
    (LAB_DIR / "reboot" / "node4.hang").touch()
    cfg.repairs.reboot_timeout_s = 6.0
    store.record_tick([], [xid_79("inc-b2", "node4/gpu0", time.time())], now=time.time())
    until(rem, lambda: any(o.node == "node4" and o.expected == "inspect" for o in rem.repairs.orders()))
    (failed,) = rem.repairs.orders()
    assert failed.state == "open" and "not back" in failed.evidence[-1]
    assert "NVIDIA's next step is support" in failed.expected_why
    assert "drain" in SlurmScheduler(slurm.conf).nodes()["node4"].states  # (sinfo's %T says "reboot^" first)
    assert "raswarden: reboot failed" in slurm.run("sinfo", "-h", "-n", "node4", "-o", "%E")
    assert "raswarden-validate-node4" not in slurm.run("scontrol", "show", "reservation")
    for other in ("node1", "node2", "node3"):
        assert slurm.node_state(other) == "idle"  # nothing else in the cluster touched
    store.close()


def test_a_slurm_without_a_reboot_program_leaves_the_reboot_to_a_technician(slurm, tmp_path):  # noqa: F811
    """Slurm refuses ``scontrol reboot`` without slurm.conf's RebootProgram (22.05's answer ends "Unspecified
    error"): the order goes to a technician at once, saying what to set; the node stays drained, not held."""
    conf = slurm.conf
    text = open(conf).read()
    without = "\n".join(line for line in text.splitlines() if not line.startswith("RebootProgram=")) + "\n"
    try:
        open(conf, "w").write(without)
        slurm.run("scontrol", "reconfigure")
        slurm.wait(lambda: "RebootProgram           = (null)" in slurm.run("scontrol", "show", "config"), 30)
        _, store, rem = lab_remediation(slurm.conf, tmp_path, reboot=True)
        store.record_tick([], [xid_79("inc-b3", "node2/gpu3", time.time())], now=time.time())
        until(rem, lambda: any("no automatic reboot" in o.expected_why for o in rem.repairs.orders()))
        (order,) = rem.repairs.orders()
        assert order.state == "open" and order.expected == "reboot"
        assert "RebootProgram set? docs/install.md §4" in order.expected_why
        assert "drain" in SlurmScheduler(slurm.conf).nodes()["node2"].states
        assert "raswarden-validate-node2" not in slurm.run("scontrol", "show", "reservation")
        store.close()
    finally:
        open(conf, "w").write(text)
        slurm.run("scontrol", "reconfigure")
        slurm.wait(lambda: "RebootProgram           = (null)" not in slurm.run("scontrol", "show", "config"), 30)
