"""systemd journal files, read through the real journalctl: the bundled trace's kernel log written into a real
journal by systemd-journal-remote replays to the trace's findings; no journalctl, or a damaged file, is said."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from daemon.formats import JournalFileReader, sniff
from daemon.replay import replay
from tests.conftest import BUNDLED_TRACE, require
from tests.daemon.formats.conftest import read_all

REMOTE = shutil.which("systemd-journal-remote") or "/lib/systemd/systemd-journal-remote"


def export_format(records: list[dict]) -> bytes:
    """Records in the journal export format systemd-journal-remote reads (a value holding a newline in its binary
    form: the name, a newline, its length as a little-endian 64-bit number, the bytes)."""
    out = bytearray()
    for record in records:
        for key, value in record.items():
            if key == "__CURSOR":
                continue
            data = str(value).encode()
            if b"\n" in data:
                out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
            else:
                out += key.encode() + b"=" + data + b"\n"
        out += b"\n"
    return bytes(out)


def write_journal(records: list[dict], out: Path) -> Path:
    require(os.path.exists(REMOTE), "systemd-journal-remote is not installed (scripts/test.sh installs it)")
    subprocess.run([REMOTE, f"--output={out}", "--split-mode=none", "-"], input=export_format(records), check=True,
                   capture_output=True)
    return out


def findings(paths: list[Path]) -> str:
    out = io.StringIO()
    replay(paths, findings_out=out)
    return out.getvalue()


def test_a_journal_file_replays_like_its_json_export(tmp_path):
    require(shutil.which("journalctl") is not None, "journalctl (systemd) is not installed")
    records = [json.loads(line) for line in (BUNDLED_TRACE / "kernel.journal.json").read_text().splitlines()]
    journal = write_journal(records, tmp_path / "remote-sn01.journal")
    assert journal.read_bytes()[:8] == b"LPKSHHRH" and isinstance(sniff(journal), JournalFileReader)
    rest = tmp_path / "rest"
    shutil.copytree(BUNDLED_TRACE, rest, ignore=shutil.ignore_patterns("kernel.journal.json"))
    assert findings([journal, rest]) == findings([BUNDLED_TRACE])


def test_kernel_records_of_every_boot_and_host_with_their_times(tmp_path, ctx):
    require(shutil.which("journalctl") is not None, "journalctl (systemd) is not installed")
    xid = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."

    def rec(ts: float, message: str, boot: str, transport: str = "kernel") -> dict:
        return {"__REALTIME_TIMESTAMP": int(ts * 1e6), "__MONOTONIC_TIMESTAMP": 1, "_BOOT_ID": boot,
                "_HOSTNAME": "sn01-b01", "_TRANSPORT": transport, "SYSLOG_IDENTIFIER": "kernel" if transport ==
                "kernel" else "sshd", "MESSAGE": message}

    journal = write_journal([rec(1772409600.25, xid, "a" * 32), rec(1772409601, "Accepted publickey", "a" * 32,
                                                                         "syslog"),
                             rec(1772409700.5, xid, "b" * 32)], tmp_path / "system.journal")
    ev = read_all(JournalFileReader(), journal, ctx).events
    xids = ev[ev["kind"] == "xid"]
    assert xids["ts"].tolist() == [1772409600.25, 1772409700.5] and set(xids["entity"]) == {"sn01-b01"}
    assert set(xids["pci"]) == {"0000:18:00"}  # resolved to its GPU at the tick (daemon/resolve.py)
    assert (ev["kind"] == "boot").sum() == 1  # the second boot id
    assert ctx.rejects.total == 0


def test_no_journalctl_or_a_damaged_file_is_said_not_a_crash(tmp_path, ctx):
    require(shutil.which("journalctl") is not None, "journalctl (systemd) is not installed")
    journal = tmp_path / "system.journal"
    journal.write_bytes(b"LPKSHHRH" + b"\x00" * 200)  # a header cut short
    assert read_all(JournalFileReader(journalctl="no-such-journalctl"), journal, ctx).events.empty
    assert "reading it needs journalctl" in ctx.rejects.messages[0]
    assert read_all(JournalFileReader(), journal, ctx).events.empty
    assert any("journalctl could not read it all" in m for m in ctx.rejects.messages), ctx.rejects.messages


@pytest.mark.parametrize("name", ["system@0006-1.journal~", "system.journal.gz"])
def test_archived_and_compressed_journals_are_read(tmp_path, ctx, name):
    require(shutil.which("journalctl") is not None, "journalctl (systemd) is not installed")
    import gzip

    xid = "NVRM: Xid (PCI:0000:18:00): 48, pid=0, An uncorrectable double bit error (DBE) has been detected."
    journal = write_journal([{"__REALTIME_TIMESTAMP": 1772409600000000, "__MONOTONIC_TIMESTAMP": 1,
                              "_BOOT_ID": "c" * 32, "_HOSTNAME": "sn01-b01", "_TRANSPORT": "kernel",
                              "MESSAGE": xid}], tmp_path / "w.journal")
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(journal.read_bytes()))
    else:
        journal.rename(path)
    assert isinstance(sniff(path), JournalFileReader)
    ev = read_all(JournalFileReader(), path, ctx).events
    assert ev["code"].tolist() == [48] and ctx.rejects.total == 0
