"""One active daemon per shard: the lease on SQLite and PostgreSQL, and two real processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from daemon.store.leases import Lease
from daemon.store import Store
from tests.conftest import Clock

ROOT = Path(__file__).resolve().parents[3]


def check(store: Store) -> None:
    clock = Clock()
    a = Lease(store, "playbooks:r01", ttl_s=30, holder="mgmt01", clock=clock)
    b = Lease(store, "playbooks:r01", ttl_s=30, holder="mgmt02", clock=clock)
    assert a.acquire() and not b.acquire() and a.held() and not b.held()
    assert b.held_by_another() and not a.held_by_another()  # what a holder of another name reads of it
    clock.t += 20
    assert a.acquire() and not b.acquire()  # renewed
    clock.t += 31  # a went silent
    assert not b.held_by_another()  # run out: nobody's
    assert not a.held() and b.acquire() and not a.acquire()
    assert Lease(store, "playbooks:r02", holder="mgmt01", clock=clock).acquire()  # another shard
    b.release()
    assert a.acquire() and a.current().holder == "mgmt01"


def test_lease_on_sqlite(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    check(store)
    store.close()


@pytest.mark.postgres
def test_lease_on_postgresql(pg_url):
    store = Store(pg_url)
    from sqlalchemy import text

    with store.engine.begin() as c:
        c.execute(text("DELETE FROM lease"))
    check(store)
    store.close()


def test_a_second_runner_waits_and_takes_over_when_the_first_dies(tmp_path):
    cfg = tmp_path / "raswarden.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n')

    def start():
        return subprocess.Popen([sys.executable, "-m", "daemon", "-v", "playbook", "run", "--follow", "--interval",
                                 "0.3", "--lease-ttl", "2", "--config", str(cfg)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    store = Store(f"sqlite:///{tmp_path / 's.db'}")  # the schema first: the runners find it made
    first = start()
    until(lambda: holder_pid(store) == str(first.pid), "the first runner takes the lease")
    second = start()
    standby = []  # the second runner's log lines, read as they come
    reader = threading.Thread(target=lambda: standby.extend(iter(second.stderr.readline, "")), daemon=True)
    reader.start()
    until(lambda: any("standby:" in line for line in standby), "the second runner stands by")
    assert holder_pid(store) == str(first.pid)
    first.kill()
    first.wait(10)
    until(lambda: holder_pid(store) == str(second.pid), "the second runner takes over", timeout=20.0)
    second.kill()
    second.wait(10)
    store.close()


def holder_pid(store) -> str | None:
    """The pid of the lease's holder (``host:pid:...``), None while nobody holds it."""
    lease = Lease(store, "shard:default").current()
    return lease.holder.split(":")[1] if lease is not None and lease.holder else None


def until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)
