"""The Slurm adapter against a real Slurm 22.05 (munged, slurmctld, four slurmd on loopback)."""

from __future__ import annotations


import pytest

from playbooks.scheduler import DRAIN, IDLE, Scheduler, SchedulerError
from playbooks.slurm import SlurmScheduler


def test_snapshot_nodes_and_jobs_with_opt_in(slurm):
    s = SlurmScheduler(slurm.conf)
    assert isinstance(s, Scheduler)
    opted = slurm.submit()
    other = slurm.submit(comment="plain job")
    state = s.snapshot()
    assert sorted(state.nodes) == ["node1", "node2", "node3", "node4"]
    assert state.jobs[opted].state == "running" and state.jobs[opted].checkpoint_opt_in
    assert not state.jobs[other].checkpoint_opt_in
    assert state.jobs[opted].nodes == (slurm.job_node(opted),)
    assert state.jobs_on(slurm.job_node(opted))[0].id == opted
    idle = [n for n in state.nodes.values() if IDLE in n.states]
    assert len(idle) == 2 and all(n.available for n in idle)


def test_checkpoint_drain_requeue_restart_elsewhere(slurm):
    s = SlurmScheduler(slurm.conf)
    job = slurm.submit()
    node = slurm.job_node(job)
    s.signal_job(job, "USR1")
    slurm.wait(lambda: "step=" in slurm.log(job, "ckpt"), 10)
    s.drain(node, "raswarden: inc-test sub-healthy HBM")
    s.drain(node, "raswarden: inc-test sub-healthy HBM")  # idempotent
    info = s.snapshot().nodes[node]
    assert DRAIN in info.states and not info.available
    assert info.reason.startswith("raswarden: inc-test") and info.reason_set_by == "root"
    s.requeue(job)
    slurm.wait(lambda: "restart=1" in slurm.log(job), 60)  # restarts after cred_expire, elsewhere
    assert slurm.job_node(job) != node
    assert "resumed from step=" in slurm.log(job)
    s.resume(node)
    slurm.wait(lambda: slurm.node_state(node) == "idle", 15)
    s.resume(node)  # resuming a node in service is not an error


def test_requeue_of_a_job_that_is_gone_is_not_an_error(slurm):
    s = SlurmScheduler(slurm.conf)
    job = slurm.submit()
    slurm.run("scancel", job)
    slurm.wait(lambda: slurm.job_state(job) in ("", "COMPLETING", "CANCELLED"), 15)
    s.requeue(job)


@pytest.mark.parametrize("call", [
    lambda s: s.drain("node1; rm -rf /", "raswarden: x"),
    lambda s: s.drain("node1", "raswarden: two\nlines"),
    lambda s: s.resume("--all"),
    lambda s: s.requeue("12 13"),
    lambda s: s.signal_job("1", "KILL"),
])
def test_refuses_what_is_not_a_name_or_id(call):
    with pytest.raises(SchedulerError) as exc:
        call(SlurmScheduler("/nonexistent/slurm.conf"))
    assert not exc.value.retryable


def test_unreachable_controller_is_retryable(slurm, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(open(slurm.conf).read().replace("SlurmctldPort=26817", "SlurmctldPort=26999")
                    + "MessageTimeout=2\n")
    with pytest.raises(SchedulerError) as exc:
        SlurmScheduler(str(conf), timeout_s=20).drain("node1", "raswarden: x")
    assert exc.value.retryable, str(exc.value)


def test_operator_drain_and_resume_through_the_cli(slurm, tmp_path):
    import subprocess
    import sys

    from tests.playbooks.conftest import ROOT

    cfg = tmp_path / "raswarden.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n[scheduler]\ntype = "slurm"\n'
                   f'slurm_conf = "{slurm.conf}"\n')

    def run(*args):
        return subprocess.run([sys.executable, "-m", "daemon", *args, "--config", str(cfg)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    out = run("drain", "node3", "--reason", "fan noise", "--by", "alice")
    assert out.returncode == 0, out.stderr
    info = SlurmScheduler(slurm.conf).snapshot().nodes["node3"]
    assert DRAIN in info.states and info.reason == "raswarden: manual by alice: fan noise"
    assert run("resume", "node3", "--reason", "fans replaced").returncode == 0
    slurm.wait(lambda: slurm.node_state("node3") == "idle", 15)
    slurm.run("scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=RMA 123")
    refused = run("resume", "node4", "--reason", "looks fine")
    assert refused.returncode == 1 and "drained by root ('RMA 123')" in refused.stderr
    assert "drain" in slurm.node_state("node4")
