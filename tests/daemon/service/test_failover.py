"""Failover (issue 27): two ``raswarden run`` processes on one store and one live supernode. SIGKILL the shard's
holder: the standby holds the shard once the dead holder's lease runs out, takes up the warm state the holder saved
(what its detectors had learned), and opens no incident a second time."""

from __future__ import annotations

import subprocess
import sys
import time

from sqlmodel import select

from daemon.store import IncidentRow, LeaseRow, Store
from tests.daemon.service.test_service import until

INTERVAL = 1.0
TTL = 3 * INTERVAL  # the default: three intervals


def run(config, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(config)], stdout=log,
                            stderr=subprocess.STDOUT)


def test_sigkill_the_holder_and_the_standby_takes_the_shard_over_warm(live, tmp_path):
    extra = "warm_state_interval_s = 1"
    a_conf, b_conf = live.config("a.toml", service_extra=extra), live.config("b.toml", service_extra=extra)
    store = Store(f"sqlite:///{live.root / 'state.db'}")
    a_log, b_log = open(tmp_path / "a.log", "w+"), open(tmp_path / "b.log", "w+")
    a = run(a_conf, a_log)
    b = None
    try:
        def gpu_bus_incident():
            with store.session() as s:
                return s.exec(select(IncidentRow).where(IncidentRow.category == "gpu_bus")).all()

        until(lambda: gpu_bus_incident() and store.warm_state("default") is not None, timeout=90)
        b = run(b_conf, b_log)
        until(lambda: "standing by" in (tmp_path / "b.log").read_text() or
              "raswarden running" in (tmp_path / "b.log").read_text(), timeout=60)
        time.sleep(2 * INTERVAL)  # b tries the lease at least once while a holds it
        with store.session() as s:
            holder_a = s.get(LeaseRow, "shard:default").holder
        a.kill()
        killed = time.monotonic()
        a.wait(10)

        def b_holds():
            store.engine.dispose()  # a fresh read of the SQLite file
            with store.session() as s:
                row = s.get(LeaseRow, "shard:default")
            return row is not None and row.holder != holder_a and row.expires_at > time.time()

        until(b_holds, timeout=30, every=0.1)
        took = time.monotonic() - killed
        print(f"\nthe standby held the shard {took:.1f} s after the holder's SIGKILL (lease {TTL:.0f} s)")
        assert took <= TTL + INTERVAL + 1.0  # the lease runs out, then the standby's next cycle takes it
        until(lambda: "warm state of" in (tmp_path / "b.log").read_text(), timeout=20)
        text = (tmp_path / "b.log").read_text()
        assert "taken up" in text and "not taken up" not in text, text[-2000:]
        time.sleep(3 * INTERVAL)
        fingerprints = [r.fingerprint for r in gpu_bus_incident()]
        assert len(fingerprints) == len(set(fingerprints))  # the standby updates a's incident, opens none again
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(20)
        store.close()
