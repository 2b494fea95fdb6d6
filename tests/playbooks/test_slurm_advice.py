"""Checkpoint advice with a real Slurm (daemon/operations/advice.py; here for the Slurm lab of
tests/playbooks/conftest.py): a
training job reads its advice file as docs/playbooks.md shows, raswarden's checkpoint signal and the job's
confirmation give the job's measured checkpoint cost, and the advice the job reads next is built on it."""

from __future__ import annotations

import json
import time

import pytest

from daemon.store.journal import StoreJournal
from daemon.operations.advice import Advisor, write_files
from daemon.cli import main
from daemon.config import AdviceConfig
from daemon.store import Store
from playbooks.engine import Engine, IncidentRef
from playbooks.guards import Guards
from playbooks.model import parse
from playbooks.slurm import SlurmScheduler

# The job of docs/playbooks.md ("Checkpoint advice"): it declares its checkpoint cost beside its opt-in, reads its
# advice at every turn of its loop (a real one would at each checkpoint), checkpoints on USR1 (2 s here) and
# confirms with the time in its comment.
ADVISED_JOB = """#!/bin/bash
D={jobs}
A={advice}
checkpoint() {{
  sleep 2
  echo "saved $(date +%s)" >> $D/ckpt-$SLURM_JOB_ID
  scontrol update JobId=$SLURM_JOB_ID Comment="raswarden:checkpoint cost=3m raswarden:checkpointed $(date +%s)"
}}
trap checkpoint USR1
echo "start node=$SLURMD_NODENAME" >> $D/log-$SLURM_JOB_ID
last=""
for i in $(seq 1 600); do
  if [ -f $A/$SLURM_JOB_ID.json ]; then
    now=$(python3 -c 'import json, sys; a = json.load(open(sys.argv[1]))
print(round(a["interval_s"]), a["cost_from"], round(a["checkpoint_cost_s"]))' $A/$SLURM_JOB_ID.json)
    [ "$now" != "$last" ] && echo "advice $now" >> $D/log-$SLURM_JOB_ID && last="$now"
  fi
  sleep 1 & wait $!
done
"""


def test_a_job_reads_its_advice_and_its_confirmed_checkpoint_is_its_measured_cost(slurm, tmp_path, capsys):
    advice_dir = slurm.jobs / "advice"
    script = slurm.jobs / "advised.sh"
    script.write_text(ADVISED_JOB.format(jobs=slurm.jobs, advice=advice_dir))
    script.chmod(0o755)
    job = slurm.run("sbatch", "--parsable", "--time=10", "-N1", "--exclusive",
                    "--comment=raswarden:checkpoint cost=3m", "-o", str(slurm.jobs / "out-%j"), str(script)).strip()
    slurm.wait(lambda: "start" in slurm.log(job), 30)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    sched = SlurmScheduler(slurm.conf)
    advisor = Advisor(AdviceConfig(directory=str(advice_dir)))

    def advise() -> dict:
        advice = advisor.run(store, sched.snapshot(), time.time())
        write_files(advice_dir, advice)
        return advice

    first = advise()[job]
    assert (first.cost_from, first.checkpoint_cost_s) == ("declared", 180.0)
    slurm.wait(lambda: f"advice {round(first.as_dict()['interval_s'])} declared 180" in slurm.log(job), 60)

    # raswarden asks for a checkpoint (a playbook that checkpoints and waits, without the drain) ...
    ask = parse({"name": "checkpoint-only", "match": {"states": ["subhealthy"]},
                 "steps": [{"step": "checkpoint", "signal": "USR1"},
                           {"step": "wait_checkpoint", "confirm": "comment",
                            "comment_pattern": "raswarden:checkpointed", "timeout": "1m"}]})
    eng = Engine(sched, StoreJournal(store), [ask], Guards(max_drained_nodes=4, max_cluster_fraction=1.0))
    node = slurm.job_node(job)
    action = eng.submit(IncidentRef("inc-adv", f"{node}/gpu0", "accelerator", "subhealthy", "gpu_memory"),
                        sched.snapshot())
    deadline = time.time() + 60
    while StoreJournal(store).get(action.key).status != "done" and time.time() < deadline:
        eng.run()
        time.sleep(0.25)
    done = StoreJournal(store).get(action.key)
    assert done.status == "done" and done.steps[1].detail["waiting_for"] == [], done.steps[1].detail
    assert "saved" in slurm.log(job, "ckpt")

    # ... and the job's confirmation is its measured checkpoint cost, which the next advice is built on
    second = advise()[job]
    assert second.cost_from == "measured" and 1.5 <= second.checkpoint_cost_s <= 20.0, second
    assert second.interval_s < first.interval_s  # a cheaper checkpoint: checkpoint more often
    # the job rounds what its file says (to 0.1 s): 3.46 s is 3.5 in the file and 4 in the job's log, not 3
    shown = second.as_dict()
    slurm.wait(lambda: f"advice {round(shown['interval_s'])} measured {round(shown['checkpoint_cost_s'])}"
               in slurm.log(job), 60)
    store.close()
    # the operator's view: raswarden advise asks the same Slurm and reads the same journal
    cfg = tmp_path / "r.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n'
                   f'[scheduler]\ntype = "slurm"\nslurm_conf = "{slurm.conf}"\n')
    assert main(["advise", job, "--json", "--config", str(cfg)]) == 0
    shown = json.loads(capsys.readouterr().out)["jobs"][job]
    assert shown["cost_from"] == "measured" and shown["interval_s"] == pytest.approx(second.interval_s, rel=0.01)
