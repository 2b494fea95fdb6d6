"""One blast-radius budget for the whole cluster (issue 27): raswardens sharing a store (the shards of a cluster on
one PostgreSQL; the service and ``raswarden playbook run`` on one SQLite file) that drain at the same moment never
take more nodes than the budget together. Without the lock they do: the test shows that too."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from types import SimpleNamespace

import pytest

from daemon.actions import StoreJournal
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
