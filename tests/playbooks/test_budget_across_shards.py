"""One blast-radius budget for the whole cluster (issue 27): raswardens sharing a store (the shards of a cluster on
one PostgreSQL; the service and ``raswarden playbook run`` on one SQLite file) that drain at the same moment never
take more nodes than the budget together. Without the lock they do: the test shows that too. And as operators run
it: four shards' ``playbook run`` processes on one PostgreSQL drive a real Slurm at the same moment."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from types import SimpleNamespace

import pytest

from daemon.store.journal import StoreJournal
from daemon.store import Store
from lab.sim.cluster import SimScheduler
from playbooks.engine import Action, IncidentRef, StepState
from playbooks.guards import Guards
from playbooks.scheduler import DRAIN
from playbooks.steps.drain import Drain

NODES = ["n1", "n2", "n3", "n4"]


class SlowCluster(SimScheduler):
    """One simulated cluster both shards drive, whose drain takes as long as a round trip to a busy slurmctld: the
    time in which the other shard, unlocked, reads a snapshot that does not show this drain yet."""

    def drain(self, node: str, reason: str) -> None:
        time.sleep(0.3)
        super().drain(node, reason)


def race(url: str, locked: bool = True) -> tuple[list[str], list[dict]]:
    """Two shards, each with its own connection to the store, drain n1 and n2 at once under a budget of one node."""
    cluster = SlowCluster(NODES)
    start = threading.Barrier(2)
    details: list[dict] = []
    stores = [Store(url) for _ in range(2)]

    def shard(store: Store, node: str) -> None:
        journal = StoreJournal(store)
        if not locked:
            journal.budget_lock = nullcontext
        ctx = SimpleNamespace(scheduler=cluster, journal=journal, clock=time.time, rack_of=lambda n: None,
                              guards=Guards(max_drained_nodes=1, max_cluster_fraction=1.0))
        st = StepState("drain", {"reason": "{incident} {category}"}, 60.0, 0)
        action = Action(f"inc-{node}:failed-node", IncidentRef(f"inc-{node}", f"{node}/gpu0", "accelerator", "failed",
                                                                "gpu_bus"), "failed-node", "act", False, [st], 0.0)
        start.wait()
        Drain().execute(ctx, action, st, cluster.snapshot())
        details.append(st.detail)

    threads = [threading.Thread(target=shard, args=(store, node)) for store, node in zip(stores, ("n1", "n2"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for store in stores:
        store.close()
    return [n for n, i in cluster.snapshot().nodes.items() if DRAIN in i.states], details


def test_two_raswardens_on_one_sqlite_file_never_exceed_the_budget_together(tmp_path):
    drained, details = race(f"sqlite:///{tmp_path / 'state.db'}")
    assert len(drained) == 1, drained
    assert [d["held"] for d in details if "held" in d] == ["2 nodes would be unavailable (budget 1)"]
    unlocked, _ = race(f"sqlite:///{tmp_path / 'other.db'}", locked=False)
    assert sorted(unlocked) == ["n1", "n2"]  # the race the lock closes


@pytest.mark.postgres
def test_two_shards_on_one_postgresql_never_exceed_the_budget_together(pg_url):
    drained, details = race(pg_url)
    assert len(drained) == 1 and sum("held" in d for d in details) == 1, (drained, details)
    assert sorted(race(pg_url, locked=False)[0]) == ["n1", "n2"]


@pytest.mark.postgres
def test_a_shard_killed_holding_the_postgresql_lock_lets_go(pg_url):
    """The advisory lock is the holder's connection's: a management node that dies holding it loses it with its
    connection, and the other shards go on."""
    _dead_holder_lets_go(pg_url)


def test_the_lock_is_one_holder_at_a_time_and_a_dead_holder_lets_go(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    a, b = Store(url), Store(url)
    try:
        with a.cluster_lock("blast-radius"):
            with pytest.raises(TimeoutError, match="another raswarden holds the blast-radius lock"):
                with b.cluster_lock("blast-radius", timeout_s=0.3):
                    pass
            with b.cluster_lock("another", timeout_s=0.3):  # other names are other locks
                pass
        with b.cluster_lock("blast-radius", timeout_s=0.3):
            pass
    finally:
        a.close()
        b.close()
    # a holder killed while holding it (its process gone, its file descriptor closed by the kernel)
    _dead_holder_lets_go(url)


def _dead_holder_lets_go(url: str) -> None:
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", f"""
import time
from daemon.store import Store
with Store({url!r}).cluster_lock("blast-radius"):
    print("held", flush=True)
    time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        c = Store(url)
        with pytest.raises(TimeoutError):
            with c.cluster_lock("blast-radius", timeout_s=0.3):
                pass
        holder.kill()
        holder.wait(10)
        with c.cluster_lock("blast-radius", timeout_s=5):
            pass
        c.close()
    finally:
        holder.kill()


def fresh_database(name: str) -> str:
    """A database of its own on the test PostgreSQL server (not the shared one other tests empty): its URL."""
    import os

    from sqlalchemy import create_engine, text

    from tests.conftest import require

    url = os.environ.get("RASWARDEN_TEST_PG_URL", "")
    require(bool(url), "no PostgreSQL server: run the suite through scripts/test.sh (as root)")
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return url.rsplit("/", 1)[0] + f"/{name}"


@pytest.mark.postgres
def test_four_shard_processes_on_postgresql_and_a_real_slurm_drain_no_more_than_the_budget(slurm, tmp_path):
    """Four ``raswarden playbook run`` processes, one per shard of one node each, on one PostgreSQL, each with a failed
    GPU on its node at the same moment, under a cluster budget of one node: slurmctld drains exactly one node once;
    the other three actions are held by the budget, each saying so."""
    import signal
    import sys

    from daemon.judgement.incidents import Incident
    from detectors.schema import State
    from tests.conftest import spawn, wait_stopped
    from tests.playbooks.conftest import LAB_DIR, ROOT

    url = fresh_database("raswarden_budget")
    nodes = [f"node{i}" for i in range(1, 5)]
    store = Store(url)
    now = time.time()
    store.record_tick([], [Incident(id=f"inc-{n}", fingerprint=f"{n}/gpu0|gpu_bus", entity=f"{n}/gpu0",
                                    kind="accelerator", category="gpu_bus", severity=State.FAILED, opened_at=now,
                                    updated_at=now, evidence=["Xid 79: GPU has fallen off the bus"]) for n in nodes])
    shards = "".join(f'[shards.s{i}]\nnodes = ["{n}"]\n' for i, n in enumerate(nodes, 1))
    log_before = (LAB_DIR / "log" / "slurmctld.log").read_text()
    procs = []
    for i in range(1, 5):
        config = tmp_path / f"s{i}.toml"
        config.write_text(f'[store]\nurl = "{url}"\n[service]\nshard = "s{i}"\n{shards}'
                          f'[playbooks]\nmode = "act"\nmax_drained_nodes = 1\nmax_cluster_fraction = 1.0\n'
                          f'max_rack_fraction = 1.0\n[scheduler]\ntype = "slurm"\nslurm_conf = "{slurm.conf}"\n')
        # -v: a slow stop's log names the job it waited for and for how long
        procs.append(spawn([sys.executable, "-m", "daemon", "-v", "playbook", "run", "--follow", "--interval", "0.3",
                            "--config", str(config)], tmp_path / f"s{i}.log", cwd=ROOT))
    journal = StoreJournal(store)

    def settled() -> bool:  # every shard's action drained its node or is held by the budget
        actions = journal.actions()
        return len(actions) == 4 and all(a.status in ("done", "held") for a in actions)

    deadline = time.monotonic() + 60
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.25)
    time.sleep(1.0)  # a few passes more: a held action stays held, nothing is drained again
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for i, proc in enumerate(procs, 1):
        wait_stopped(proc, tmp_path / f"s{i}.log", 30, f"shard s{i}")
    # what each said beside its passes' counts (warnings, errors, the stop)
    errors = ["\n".join(line for line in (tmp_path / f"s{i}.log").read_text().splitlines()
                        if not line.startswith("{") and "apscheduler" not in line)[-1500:] for i in range(1, 5)]
    actions = journal.actions()
    store.close()
    if not settled():  # in full (an assertion's message is cut short)
        steps = [(a.incident.id, a.status, [(st.type, st.status, st.detail) for st in a.steps]) for a in actions]
        pytest.fail(f"not settled: {steps} {errors}")
    drains = {a.incident.id: st for a in actions for st in a.steps if st.type == "drain"}
    drained = [n for n in nodes if "drain" in slurm.node_state(n)]
    assert len(drained) == 1, (drained, {k: (v.status, v.detail) for k, v in drains.items()}, errors)
    assert sorted(a.status for a in actions) == ["done", "held", "held", "held"]
    assert sorted(st.detail.get("held", "") for st in drains.values()) == [""] + ["2 nodes would be unavailable "
                                                                                 "(budget 1)"] * 3
    log = (LAB_DIR / "log" / "slurmctld.log").read_text()[len(log_before):]
    assert sum(log.count(f"update_node: node {n} state set to DRAIN") for n in nodes) == 1, log[-2000:]
