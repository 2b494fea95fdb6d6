import json

from daemon.ingest.formats import JournalJsonReader, TextLogReader, sniff
from tests.daemon.ingest.formats.conftest import read_all

XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."


def jrec(msg, host="sn01-b01", ts=1772409630_000000, transport="kernel"):
    return json.dumps({"__REALTIME_TIMESTAMP": str(ts), "_HOSTNAME": host, "_TRANSPORT": transport,
                       "SYSLOG_IDENTIFIER": "kernel" if transport == "kernel" else "systemd", "MESSAGE": msg})


def test_journald_export(tmp_path, ctx):
    p = tmp_path / "k.json"
    p.write_text("\n".join([
        jrec(XID79),
        '{"__REALTIME_TIMESTAMP": "17724096',  # truncated
        jrec("Started Session 4.", transport="journal"),
        jrec(list(b"mlx5_core 0000:0c:00.0 ibp12s0: Link down\xff")),  # non-UTF-8 as a byte array
        jrec(XID79, host="10.9.9.9"),  # address without alias
        json.dumps({"_TRANSPORT": "kernel", "MESSAGE": XID79}),  # no time
        jrec("NVRM: Xid (PCI:0000:18:00): 48, DBE", host="10.0.1.11"),  # alias
    ]) + "\n")
    assert isinstance(sniff(p), JournalJsonReader)
    ev = read_all(JournalJsonReader(), p, ctx).events
    assert list(ev["kind"]) == ["xid", "link", "xid"]
    assert list(ev["entity"]) == ["sn01-b01"] * 3  # resolved to accelerators later, from the pci column
    assert list(ev["pci"]) == ["0000:18:00", "0000:0c:00.0", "0000:18:00"]  # a NIC port keeps its PCI function
    msgs = "\n".join(ctx.rejects.messages)
    assert f"{p}:2: not a JSON object" in msgs and f"{p}:5: host '10.9.9.9'" in msgs and f"{p}:6:" in msgs


def test_syslog_rfc3164_and_rfc3339(tmp_path, ctx):
    p = tmp_path / "kern.log"
    p.write_text(f"Mar  2 00:01:00 sn01-b01 kernel: [  123.456789] {XID79}\n"
                 "Mar  2 00:01:01 sn01-b01 sshd[123]: Accepted publickey for root\n")
    ev = read_all(TextLogReader(), p, ctx).events
    assert len(ev) == 1 and ev["code"].iloc[0] == 79
    q = tmp_path / "syslog"
    q.write_text(f"2026-03-02T00:01:00.123456+00:00 sn01-b01 kernel: {XID79}\n")
    ev = read_all(TextLogReader(), q, ctx).events
    assert ev["ts"].iloc[0] == 1772409660.123456


def test_dmesg_forms_take_the_host_from_the_file_name(tmp_path, ctx):
    p = tmp_path / "sn01-b01.dmesg"
    p.write_text(f"[Mon Mar  2 00:01:00 2026] {XID79}\n")
    ev = read_all(TextLogReader(), p, ctx).events
    assert ev["ts"].iloc[0] == 1772409660.0 and ev["entity"].iloc[0] == "sn01-b01"
    q = tmp_path / "sn01-b01.dmesg.log"
    q.write_text(f"2026-03-02T00:01:00,000000+00:00 {XID79}\n")
    assert read_all(TextLogReader(), q, ctx).events["ts"].iloc[0] == 1772409660.0


def test_raw_dmesg_is_refused_with_a_clear_message(tmp_path, ctx):
    p = tmp_path / "sn01-b01.dmesg"
    p.write_text(f"[  123.456789] {XID79}\n")
    assert len(read_all(TextLogReader(), p, ctx).events) == 0
    assert "seconds since boot" in ctx.rejects.messages[0] and "dmesg -T" in ctx.rejects.messages[0]


def test_dmesg_without_host_is_refused(tmp_path, ctx):
    p = tmp_path / "dmesg.txt"
    p.write_text(f"[Mon Mar  2 00:01:00 2026] {XID79}\n")
    assert len(read_all(TextLogReader(), p, ctx).events) == 0
    assert "names no host" in ctx.rejects.messages[0]
