"""The journal, followed: a growing JSON-lines file with a saved offset, and a real journalctl with a cursor."""

import json
import os
import shutil
import subprocess
import time

import pytest

from daemon.ingest.collectors.journald import JournaldCollector
from daemon.ingest.formats.reader import ReadContext
from tests.conftest import require

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."


def record(ts: float, message: str, host: str = "sn01-b01", transport: str = "kernel") -> str:
    return json.dumps({"__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "_HOSTNAME": host, "_TRANSPORT": transport,
                       "MESSAGE": message}) + "\n"


def test_follows_a_growing_file_resumes_and_starts_over_when_replaced(tmp_path):
    path = tmp_path / "kernel.journal.json"
    c = JournaldCollector("kernel", ReadContext(), file=str(path))
    batch, outcome = c.collect(0.0)
    assert outcome.ok and len(batch.events) == 0  # not written yet: no data, no error
    with open(path, "w") as fh:
        fh.write(record(100.0, XID) + "{broken\n" + record(101.0, "usb 1-1: new device", transport="kernel"))
        fh.write(record(102.0, "EDAC MC0: 1 CE memory read error on DIMM_A1"))
        fh.write(record(103.0, XID)[:40])  # still being written
    ctx = c.ctx
    batch, outcome = c.collect(1.0)
    assert list(batch.events["kind"]) == ["xid", "edac"] and batch.events["code"].iloc[0] == 79
    assert f"{path}:2: not a JSON object" in ctx.rejects.messages[0]
    assert c.state["line"] == 4
    with open(path, "a") as fh:
        fh.write(record(103.0, XID)[40:])
    batch, _ = c.collect(2.0)
    assert len(batch.events) == 1 and batch.events["ts"].iloc[0] == 103.0  # the half line, once whole
    restarted = JournaldCollector("kernel", ReadContext(), file=str(path))
    restarted.restore(dict(c.state))
    batch, _ = restarted.collect(3.0)
    assert len(batch.events) == 0  # nothing twice
    path.unlink()
    path.write_text(record(200.0, XID))  # rotated: a new file
    batch, _ = restarted.collect(4.0)
    assert list(batch.events["ts"]) == [200.0]


def test_a_poison_xid_between_two_real_ones_costs_only_itself(tmp_path):
    """Issue 54's probe: two real Xid 79 lines written in one append with a 20-digit Xid between them. The poison line
    is rejected with its place; both GPUs' events are kept and the cursor moves past the three once."""
    path = tmp_path / "kernel.journal.json"
    c = JournaldCollector("kernel", ReadContext(), file=str(path))
    with open(path, "w") as fh:
        fh.write(record(100.0, XID) + record(100.5, "NVRM: Xid (PCI:0000:2a:00): 99999999999999999999, pid=0, x")
                 + record(101.0, XID.replace("3b:00", "5d:00")))
    batch, outcome = c.collect(1.0)
    assert outcome.ok and list(batch.events["pci"]) == ["0000:3b:00", "0000:5d:00"]
    assert any(f"{path}:2: xid code 99999999999999999999 is out of range" in m for m in c.ctx.rejects.messages)
    assert c.state["line"] == 3
    batch, _ = c.collect(2.0)
    assert len(batch.events) == 0


def test_real_journalctl_with_a_persisted_cursor(journal_file):
    out, write = journal_file
    now = time.time()
    write((now - 5, XID), (now - 4, "EDAC MC0: 1 CE memory read error on DIMM_A1"))
    c = JournaldCollector("kernel", ReadContext(), args=[f"--file={out}"], since="2000-01-01")
    events = []
    deadline = time.monotonic() + 15
    while len(events) < 2 and time.monotonic() < deadline:
        batch, outcome = c.collect(time.time())
        events += list(batch.events["kind"])
        time.sleep(0.2)
    assert events == ["xid", "edac"] and c.state["cursor"]
    saved = dict(c.state)
    c.close()
    write((now - 3, XID))
    again = JournaldCollector("kernel", ReadContext(), args=[f"--file={out}"])
    again.restore(saved)
    assert f"--after-cursor={saved['cursor']}" in again.command()
    events = []
    deadline = time.monotonic() + 15
    while not events and time.monotonic() < deadline:
        batch, _ = again.collect(time.time())
        events += list(batch.events["ts"])
        time.sleep(0.2)
    again.close()
    assert events == [pytest.approx(now - 3, abs=1e-3)]  # only the new record, once


def test_a_directory_of_many_nodes_journals_is_read_whole(tmp_path):
    """A management node's /var/log/journal/remote: one journal per forwarding node (what systemd-journal-remote
    writes), each node with its own machine and boot. ``journalctl --follow`` alone shows only "the current boot"
    (systemd >= 250 implies ``--boot`` with ``--follow``), which in such a directory is one node's latest boot:
    every other node's kernel lines would be lost, and an empty directory is an error. Both nodes' lines are read."""
    remote = shutil.which("systemd-journal-remote") or "/lib/systemd/systemd-journal-remote"
    require(os.path.exists(remote), "systemd-journal-remote is not installed (scripts/test.sh installs it)")
    directory = tmp_path / "remote"
    directory.mkdir()
    empty = JournaldCollector("kernel", ReadContext(), args=[f"--directory={directory}"], since="2000-01-01")
    empty.collect(time.time())
    time.sleep(1.0)
    _, outcome = empty.collect(time.time())
    empty.close()
    assert outcome.ok, outcome.errors  # nothing forwarded yet is not an error
    now = time.time()
    for i, (host, boot) in enumerate((("sn01-b01", "0123456789abcdef0123456789abcdef"),
                                      ("sn01-b02", "fedcba9876543210fedcba9876543210"))):
        export = (f"__REALTIME_TIMESTAMP={int((now - 10 + i) * 1e6)}\n__MONOTONIC_TIMESTAMP=1\n_BOOT_ID={boot}\n"
                  f"_MACHINE_ID={boot[::-1]}\n_HOSTNAME={host}\n_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\n"
                  f"MESSAGE={XID}\n\n").encode()
        subprocess.run([remote, f"--output={directory}/remote-{host}.journal", "--split-mode=none", "-"],
                       input=export, check=True, capture_output=True)
    c = JournaldCollector("kernel", ReadContext(), args=[f"--directory={directory}"], since="2000-01-01")
    hosts: list[str] = []
    deadline = time.monotonic() + 15
    while len(hosts) < 2 and time.monotonic() < deadline:
        batch, outcome = c.collect(time.time())
        assert outcome.ok, outcome.errors
        hosts += [e.split("/")[0] for e in batch.events["entity"]]
        time.sleep(0.2)
    c.close()
    assert sorted(hosts) == ["sn01-b01", "sn01-b02"], hosts
    # a shard's instance asks journalctl for its own nodes' records only (by name or by alias)
    for shard_hosts, want in ((frozenset({"sn01-b02", "10.0.0.2"}), ["sn01-b02"]), (frozenset({"sn02-b01"}), [])):
        mine = JournaldCollector("kernel", ReadContext(shard_hosts=shard_hosts), args=[f"--directory={directory}"],
                                 since="2000-01-01")
        assert mine.command()[-len(shard_hosts):] == [f"_HOSTNAME={h}" for h in sorted(shard_hosts)]
        got: list[str] = []
        deadline = time.monotonic() + (15 if want else 3)  # what is read comes within a second; nothing: wait 3 s
        while time.monotonic() < deadline and (got != want or not want):
            batch, outcome = mine.collect(time.time())
            assert outcome.ok, outcome.errors
            got += [e.split("/")[0] for e in batch.events["entity"]]
            time.sleep(0.2)
        batch, _ = mine.collect(time.time())
        mine.close()
        assert got + [e.split("/")[0] for e in batch.events["entity"]] == want


def test_a_missing_journalctl_is_an_error_not_a_crash():
    c = JournaldCollector("kernel", ReadContext(), journalctl="/nonexistent/journalctl")
    batch, outcome = c.collect(0.0)
    assert not outcome.ok and "journalctl" in outcome.errors[0] and c.probe()
