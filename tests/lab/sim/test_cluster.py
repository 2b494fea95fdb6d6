import pytest

from lab.sim.cluster import SimJob, SimScheduler
from playbooks.scheduler import DRAIN, Scheduler, SchedulerError

H = 3600.0


def cluster(n=4):
    s = SimScheduler([f"n{i}" for i in range(1, n + 1)])
    s.submit(SimJob("1", n_nodes=2, work_s=10 * H, checkpoint_interval_s=H, checkpoint_cost_s=60, restart_cost_s=300))
    s.step(0.0)
    return s


def run_until(s, t, dt=60.0):
    while s.now < t:
        s.step(min(s.now + dt, t))


def test_implements_the_protocol():
    assert isinstance(SimScheduler(["n1"]), Scheduler)


def test_failure_loses_work_since_the_checkpoint_and_requeues_with_restart_cost():
    s = cluster()
    job = s.jobs["1"]
    assert job.state == "running" and job.nodes == ("n1", "n2")
    run_until(s, 1.5 * H)
    s.fail_node("n1", repair_s=10 * H)
    lost = s.gpu_hours.lost_to_failures
    assert 16 * 0.45 < lost < 16 * 0.55  # ~30 min on 2 nodes x 8 GPUs since the last checkpoint
    assert job.state == "pending"
    s.step(s.now)
    assert job.state == "running" and "n1" not in job.nodes and job.busy_kind == "restart"
    run_until(s, 2 * H)
    assert s.gpu_hours.restarts == pytest.approx(16 * 300 / H, rel=0.01)


def test_checkpoint_signal_saves_work_before_a_requeue():
    s = cluster()
    run_until(s, 1.5 * H)
    s.signal_job("1", "USR1")
    run_until(s, 1.5 * H + 120)
    s.drain("n2", "raswarden: inc-1 test")
    s.requeue("1")
    assert s.gpu_hours.lost_to_failures < 16 * 200 / H  # only what ran after the checkpoint finished
    assert s.gpu_hours.checkpoints_requested == pytest.approx(16 * 60 / H)  # the signal's, not the hourly one
    assert s.gpu_hours.checkpoints == pytest.approx(2 * 16 * 60 / H)
    # the net loss counts the checkpoint raswarden asked for; the hourly one is the job's own schedule
    a = s.gpu_hours
    assert a.periodic_checkpoints == pytest.approx(16 * 60 / H)
    assert a.net_loss == pytest.approx(a.lost_to_failures + a.checkpoints_requested + a.restarts)
    assert a.net_loss_with_periodic_checkpoints == pytest.approx(a.net_loss + 16 * 60 / H)
    s.step(s.now)
    assert "n2" not in s.jobs["1"].nodes
    assert DRAIN in s.snapshot().nodes["n2"].states
    run_until(s, 2.5 * H)
    assert s.gpu_hours.idle_drained == pytest.approx(8 * (2.5 * H - s.log[-1][0]) / H, rel=0.02)


def test_accounting_adds_up_and_actions_are_idempotent():
    s = cluster()
    run_until(s, 3 * H)
    s.drain("n3", "raswarden: x")
    s.drain("n3", "raswarden: x")
    s.resume("n3")
    s.resume("n3")
    run_until(s, 4 * H)
    a = s.gpu_hours
    assert a.allocated == pytest.approx(a.productive + a.checkpoints + a.restarts + a.lost_to_failures, rel=1e-6)
    assert 0.9 < a.effective_training_ratio < 1.0
    assert [e[1] for e in s.log].count("drain") == 1 and [e[1] for e in s.log].count("resume") == 1


def test_bad_names_are_refused_without_retry():
    s = cluster()
    with pytest.raises(SchedulerError) as e:
        s.drain("n1; rm -rf /", "x")
    assert e.value.retryable is False
    with pytest.raises(SchedulerError):
        s.requeue("404")


def test_operator_drain_is_reported_as_theirs():
    s = cluster()
    s.operator_drain("n4", "bad DIMM", user="alice")
    node = s.snapshot().nodes["n4"]
    assert node.reason == "bad DIMM" and node.reason_set_by == "alice" and not node.available


def test_broken_hardware_crashes_every_job_placed_on_it_until_drained():
    s = cluster(n=2)  # the job needs both nodes: it can only go back onto the broken one
    job = s.jobs["1"]
    run_until(s, 1.5 * H)
    s.break_node("n2", until=10 * H)
    assert job.state == "pending" and s.broken("n2")
    run_until(s, 2 * H)
    crashes = [x for x in s.log if x[1] == "crash"]
    assert len(crashes) >= 20  # placed again every minute, crashed again every minute
    productive = s.gpu_hours.productive
    s.operator_drain("n2", "hardware failure", "operator")
    run_until(s, 3 * H)
    assert job.state == "pending" and s.gpu_hours.productive == pytest.approx(productive)
    assert s.gpu_hours.idle_drained == 0.0  # broken hardware is not idle capacity
    s.resume("n2")  # taken out, it went to repair: down until fixed, whoever resumes it
    run_until(s, 4 * H)
    assert job.state == "pending" and "n2" not in job.nodes
    run_until(s, 10.5 * H)
    assert job.state == "running" and job.nodes == ("n1", "n2")


def test_idle_on_a_drained_working_node_is_accounted():
    s = cluster(n=3)
    s.drain("n3", "raswarden: inc-1 test")
    run_until(s, H)
    assert s.gpu_hours.idle_drained == pytest.approx(8.0, rel=0.02)


def test_gpu_hours_add_up_to_the_allocation():
    s = cluster(n=4)
    s.submit(SimJob("2", n_nodes=2, work_s=3 * H, checkpoint_interval_s=H, checkpoint_cost_s=60, restart_cost_s=300))
    run_until(s, 1.2 * H)
    s.break_node("n1", until=2 * H)
    run_until(s, 2.5 * H)
    s.signal_job("2", "USR1")
    run_until(s, 5 * H)
    a = s.gpu_hours
    assert a.productive + a.lost_to_failures + a.checkpoints + a.restarts == pytest.approx(a.allocated, rel=0.01)
    assert a.slowed == 0.0


def test_a_slow_gpu_holds_back_the_whole_job():
    """A job on two nodes, one of them with a GPU at three quarters of its clock, for two hours: it makes 1.5 h
    of progress, and the other half hour of its 16 GPUs is accounted as held back."""
    s = cluster(n=4)
    s.jobs["1"].checkpoint_interval_s = 100 * H  # no checkpoints in the way
    s.nodes["n2"].speed = 0.75
    run_until(s, 2 * H)
    a = s.gpu_hours
    assert s.jobs["1"].done_s == pytest.approx(1.5 * H)
    assert a.productive == pytest.approx(16 * 1.5) and a.slowed == pytest.approx(16 * 0.5)
    assert a.productive + a.slowed == pytest.approx(a.allocated) and a.net_loss == pytest.approx(a.slowed)
