"""Validating a repaired node on a real Slurm (scripts/slurm-lab.sh): a maintenance reservation holds it for
raswarden alone, the validation job runs on exactly that node inside it, its outcome is read, and releasing the
reservation lets the cluster's jobs back."""

from __future__ import annotations

import pytest

from playbooks.scheduler import SchedulerError, ValidationScheduler
from playbooks.slurm import SlurmScheduler
from tests.playbooks.conftest import LAB_DIR, slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)


def test_a_node_held_validated_and_released(slurm):  # noqa: F811
    s = SlurmScheduler(slurm.conf)
    assert isinstance(s, ValidationScheduler)
    s.drain("node2", "raswarden: repair order 7")
    s.reserve("node2", "raswarden-validate-7", 3600)
    s.reserve("node2", "raswarden-validate-7", 3600)  # again (a restart): the same reservation
    s.resume("node2")
    held = slurm.run("scontrol", "show", "reservation", "raswarden-validate-7")
    assert "Nodes=node2" in held and "MAINT" in held and "Users=root" in held
    other = slurm.run("sbatch", "--parsable", "-N1", "--nodelist=node2", "--time=1", "--output=/dev/null",
                      "--wrap=true").strip()
    out = LAB_DIR / "jobs" / "validate-7.out"
    job = s.submit_validation("node2", "raswarden-validate-7", "raswarden-validate-7-1", "echo diag ok; exit 0",
                              300, str(out))
    assert s.submit_validation("node2", "raswarden-validate-7", "raswarden-validate-7-1", "echo again", 300,
                               str(out)) == job  # known by name: not submitted twice
    slurm.wait(lambda: s.job_outcome(job).finished, 60)
    assert s.job_outcome(job).state == "passed" and "diag ok" in out.read_text()
    # a restart after the job ended (a short check, a slow restart): still that job, not a second one
    assert s.submit_validation("node2", "raswarden-validate-7", "raswarden-validate-7-1", "echo again", 300,
                               str(out)) == job
    assert slurm.job_state(other) == "PENDING"  # anyone else's job waits while raswarden holds the node
    failing = s.submit_validation("node2", "raswarden-validate-7", "raswarden-validate-7-2", "echo bad; exit 3",
                                  300, str(out))
    slurm.wait(lambda: s.job_outcome(failing).finished, 60)
    assert (s.job_outcome(failing).state, s.job_outcome(failing).exit_code) == ("failed", 3)
    s.release("raswarden-validate-7")
    s.release("raswarden-validate-7")  # gone already: fine
    slurm.wait(lambda: slurm.job_state(other) in ("RUNNING", "COMPLETED", ""), 60)  # the cluster's job runs now
    assert s.job_outcome("999999").state == "gone"
    with pytest.raises(SchedulerError, match="invalid"):
        s.reserve("node2", "bad name; rm -rf", 60)
