"""The Slurm adapter against a real Slurm 22.05 (munged, slurmctld, four slurmd on loopback)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from playbooks.scheduler import DRAIN, IDLE, Scheduler, SchedulerError
from playbooks.slurm import SlurmScheduler
from sqlmodel import select

from tests.conftest import Clock


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
    assert state.jobs[opted].user == "root"  # squeue's user_name: who a drain touches
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
    out = run("resume", "node3", "--reason", "fans replaced", "--repaired")
    assert out.returncode == 0 and "parts replaced" in out.stdout, out.stderr
    slurm.wait(lambda: slurm.node_state("node3") == "idle", 15)
    from daemon.operations.operator import repaired_nodes
    from daemon.store import Store

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    assert repaired_nodes(store, 0)[0] == ["node3"]  # what the running daemon takes in on its next cycle
    store.close()
    slurm.run("scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=RMA 123")
    refused = run("resume", "node4", "--reason", "looks fine")
    assert refused.returncode == 1 and "drained by root ('RMA 123')" in refused.stderr
    assert "drain" in slurm.node_state("node4")


def test_failed_node_is_drained_and_its_job_requeued_and_guards_hold_on_slurm(slurm, tmp_path):
    """A node whose slurmd dies (a hard failure) goes DOWN; raswarden's failed-node playbook drains it (so it
    does not return to service by itself) and the job restarts elsewhere. Then the budget holds a second
    drain, and an approval-gated playbook waits for the operator."""
    import os
    import signal

    from daemon.store.journal import StoreJournal
    from daemon.store import Store
    from playbooks.engine import Engine, IncidentRef
    from playbooks.guards import Guards
    from playbooks.model import load, parse
    from tests.playbooks.conftest import LAB_DIR

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    s = SlurmScheduler(slurm.conf)
    job = slurm.submit()
    node = slurm.job_node(job)
    pid = int((LAB_DIR / "run" / f"slurmd-{node}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    slurm.wait(lambda: slurm.node_state(node).startswith("down"), 60)
    eng = Engine(s, StoreJournal(store), load(), Guards(max_drained_nodes=1, max_cluster_fraction=1.0))
    failed = eng.submit(IncidentRef("inc-down1", f"{node}/gpu0", "accelerator", "failed", "gpu_bus"), s.snapshot())
    eng.run()
    a = StoreJournal(store).get(failed.key)
    assert a.status == "done", [(x.type, x.status, x.detail) for x in a.steps]
    info = s.snapshot().nodes[node]
    assert DRAIN in info.states and info.reason.startswith("raswarden: inc-down1")
    slurm.wait(lambda: "restart=1" in slurm.log(job), 60)  # requeued (by Slurm's node failure or by us), once
    assert slurm.job_node(job) != node
    # budget: one node is already unavailable; a second drain is held
    other = next(n for n in ("node1", "node2", "node3", "node4") if n != node)
    held = eng.submit(IncidentRef("inc-b", other, "node", "failed", "gpu_bus"), s.snapshot())
    eng.run()
    a = StoreJournal(store).get(held.key)
    assert a.status == "held" and "budget 1" in a.steps[1].detail["held"]
    assert DRAIN not in s.snapshot().nodes[other].states
    # approval
    careful = Engine(s, StoreJournal(store), [parse({"name": "careful", "guards": {"approval": True},
                                                     "match": {"states": ["subhealthy"]},
                                                     "steps": [{"step": "drain"}]})],
                     Guards(max_drained_nodes=4, max_cluster_fraction=1.0))
    third = next(n for n in ("node1", "node2", "node3", "node4") if n not in (node, other))
    wait = careful.submit(IncidentRef("inc-c", third, "node", "subhealthy", "gpu_memory"), s.snapshot())
    careful.run()
    assert DRAIN not in s.snapshot().nodes[third].states
    assert careful.approve(wait.key, "alice")
    careful.run()
    assert DRAIN in s.snapshot().nodes[third].states
    # bring the dead slurmd back for the other tests
    import subprocess

    subprocess.run(["slurmd", "-N", node], env={**os.environ, "SLURM_CONF": slurm.conf}, check=True, timeout=30)
    store.close()


def test_resume_after_recovery_breaker_modes_and_rate_limit_on_slurm(slurm, tmp_path):
    """On a real Slurm: a node raswarden drained is resumed after its clean period only once the health check
    passes; a tripped breaker holds a drain until reset; dry-run (global) and shadow (one playbook) decide and
    leave Slurm untouched; a playbook's rate limit holds its second drain."""
    from daemon.store.journal import StoreJournal
    from daemon.store import Store
    from playbooks.engine import Engine, IncidentRef
    from playbooks.guards import Guards
    from playbooks.model import load, parse

    clock = Clock(10_000.0)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    s = SlurmScheduler(slurm.conf)
    check = tmp_path / "diag.sh"
    check.write_text("#!/bin/sh\ntest -f \"$(dirname \"$0\")/healthy-$1\"\n")
    check.chmod(0o755)
    resume = parse({"name": "recovered-node", "priority": 90, "match": {"kinds": ["node"], "states": ["healthy"]},
                    "steps": [{"step": "resume", "clean_for": "30m", "health_check": [str(check), "{node}"],
                               "retries": 0}]})
    eng = Engine(s, StoreJournal(store), [resume] + load(), Guards(max_drained_nodes=4, max_cluster_fraction=1.0),
                 clock=clock)
    node = "node3"
    failed = eng.submit(IncidentRef("inc-r1", node, "node", "failed", "gpu_bus", opened_at=clock.t), s.snapshot())
    eng.run()
    assert StoreJournal(store).get(failed.key).status == "done"
    assert s.snapshot().nodes[node].reason.startswith("raswarden: inc-r1")
    healed = eng.submit(IncidentRef("inc-r1-recovered", node, "node", "healthy", "gpu_bus",
                                    closed_at=clock.t + 60), s.snapshot())
    clock.t += 600
    eng.run()
    assert DRAIN in s.snapshot().nodes[node].states  # the clean period is not over
    clock.t += 1900
    eng.run()
    a = StoreJournal(store).get(healed.key)
    assert a.status == "failed" and DRAIN in s.snapshot().nodes[node].states  # the health check failed
    (tmp_path / f"healthy-{node}").touch()
    healed = eng.submit(IncidentRef("inc-r1-recovered-2", node, "node", "healthy", "gpu_bus",
                                    closed_at=clock.t), s.snapshot())
    clock.t += 1801
    eng.run()
    assert StoreJournal(store).get(healed.key).status == "done"
    assert DRAIN not in s.snapshot().nodes[node].states
    # the breaker: a burst of incidents trips it, a drain is held until an operator resets it
    eng.observe(new_incidents=25, nodes=4, stale_nodes=0)
    held = eng.submit(IncidentRef("inc-r2", node, "node", "failed", "gpu_bus"), s.snapshot())
    eng.run()
    a = StoreJournal(store).get(held.key)
    assert a.status == "held" and "circuit breaker" in a.note and DRAIN not in s.snapshot().nodes[node].states
    StoreJournal(store).set_breaker(None)
    eng.run()
    assert StoreJournal(store).get(held.key).status == "done" and DRAIN in s.snapshot().nodes[node].states
    s.resume(node)
    # dry-run: decided and journaled, Slurm untouched
    dry = Engine(s, StoreJournal(store), load(), Guards(mode="dry-run", max_drained_nodes=4,
                                                        max_cluster_fraction=1.0))
    planned = dry.submit(IncidentRef("inc-r3", "node4", "node", "failed", "gpu_bus"), s.snapshot())
    dry.run()
    assert StoreJournal(store).get(planned.key).status == "done"
    assert DRAIN not in s.snapshot().nodes["node4"].states
    # shadow, the same for one playbook: the plan recorded, Slurm untouched
    quiet = parse({"name": "quiet", "guards": {"mode": "shadow"}, "match": {"states": ["failed"]},
                   "steps": [{"step": "drain"}]})
    shadow = Engine(s, StoreJournal(store), [quiet], Guards(max_drained_nodes=4, max_cluster_fraction=1.0))
    recorded = shadow.submit(IncidentRef("inc-r4", "node4", "node", "failed", "gpu_bus"), s.snapshot())
    shadow.run()
    assert "shadow" in StoreJournal(store).get(recorded.key).note
    assert DRAIN not in s.snapshot().nodes["node4"].states
    # a playbook's rate limit: the second drain within the hour waits
    drainer = parse({"name": "drainer", "guards": {"rate_limit": {"max": 1, "per": "1h"}},
                     "match": {"states": ["failed"]}, "steps": [{"step": "drain"}]})
    limited = Engine(s, StoreJournal(store), [drainer], Guards(max_drained_nodes=4, max_cluster_fraction=1.0))
    first = limited.submit(IncidentRef("inc-r5", "node1", "node", "failed", "gpu_bus"), s.snapshot())
    second = limited.submit(IncidentRef("inc-r6", "node2", "node", "failed", "gpu_bus"), s.snapshot())
    limited.run()
    assert StoreJournal(store).get(first.key).status == "done" and DRAIN in s.snapshot().nodes["node1"].states
    a = StoreJournal(store).get(second.key)
    assert a.status == "held" and "rate limit" in a.note and DRAIN not in s.snapshot().nodes["node2"].states
    store.close()


def test_an_operators_drain_is_left_alone_on_slurm(slurm, tmp_path):
    """A node an operator drained on a real Slurm (``scontrol``, their own reason) keeps its drain, its reason and
    its running job whatever raswarden's incidents say: no signal, no drain over it, no requeue, no resume."""
    from daemon.store.journal import StoreJournal
    from daemon.store import Store
    from playbooks.engine import Engine, IncidentRef
    from playbooks.guards import Guards
    from playbooks.model import load

    clock = Clock(10_000.0)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    s = SlurmScheduler(slurm.conf)
    job = slurm.submit()  # opted in: the built-in playbook would signal it
    node = slurm.job_node(job)
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=RMA 123")
    eng = Engine(s, StoreJournal(store), load(), Guards(max_drained_nodes=4, max_cluster_fraction=1.0), clock=clock)
    acts = [eng.submit(IncidentRef(f"inc-op{i}", f"{node}/gpu0", "accelerator", state, "gpu_memory",
                                   opened_at=clock.t), s.snapshot())
            for i, state in enumerate(("subhealthy", "failed"))]
    eng.run()
    for act in acts:
        a = StoreJournal(store).get(act.key)
        acting = [x for x in a.steps if x.type != "notify"]
        assert acting and all(x.status == "skipped" for x in acting), [(x.type, x.status, x.detail) for x in a.steps]
        assert any("left alone" in x.detail.get("note", "") for x in acting)
    healed = eng.submit(IncidentRef("inc-op-recovered", node, "node", "healthy", "gpu_memory", closed_at=clock.t),
                        s.snapshot())
    clock.t += 7200
    eng.run()
    assert StoreJournal(store).get(healed.key).status in ("done", "skipped")
    info = s.snapshot().nodes[node]
    assert DRAIN in info.states and info.reason == "RMA 123"
    assert slurm.job_state(job) == "RUNNING" and slurm.job_node(job) == node
    assert not slurm.log(job, "ckpt") and "restart=1" not in slurm.log(job)  # never signalled, never requeued
    store.close()


def test_an_alert_names_the_jobs_and_users_on_its_node(slurm, tmp_path):
    """The alert of a GPU whose node runs a job names the job and its user (one squeue per sync); a node that runs
    none says so; without an answer from the scheduler the alert still goes."""
    from daemon.alerting.alert_pipeline import AlertingConfig, AlertPipeline
    from daemon.store import AlertRow, Store
    from tests.daemon.alerting.conftest import make_incident

    job = slurm.submit()
    busy = slurm.job_node(job)
    idle = next(n for n in ("node1", "node2", "node3", "node4") if n != busy)
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    store.record_tick([], [make_incident(f"{busy}/gpu1"), make_incident(f"{idle}/gpu2")])
    class Counted(SlurmScheduler):
        asked = 0

        def snapshot(self):
            Counted.asked += 1
            return super().snapshot()

    pipeline = AlertPipeline(store, AlertingConfig(), scheduler=Counted(slurm.conf))
    pipeline.sync(2000.0)
    pipeline.sync(2005.0)  # nothing changed: the newest incident comes back (the cursor is inclusive), unasked
    assert Counted.asked == 1
    with store.session() as s:
        where = {r.content["entity"]: dict(r.content["where"]) for r in s.exec(select(AlertRow)).all()}
    assert where[f"{busy}/gpu1"]["jobs"].startswith(f"{job} root")
    assert where[f"{idle}/gpu2"]["jobs"] == "none running"
    store.record_tick([], [make_incident(f"{busy}/gpu3", at=3000.0)])
    broken = SlurmScheduler(str(tmp_path / "no-slurm.conf"))
    assert AlertPipeline(store, AlertingConfig(), scheduler=broken).sync(4000.0) == 1  # it goes, without jobs


def test_a_failing_command_says_every_line_of_its_error(tmp_path):
    """The adapter's command runner on a real command that fails with two lines on stderr (coreutils' ls, standing
    for sbatch's "error: invalid partition specified" before its "Batch job submission failed"): both are said, in
    order, not only the last; a command with no output says its exit status."""
    s = SlurmScheduler("/nonexistent/slurm.conf", bin_dir=str(Path(shutil.which("ls")).parent))
    with pytest.raises(SchedulerError) as exc:
        s._run(["ls", str(tmp_path / "first-missing"), str(tmp_path / "second-missing")], "listing")
    text = str(exc.value)
    assert text.index("first-missing") < text.index("second-missing"), text
    assert not exc.value.retryable
    with pytest.raises(SchedulerError, match="exit status 1"):
        s._run(["false"], "nothing")
