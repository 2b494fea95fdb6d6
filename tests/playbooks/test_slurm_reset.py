"""Automatic GPU resets on a real Slurm (scripts/slurm-lab.sh), through the daemon's own Remediation: a GPU whose
Xid asks for a reset is reset by a job in raswarden's reservation on its drained node, validated, and the node
returns with no technician; a reset that fails leaves the node drained and its order expecting a reboot."""

from __future__ import annotations

import time

from daemon.config import Config
from daemon.judgement.incidents import Incident
from daemon.operations.remediation import Remediation
from daemon.store import Store
from detectors.schema import State
from playbooks.slurm import SlurmScheduler
from tests.playbooks.conftest import LAB_DIR, slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)
from tests.playbooks.test_slurm_repair_loop import until


def failed_gpu(iid: str, gpu: str, at: float, category: str, line: str) -> Incident:
    """A failed GPU whose evidence is ``line``."""
    return Incident(iid, f"fp-{iid}", gpu, "accelerator", category, State.FAILED, at, at, evidence=[line])


def xid_46(iid: str, gpu: str, at: float) -> Incident:
    return failed_gpu(iid, gpu, at, "gpu_compute", f"Xid 46 on {gpu}: GPU timeout (NVIDIA: RESET_GPU; repair: reset)")


def lab_remediation(slurm_conf: str, tmp_path, **repairs) -> tuple[Config, Store, Remediation]:
    """The daemon's Remediation on the lab, validating with an echo; ``repairs``: [repairs] settings."""
    cfg = Config()
    cfg.guards.max_cluster_fraction = 0.5
    cfg.repairs.output_dir = str(LAB_DIR / "jobs")
    cfg.repairs.validation_command = "echo gpu diag PASS"
    for key, value in repairs.items():
        setattr(cfg.repairs, key, value)
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    return cfg, store, Remediation.from_config(cfg, store, SlurmScheduler(slurm_conf))


def test_reset_validated_and_returned_or_left_for_a_technician(slurm, tmp_path):  # noqa: F811
    cfg, store, rem = lab_remediation(slurm.conf, tmp_path, reset_command="echo reset gpu {gpus} of {node}")
    store.record_tick([], [xid_46("inc-r1", "node3/gpu2", time.time())], now=time.time())
    until(rem, lambda: bool(rem.repairs.orders(("closed",))) or any(o.state == "open" for o in rem.repairs.orders()))
    (order,) = rem.repairs.orders(None)
    assert order.state == "closed", order.history
    assert [(h["to"], h["by"]) for h in order.history] == [
        ("open", "raswarden"), ("in_progress", "raswarden"), ("repaired", "raswarden"), ("validating", "raswarden"),
        ("closed", "raswarden")]
    reset_job = order.history[1]["job_name"]
    assert "reset gpu 2 of node3" in (LAB_DIR / "jobs" / f"{reset_job}.out").read_text()
    assert "gpu diag PASS" in (LAB_DIR / "jobs" / f"{order.history[3]['job_name']}.out").read_text()
    assert slurm.node_state("node3") == "idle"  # back in service, no technician
    assert "raswarden-validate-node3" not in slurm.run("scontrol", "show", "reservation")

    # a reset that fails: drained again, the order in the queue for a technician, expecting a reboot
    cfg.repairs.reset_command = "echo Unable to reset GPU {gpus}: in use; exit 7"
    store.record_tick([], [xid_46("inc-r2", "node4/gpu0", time.time())], now=time.time())
    until(rem, lambda: any(o.node == "node4" and o.expected == "reboot" for o in rem.repairs.orders()))
    (failed,) = rem.repairs.orders()
    assert failed.state == "open" and "exit status 7" in failed.evidence[-1]
    assert "Unable to reset GPU 0" in failed.evidence[-1]
    assert "drain" in slurm.node_state("node4")
    assert "reset failed" in slurm.run("sinfo", "-h", "-n", "node4", "-o", "%E")
    assert "raswarden-validate-node4" not in slurm.run("scontrol", "show", "reservation")
    for other in ("node1", "node2", "node3"):
        assert slurm.node_state(other) == "idle"  # nothing else in the cluster touched
    store.close()
