"""A BMC's event log as ipmitool and FreeIPMI's ipmi-sel print it: lines quoted in public issues, and the real tools'
own output of a simulated BMC's log (the BMC lab), judged by the SEL catalog (detectors/catalogs/ipmi_sel.csv)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from daemon.ingest.formats import IpmiSelReader, sniff
from detectors.rules import RuleDetector
from detectors.schema import State
from detectors.xid_catalog import vendor_repair
from lab.bmc import PASSWORD, USER, BmcConsole
from tests.conftest import REAL, require
from tests.daemon.ingest.formats.conftest import read_all
from tests.detectors.test_rules import run


def _judged(events) -> list[tuple[str, tuple[State, str, str | None] | None]]:
    """Each event's message and its verdict by the rules, (level, category, repair), in order (each on a node of its
    own)."""
    out = []
    det = RuleDetector().fit()
    for i, row in enumerate(events.itertuples(index=False)):
        ev = run(det, row.ts + 1, events=[(row.ts, f"n{i}", row.kind, row.code, row.severity, row.message,
                                           row.source, None, None)])
        mine = [e for e in ev if e.entity == f"n{i}"]
        out.append((row.message, (mine[0].level, mine[0].category, vendor_repair(mine[0].reasons)) if mine else None))
    return out


def test_quoted_ipmitool_lines(tmp_path, ctx):
    """ipmitool's list and elist lines as public issues quote them: two- and four-digit years, a zone word, an empty
    event, a deassertion; each record the catalog judges is an event at its time, the rest (a temperature record
    without words, a power unit, a cleared log, a boot's progress, an OEM record) pass unread."""
    path = REAL / "quoted" / "ipmitool-sel-quoted.sel"
    assert isinstance(sniff(path), IpmiSelReader)
    ev = read_all(IpmiSelReader(), path, ctx).events
    assert ctx.rejects.total == 0
    got = list(zip(ev["entity"], ev["code"], ev["message"]))
    assert got == [("ipmitool-sel-quoted", 0x0C, "Memory #0x88: Correctable ECC (CPU0_G1)"),
                   ("ipmitool-sel-quoted", 0x0C, "Memory #0x87: Correctable ECC ()"),
                   ("ipmitool-sel-quoted", 0x07, "Processor #0x40: Uncorrectable machine check exception"),
                   ("ipmitool-sel-quoted", 0x07, "Processor #0x40: Uncorrectable machine check exception")]
    assert ev["ts"].iloc[0] == 1671059384.0  # 12/14/22 23:09:44, its "CET" read in the context's zone (UTC)
    assert ev["ts"].iloc[2] == 1778791226.0  # 05/14/2026 20:40:26
    judged = dict(_judged(ev))
    assert judged["Memory #0x88: Correctable ECC (CPU0_G1)"] == (State.SUSPECT, "host", None)
    assert judged["Processor #0x40: Uncorrectable machine check exception"] == (State.FAILED, "host", "inspect")
    assert any("its times name no zone: read as UTC" in n for n in ctx.rejects.notes)
    # a record of a judged type whose words the catalog lacks is said, not silently dropped
    assert any("1 record(s) of judged sensor types passed unread" in n and "'Temperature: ' x1" in n
               for n in ctx.rejects.notes), ctx.rejects.notes


def test_the_static_baseline_reads_only_the_hard_records():
    from detectors.vendor_events import load_sel_catalog, sel_verdict

    catalog = load_sel_catalog()
    assert sel_verdict(0x0C, "Memory #0x88: Uncorrectable ECC", catalog, baseline=True).hard
    assert sel_verdict(0x0C, "Memory #0x88: Correctable ECC", catalog, baseline=True) is None
    assert sel_verdict(0x0C, "Memory #0x88: Presence detected", catalog) is None
    assert sel_verdict(0x08, "PSU1 Status: Power Supply Failure detected", catalog).level == State.SUBHEALTHY


def test_records_without_a_time_and_lines_of_no_shape_are_rejected_with_their_line(tmp_path, ctx):
    path = tmp_path / "gpu-node-2.sel"
    path.write_text("   1 |  Pre-Init  |0000057347| Memory #0x88 | Uncorrectable ECC | Asserted\n"
                    "garbage\n"
                    "   2 | 12/05/26 | 18:31:45 UTC | Memory #0x88 | Uncorrectable ECC | Asserted\n")
    ev = read_all(IpmiSelReader(), path, ctx).events
    assert list(ev["ts"]) == [1796495505.0] and list(ev["entity"]) == ["gpu-node-2"]
    assert [m.split(": ", 2)[1] for m in ctx.rejects.messages] == [
        "logged before the BMC knew the time", "not a SEL record (ipmitool's or ipmi-sel's)"]
    assert f"{path}:1" in ctx.rejects.messages[0] and f"{path}:2" in ctx.rejects.messages[1]
    ctx.rejects.__init__()
    (tmp_path / "no-host.txt").write_text(path.read_text())
    assert read_all(IpmiSelReader(), tmp_path / "no-host.txt", ctx).events.empty
    assert "name the file <host>.sel" in ctx.rejects.messages[0]


# (IPMI sensor type, offset of its sensor-specific or threshold event, the event/reading type) -> raswarden's verdict
LOGGED = [
    ((0x0C, 0x00, 0x6F), (State.SUSPECT, "host", None)),  # memory: correctable ECC
    ((0x0C, 0x05, 0x6F), (State.SUBHEALTHY, "host", "replace")),  # its logging limit reached
    ((0x0C, 0x01, 0x6F), (State.FAILED, "host", "replace")),  # uncorrectable ECC
    ((0x07, 0x00, 0x6F), (State.FAILED, "host", "inspect")),  # processor: IERR
    ((0x07, 0x0B, 0x6F), (State.FAILED, "host", "inspect")),  # machine check exception
    ((0x13, 0x05, 0x6F), (State.SUBHEALTHY, "host", "inspect")),  # critical interrupt: PCI SERR
    ((0x13, 0x08, 0x6F), (State.SUBHEALTHY, "host", "inspect")),  # bus uncorrectable error
    ((0x08, 0x01, 0x6F), (State.SUBHEALTHY, "host", "replace")),  # power supply: failure detected
    ((0x08, 0x03, 0x6F), (State.SUBHEALTHY, "host", "inspect")),  # its AC lost
    ((0x01, 0x59, 0x01), (State.SUBHEALTHY, "cooling", "inspect")),  # temperature: upper critical going high
    ((0x04, 0x52, 0x01), (State.SUBHEALTHY, "cooling", "replace")),  # fan: lower critical going low
    ((0x0C, 0x03, 0x6F), (State.SUBHEALTHY, "host", "replace")),  # memory scrub failed
    ((0x0C, 0x0A, 0x6F), (State.SUBHEALTHY, "cooling", "inspect")),  # memory: critical overtemperature
    ((0x07, 0x02, 0x6F), (State.SUBHEALTHY, "host", "inspect")),  # processor: FRB1/BIST failure
    ((0x13, 0x09, 0x6F), (State.FAILED, "host", "inspect")),  # critical interrupt: fatal NMI
    ((0x08, 0x04, 0x6F), (State.SUBHEALTHY, "host", "inspect")),  # power supply: AC lost or out-of-range
    ((0x08, 0x06, 0x6F), (State.SUSPECT, "host", None)),  # its configuration error
    ((0x20, 0x01, 0x6F), (State.SUSPECT, "host", None)),  # OS critical stop: run-time critical stop
    ((0x23, 0x01, 0x6F), (State.SUSPECT, "host", None)),  # watchdog 2: hard reset
    ((0x0C, 0x08, 0x6F), None),  # memory: a spare (no fault)
    ((0x10, 0x02, 0x6F), None),  # event logging disabled: log area cleared
    ((0x01, 0x59, 0x81), None),  # the temperature's crossing deasserted: the condition's end, no event
]


@pytest.mark.parametrize("tool", ["ipmitool elist", "ipmitool list", "ipmi-sel", "ipmi-sel -v", "ipmi-sel csv"])
def test_the_real_tools_listing_of_a_bmcs_log(bmc_lab, tmp_path, ctx, tool):
    """Records logged in the simulated BMC's SEL (ipmi_sim), listed by the real ipmitool and ipmi-sel and read back:
    every one at its time, judged as the catalog says (the catalog's words are these tools' words)."""
    env, lab_dir = bmc_lab
    require(shutil.which("ipmitool") is not None, "no ipmitool (Debian package ipmitool): scripts/test.sh installs it")
    port = env["BMC_LAB_PORT"]
    ipmitool = ["ipmitool", "-I", "lan", "-H", "127.0.0.1", "-p", port, "-U", USER, "-P", PASSWORD]
    subprocess.run(ipmitool + ["sel", "time", "set", "now"], check=True, capture_output=True, timeout=60)
    console = BmcConsole(int(env["BMC_LAB_CONSOLE"]))
    for (sensor_type, offset, reading_type), _ in LOGGED:
        sensor = {0x01: 1, 0x04: 2}.get(sensor_type, 0x40)  # the threshold events name the SDR's own sensors
        console.run(f"sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x{sensor_type:02x} 0x{sensor:02x} "
                    f"0x{reading_type:02x} 0x{offset:02x} 0xff 0xff")
    if tool.startswith("ipmitool"):
        cmd = ipmitool + ["sel", tool.split()[1]]
    else:
        cmd = ["/usr/sbin/ipmi-sel", "-D", "LAN", "-h", f"127.0.0.1:{port}", "-u", USER, "-p", PASSWORD, "-l", "ADMIN"]
        cmd += ["--comma-separated-output", "--output-event-state"] if tool.endswith("csv") else tool.split()[1:]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120, env={**os.environ, "TZ": "UTC",
                                                                                           "HOME": str(lab_dir)})
    path = tmp_path / "gpu-node-3.sel"
    path.write_text(out.stdout)
    ev = read_all(IpmiSelReader(), path, ctx).events
    # (the board's first record, its power supply's presence at power-on, logged before the BMC had the time: nothing
    # to judge, so no complaint that it cannot be placed)
    assert ctx.rejects.total == 0, (ctx.rejects.messages, out.stdout)
    # the records read: those the catalog judges, asserted (a deassertion is a condition's end), a threshold crossing
    # only where the listing says its direction (ipmi-sel without -v does not)
    undirected = tool in ("ipmi-sel", "ipmi-sel csv")
    want = [v for (sensor_type, _, reading_type), v in LOGGED if v is not None and not reading_type & 0x80
            and not (undirected and reading_type == 0x01)]
    if undirected:
        assert any("record it with 'ipmi-sel -v'" in n for n in ctx.rejects.notes)
    assert [v for _, v in _judged(ev)][-len(want):] == want, out.stdout
