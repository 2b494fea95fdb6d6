"""raswarden playbook validate | plan | list, and approve, as an operator runs them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from daemon.judgement.incidents import Incident
from daemon.store import Store
from detectors.schema import State

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "daemon", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_validate_plan_run_approve(tmp_path):
    ops = tmp_path / "playbooks"
    ops.mkdir()
    (ops / "careful.yaml").write_text("""
name: failed-node
priority: 10
match: {states: [failed]}
guards: {approval: true}
steps: [{step: notify}, {step: drain, reason: "{incident} failed, ticket pending"}]
""")
    cfg = tmp_path / "raswarden.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n[playbooks]\ndirs = ["{ops}"]\n')
    ok = run("playbook", "validate", "--config", str(cfg))
    assert ok.returncode == 0 and "failed-node" in ok.stdout and str(ops / "careful.yaml") in ok.stdout
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    now = time.time()
    store.record_tick([], [Incident(id="inc-cli01", fingerprint="sn01-b07|gpu_bus", entity="sn01-b07/gpu1",
                                    kind="accelerator", category="gpu_bus", severity=State.FAILED, opened_at=now,
                                    updated_at=now)])
    store.close()
    plan = run("playbook", "plan", "inc-cli01", "--config", str(cfg))
    assert plan.returncode == 0, plan.stderr
    assert "-> playbook failed-node, mode dry-run, needs approval" in plan.stdout  # no scheduler configured
    assert "2. drain sn01-b07 with reason 'raswarden: inc-cli01 failed, ticket pending'" in plan.stdout
    assert run("playbook", "run", "--config", str(cfg)).returncode == 0
    assert "awaiting_approval" in run("playbook", "list", "--config", str(cfg)).stdout
    approved = run("approve", "inc-cli01", "--by", "alice", "--config", str(cfg))
    assert approved.returncode == 0 and "approved inc-cli01:failed-node" in approved.stdout
    assert run("playbook", "run", "--config", str(cfg)).returncode == 0
    listed = run("playbook", "list", "--config", str(cfg)).stdout
    assert "inc-cli01:failed-node" in listed and "done" in listed and "drain=dry-run" in listed
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.yaml").write_text("name: x\nsteps: [{step: reboot}]\n")
    broken = run("playbook", "validate", "--dir", str(bad))
    assert broken.returncode == 2 and "x.yaml: x.steps[0].step: 'reboot' is not a step" in broken.stderr
