"""Failover (issue 27): two ``raswarden run`` processes on one store and one live supernode. SIGKILL the shard's
holder: the standby holds the shard once the dead holder's lease runs out, takes up the warm state the holder saved
(what its detectors had learned), opens no incident a second time, and reads the kernel journal on from where the
holder's last committed tick stopped (no line lost, none read twice). On a real Slurm, a holder killed between
slurmctld's drain and its own journal leaves the action to the standby, which drains nothing twice."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from sqlmodel import select

from daemon.store import IncidentRow, LeaseRow, Store
from tests.daemon.service.conftest import free_port, get
from tests.daemon.service.test_service import until
from tests.playbooks.conftest import LAB_DIR, slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)

INTERVAL = 1.0
TTL = 3 * INTERVAL  # the default: three intervals


def run(config, log, fault: str = "") -> subprocess.Popen:
    """``raswarden run`` as its own process (``fault``: RASWARDEN_FAULT, where it kills itself)."""
    return subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(config)], stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "RASWARDEN_FAULT": fault})


def stop(*procs: subprocess.Popen | None) -> None:
    for p in procs:
        if p is not None and p.poll() is None:
            p.terminate()
            p.wait(20)


def xids_read(port: int) -> float:
    """The Xid events a process has read from its kernel journal so far (its /metrics)."""
    _status, body = get(f"http://127.0.0.1:{port}/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith("raswarden_events_ingested_total{") and 'kind="xid"' in line)


def test_sigkill_the_holder_and_the_standby_takes_the_shard_over_warm(live, tmp_path):
    extra = "warm_state_interval_s = 1"
    b_port = free_port()
    a_conf, b_conf = live.config("a.toml", service_extra=extra), live.config("b.toml", service_extra=extra, port=b_port)
    journal = live.sim_dir / "kernel.journal.json"
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

        def a_committed_an_xid():  # so that a line read twice would show
            store.engine.dispose()
            return b"NVRM: Xid" in journal.read_bytes()[:store.collector_state("kernel").get("offset", 0)]

        until(a_committed_an_xid, timeout=60)
        a.kill()
        killed = time.monotonic()
        a.wait(10)
        store.engine.dispose()
        committed = store.collector_state("kernel")["offset"]  # where a's last committed tick left the journal
        live.stop()  # the journal stops growing: what follows is the test's own lines
        size = journal.stat().st_size
        last = json.loads(journal.read_text().splitlines()[-1])
        later = []
        for i, (slot, bus) in enumerate([(3, "1b"), (6, "cb")]):  # two Xid 48 lines the holder never saw
            later.append(json.dumps(last | {
                "__REALTIME_TIMESTAMP": str(int(last["__REALTIME_TIMESTAMP"]) + (i + 1) * 1_000_000),
                "_HOSTNAME": "sn01-b01", "PRIORITY": "3",
                "MESSAGE": f"NVRM: Xid (PCI:0000:{bus}:00): 48, pid=0, An uncorrectable double bit error (DBE) "
                           f"has been detected on GPU {slot}."}))
        with open(journal, "a") as fh:
            fh.write("".join(line + "\n" for line in later))
        expected = len(re.findall(r"NVRM: Xid", journal.read_bytes()[committed:].decode()))
        assert expected >= len(later) and committed <= size

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

        def caught_up():
            store.engine.dispose()
            return store.collector_state("kernel").get("offset") == journal.stat().st_size

        until(caught_up, timeout=30)
        # every Xid line after a's committed offset read once, none before it (those were a's)
        assert xids_read(b_port) == expected, (committed, size, expected)
    finally:
        stop(a, b)
        store.close()


def test_a_holder_killed_in_the_middle_of_a_drain_leaves_it_to_the_standby_once(live, slurm, tmp_path):  # noqa: F811
    """On a real Slurm: the holder dies by SIGKILL right after slurmctld drained the node, before its journal says so
    (RASWARDEN_FAULT=drain:executed). The standby takes the shard over and finishes the action: slurmctld drains the
    node once (its log), the job is requeued once, the incident is opened once."""
    import yaml

    from daemon.store.journal import StoreJournal

    topo = yaml.safe_load((live.sim_dir / "topology.yaml").read_text())
    for rack in topo["racks"]:
        for node in rack["nodes"]:  # the lab's Slurm knows the simulated blades as node1, node2
            node["scheduler_name"] = {"sn01-b01": "node1", "sn01-b02": "node2"}.get(node["name"], node["name"])
    (tmp_path / "topology.yaml").write_text(yaml.safe_dump(topo))
    extra = (f'[playbooks]\nmode = "act"\nmax_cluster_fraction = 0.5\nmax_rack_fraction = 1.0\n'
             f'[scheduler]\ntype = "slurm"\nslurm_conf = "{slurm.conf}"\n')

    def config(name: str) -> Path:
        path = live.config(name, extra=extra)
        path.write_text(path.read_text().replace(str(live.sim_dir / "topology.yaml"), str(tmp_path / "topology.yaml")))
        return path

    job = slurm.submit(exclude="node1,node3,node4")  # on node2, whose GPU 5 falls off the bus
    log_before = (LAB_DIR / "log" / "slurmctld.log").read_text()
    store = Store(f"sqlite:///{live.root / 'state.db'}")
    a_log, b_log = open(tmp_path / "a.log", "w+"), open(tmp_path / "b.log", "w+")
    a = run(config("a.toml"), a_log, fault="drain:executed")
    b = None
    try:
        assert a.wait(120) == -9, (tmp_path / "a.log").read_text()[-2000:]  # killed itself right after the drain
        assert "drain" in slurm.node_state("node2")
        b = run(config("b.toml"), b_log)
        journal = StoreJournal(store)

        def finished() -> bool:
            store.engine.dispose()  # a fresh read of the SQLite file
            return any(a.status == "done" for a in journal.actions())

        until(finished, timeout=90, every=0.5)
        time.sleep(3 * INTERVAL)  # b goes on: nothing more is done
        actions = journal.actions()
        failed = [a for a in actions if a.incident.state == "failed"]
        assert len(failed) == 1 and [s.type for s in failed[0].steps][-2:] == ["drain", "requeue"], \
            [(a.incident.id, a.status, [(s.type, s.status) for s in a.steps]) for a in actions]
        drain = next(st for st in failed[0].steps if st.type == "drain")
        assert drain.detail.get("verified_after_restart"), drain.detail  # b saw it drained and did not drain again
        log = (LAB_DIR / "log" / "slurmctld.log").read_text()[len(log_before):]
        assert log.count("update_node: node node2 state set to DRAIN") == 1, log[-2000:]
        assert log.count(f"Requeuing JobId={job}") == 1, log[-2000:]  # (it waits: node2 was its only node)
        with store.session() as s:
            fingerprints = [r.fingerprint for r in s.exec(select(IncidentRow)).all()]
        assert len(fingerprints) == len(set(fingerprints))  # the standby opened no incident again
    finally:
        stop(a, b)
        store.close()
