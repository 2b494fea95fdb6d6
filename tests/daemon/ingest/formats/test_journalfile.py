"""systemd journal files, read through the real journalctl: the bundled trace's kernel log written into a real
journal by systemd-journal-remote replays to the trace's findings; no journalctl, or a damaged file, is said."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from daemon.ingest.formats import JournalExportReader, JournalFileReader, sniff
from tests.conftest import BUNDLED_TRACE, replay_findings, require
from tests.daemon.ingest.formats.conftest import read_all

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


def test_a_journal_file_replays_like_its_json_export(tmp_path, bundled_findings):
    require(shutil.which("journalctl") is not None, "journalctl (systemd) is not installed")
    records = [json.loads(line) for line in (BUNDLED_TRACE / "kernel.journal.json").read_text().splitlines()]
    journal = write_journal(records, tmp_path / "remote-sn01.journal")
    assert journal.read_bytes()[:8] == b"LPKSHHRH" and isinstance(sniff(journal), JournalFileReader)
    rest = tmp_path / "rest"
    shutil.copytree(BUNDLED_TRACE, rest, ignore=shutil.ignore_patterns("kernel.journal.json"))
    assert replay_findings([journal, rest]) == bundled_findings


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
    assert set(xids["pci"]) == {"0000:18:00"}  # resolved to its GPU at the tick (daemon/judgement/resolve.py)
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


def test_journalctl_export_format_replays_like_the_json_export(tmp_path, bundled_findings):
    """``journalctl -o export`` of the same journal file (the real journalctl writing it)."""
    require(shutil.which("journalctl") is not None, "journalctl (systemd) is not installed")
    records = [json.loads(line) for line in (BUNDLED_TRACE / "kernel.journal.json").read_text().splitlines()]
    journal = write_journal(records, tmp_path / "remote-sn01.journal")
    export = tmp_path / "sn01.export"
    with open(export, "wb") as out:
        subprocess.run(["journalctl", f"--file={journal}", "-o", "export", "--no-pager"], stdout=out, check=True)
    assert isinstance(sniff(export), JournalExportReader)
    rest = tmp_path / "rest"
    shutil.copytree(BUNDLED_TRACE, rest, ignore=shutil.ignore_patterns("kernel.journal.json"))
    assert replay_findings([export, rest]) == bundled_findings


def test_export_format_binary_fields_and_damage(tmp_path, ctx):
    """A message in the binary form is read; a line that is no field is rejected; a binary field cut short costs its
    entry, with a reason, what came before kept; a line that lost its '=' costs its entry, and the next is read."""
    xid = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."
    dbe = "NVRM: Xid (PCI:0000:18:00): 48, pid=0, An uncorrectable double bit error (DBE) has been detected."

    def head(second: int) -> bytes:
        return (f"__CURSOR=s=1\n__REALTIME_TIMESTAMP=17724096{second:02d}000000\n_BOOT_ID={'a' * 32}\n"
                "_HOSTNAME=sn01-b01\n_TRANSPORT=kernel\n").encode()

    binary = dbe.encode()  # any value may take the binary form (journalctl uses it for ones with control bytes)
    text = (head(0) + b"MESSAGE=" + xid.encode() + b"\n\n"
            + head(1) + b"not a field line\nMESSAGE\n" + struct.pack("<Q", len(binary)) + binary + b"\n\n"
            + head(2) + b"MESSAGE\n" + struct.pack("<Q", 500) + b"cut\n\n"
            # a line that lost its '=' reads as a binary field's name, the next line's bytes as its length
            + head(3).replace(b"_HOSTNAME=sn01-b01", b"_HOSTNAMESN01B01") + b"MESSAGE=" + xid.encode() + b"\n\n"
            + head(4) + b"MESSAGE=" + xid.encode() + b"\n\n")
    path = tmp_path / "node.export"
    path.write_bytes(text)
    assert isinstance(sniff(path), JournalExportReader)
    ev = read_all(JournalExportReader(), path, ctx).events
    assert ev["code"].tolist() == [79, 48, 79] and ev["ts"].tolist() == [1772409600, 1772409601, 1772409604]
    reasons = sorted(m.split(": ", 1)[1] for m in ctx.rejects.messages)
    assert len(reasons) == 3 and all(r.startswith("binary field cut short or damaged") for r in reasons[:2]) and \
        {r.rsplit(": ", 1)[1] for r in reasons[:2]} == {"'MESSAGE'", "'_HOSTNAMESN01B01'"} and \
        reasons[2].startswith("not a FIELD=value line"), reasons
