"""The repair loop on a real Slurm (scripts/slurm-lab.sh), through the daemon's own Remediation: a node drained for a
failed GPU gets a repair order; once a technician reports it done, the node is held in a maintenance reservation,
the validation job runs on it, and only a pass returns it; a failing validation drains it again and reopens the
order. The lab's other nodes are not touched."""

from __future__ import annotations

import time

from daemon.config import Config
from daemon.judgement.incidents import Incident
from daemon.operations.remediation import Remediation
from daemon.store import Store
from detectors.schema import State
from playbooks.slurm import SlurmScheduler
from tests.playbooks.conftest import LAB_DIR, slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)


def until(rem: Remediation, cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rem.step()
        if cond():
            return
        time.sleep(0.5)
    raise AssertionError("timed out")


def test_drained_repaired_validated_and_returned_or_sent_back(slurm, tmp_path):  # noqa: F811
    cfg = Config()
    cfg.guards.max_cluster_fraction = 0.5
    cfg.repairs.output_dir = str(LAB_DIR / "jobs")
    cfg.repairs.validation_command = "echo gpu diag PASS"
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    rem = Remediation.from_config(cfg, store, SlurmScheduler(slurm.conf))
    now = time.time()
    store.record_tick([], [Incident("inc-v1", "fp-v1", "node3/gpu2", "accelerator", "gpu_memory", State.FAILED, now,
                                    now, evidence=["gpu2 row remap failure"])], now=now)
    until(rem, lambda: bool(rem.repairs.orders()) and "drain" in slurm.node_state("node3"))
    (order,) = rem.repairs.orders()
    assert (order.part, order.expected, order.state) == ("node3/gpu2", "rma", "open")
    rem.step()
    assert "drain" in slurm.node_state("node3")  # open: nothing happens until a technician reports it done
    rem.repairs.start(order.id, "tech")
    rem.repairs.done(order.id, "tech", new_serial="1653222014801")
    until(rem, lambda: rem.repairs.order(order.id).state in ("closed", "open"))
    o = rem.repairs.order(order.id)
    assert o.state == "closed", o.history
    assert [h["to"] for h in o.history] == ["open", "in_progress", "repaired", "validating", "closed"]
    job_name = o.history[3]["job_name"]
    assert "gpu diag PASS" in (LAB_DIR / "jobs" / f"{job_name}.out").read_text()
    assert slurm.node_state("node3") == "idle"  # back in service
    assert "No reservations" in slurm.run("scontrol", "show", "reservation") or \
        "raswarden-validate-node3" not in slurm.run("scontrol", "show", "reservation")

    # the same GPU again, and this time its validation fails: drained again, the order back in the queue
    cfg.repairs.validation_command = "echo gpu diag FAIL; exit 4"
    later = time.time()
    store.record_tick([], [Incident("inc-v2", "fp-v2", "node3/gpu2", "accelerator", "gpu_memory", State.FAILED,
                                    later, later, evidence=["gpu2 DBE"])], now=later)
    until(rem, lambda: len(rem.repairs.orders()) == 1 and "drain" in slurm.node_state("node3"))
    (again,) = rem.repairs.orders()
    assert "repeat offender" in again.expected_why
    rem.repairs.done(again.id, "tech")
    until(rem, lambda: rem.repairs.order(again.id).state == "open"
          and any(h["to"] == "validating" for h in rem.repairs.order(again.id).history))
    a = rem.repairs.order(again.id)
    assert "exit status 4" in a.evidence[-1] and "gpu diag FAIL" in a.evidence[-1]
    assert "drain" in slurm.node_state("node3")
    assert "raswarden-validate-node3" not in slurm.run("scontrol", "show", "reservation")
    for other in ("node1", "node2", "node4"):
        assert slurm.node_state(other) == "idle"  # nothing else in the cluster touched
    store.close()
