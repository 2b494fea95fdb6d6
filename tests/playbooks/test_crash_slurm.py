"""``raswarden playbook run`` killed with SIGKILL at every step boundary of a checkpoint-drain-requeue on a
real Slurm, then started again: the job checkpoints, its node is drained once, the job is requeued once and
restarts from its checkpoint on another node; nothing is repeated or forgotten."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from daemon.store.journal import StoreJournal
from daemon.judgement.incidents import Incident
from daemon.store.leases import Lease, shard_lease
from daemon.store import Store
from detectors.schema import State
from tests.conftest import spawn, wait_stopped
from tests.playbooks.conftest import LAB_DIR, ROOT

FAULTS = ["notify:done", "checkpoint:started", "checkpoint:executed", "checkpoint:done", "wait_checkpoint:started",
          "drain:started", "drain:executed", "drain:done", "requeue:started", "requeue:executed"]


def lab_config(path: Path, slurm_conf: str, extra: str = "") -> Path:
    """A config for ``playbook run`` against the Slurm lab, its state database beside it."""
    path.write_text(f"""
[store]
url = "sqlite:///{path.parent / 'state.db'}"
[playbooks]
max_cluster_fraction = 0.5
[scheduler]
type = "slurm"
slurm_conf = "{slurm_conf}"
{extra}""")
    return path


def follow(config: Path, fault: str | None = None) -> subprocess.Popen:
    """``raswarden playbook run --follow`` as its own process (``fault``: RASWARDEN_FAULT, where it kills itself),
    its output appended to ``follow.log`` beside the config."""
    env = {**os.environ, "RASWARDEN_FAULT": fault or ""}
    return spawn([sys.executable, "-m", "daemon", "playbook", "run", "--follow", "--interval", "0.3",
                  "--lease-ttl", "1", "--config", str(config)], config.parent / "follow.log", cwd=ROOT, env=env)


def run_once(config: Path, fault: str | None, timeout: float = 60.0) -> int:
    proc = follow(config, fault)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return -999


def follow_until_ended(config: Path, journal: StoreJournal, slurm) -> None:
    """``playbook run --follow`` until the journal's first action is done or failed (60 s at most)."""
    proc = follow(config)
    try:
        slurm.wait(lambda: journal.actions() and journal.actions()[0].status in ("done", "failed"), 60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def test_sigkill_at_every_step_boundary_then_restart(slurm, tmp_path):
    db = tmp_path / "state.db"
    config = lab_config(tmp_path / "raswarden.toml", slurm.conf)
    ctld_log = LAB_DIR / "log" / "slurmctld.log"
    ctld_from = ctld_log.stat().st_size  # this test's lines only: other tests of the session drain nodes too
    job = slurm.submit()
    node = slurm.job_node(job)
    store = Store(f"sqlite:///{db}")
    inc = Incident(id="inc-crash01", fingerprint=f"{node}/gpu3|gpu_memory", entity=f"{node}/gpu3", kind="accelerator",
                   category="gpu_memory", severity=State.SUBHEALTHY, opened_at=time.time(), updated_at=time.time(),
                   evidence=["gpu3 HBM correctable ECC 41/h (peers 0.2/h)"])
    store.record_tick([], [inc])
    journal = StoreJournal(store)
    killed = []
    for fault in FAULTS:
        rc = run_once(config, fault, timeout=30)
        killed.append((fault, rc))
        actions = journal.actions()
        if actions and actions[0].status == "done":
            break
    # and once more without a fault, until the action is done
    follow_until_ended(config, journal, slurm)
    assert all(rc == -signal.SIGKILL for _, rc in killed), killed  # each fault point was reached
    assert len(journal.actions()) == 1  # one action for the incident (a second, "idle node" one was planned once)
    action = journal.actions()[0]
    assert action.status == "done", [(s.type, s.status, s.detail) for s in action.steps]
    assert [s.type for s in action.steps] == ["notify", "checkpoint", "wait_checkpoint", "drain", "requeue"]
    assert action.steps[1].detail["signalled"] == [job]
    assert "step=" in slurm.log(job, "ckpt"), slurm.log(job)  # the job saved its checkpoint before the requeue
    log = ctld_log.read_bytes()[ctld_from:].decode(errors="replace")
    assert log.count(f"update_node: node {node} state set to DRAIN") == 1
    assert f"{node} reason set to: raswarden: inc-crash01" in log
    slurm.wait(lambda: "restart=1" in slurm.log(job), 60)
    assert "restart=2" not in slurm.log(job)  # requeued once
    assert "resumed from step=" in slurm.log(job) and slurm.job_node(job) != node
    store.close()


def test_a_stop_while_slurmctld_does_not_answer_is_prompt_and_loses_nothing(slurm, tmp_path):
    """SIGTERM while ``playbook run --follow`` waits on a slurmctld that does not answer (stopped with SIGSTOP):
    the process exits within seconds, not after the command timeouts (30 s each), says what it gave up, and fails
    no action; started again with slurmctld back, it drains the node once."""
    db = tmp_path / "state.db"
    config = lab_config(tmp_path / "raswarden.toml", slurm.conf)
    ctld = int((LAB_DIR / "run" / "slurmctld.pid").read_text())
    ctld_log = LAB_DIR / "log" / "slurmctld.log"
    ctld_from = ctld_log.stat().st_size
    store = Store(f"sqlite:///{db}")
    now = time.time()
    store.record_tick([], [Incident(id="inc-stop01", fingerprint="node2/gpu1|gpu_bus", entity="node2/gpu1",
                                    kind="accelerator", category="gpu_bus", severity=State.FAILED, opened_at=now,
                                    updated_at=now, evidence=["Xid 79: GPU has fallen off the bus"])])
    journal = StoreJournal(store)
    os.kill(ctld, signal.SIGSTOP)
    try:
        out = tmp_path / "stopped.log"
        proc = spawn([sys.executable, "-m", "daemon", "-v", "playbook", "run", "--follow", "--interval", "0.3",
                      "--config", str(config)], out, cwd=ROOT)
        lease = Lease(store, shard_lease("default"))
        slurm.wait(lambda: lease.current() is not None, 30)  # its first pass began (and waits on Slurm)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        wait_stopped(proc, out, 25, "raswarden playbook run")
        took = time.monotonic() - sent
    finally:
        os.kill(ctld, signal.SIGCONT)
    err = out.read_text()
    assert proc.returncode == 0, err[-2000:]
    assert took < 15, (took, err[-2000:])
    assert "stopping: waiting for job playbooks" in err and "raswarden is stopping" in err, err[-2000:]
    assert [a.status for a in journal.actions()] != ["failed"], err[-2000:]
    # started again, Slurm answering: the action goes on from where the stop left it
    follow_until_ended(config, journal, slurm)
    action = journal.actions()[0]
    assert action.status == "done", [(s.type, s.status, s.detail) for s in action.steps]
    assert "drain" in slurm.node_state("node2")
    log = ctld_log.read_bytes()[ctld_from:].decode(errors="replace")
    assert log.count("update_node: node node2 state set to DRAIN") == 1
    store.close()
