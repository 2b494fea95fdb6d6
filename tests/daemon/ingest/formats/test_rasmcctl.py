"""rasdaemon's ``ras-mc-ctl --errors`` listing: public listings, and the real ras-mc-ctl's over a database that the
database reader reads too."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pandas as pd

from daemon.ingest.formats import RasdaemonReader, RasMcCtlReader, sniff
from daemon.ingest.formats.rasmcctl import host_of_listing
from tests.conftest import REAL, require
from tests.daemon.ingest.formats.conftest import read_all
from tests.daemon.ingest.formats.test_rasdaemon_sqlite import SCHEMA, insert

QUOTED = REAL / "quoted"
T = "2026-03-02 00:0{}:00 +0000"


def test_a_hosts_listing_as_a_public_issue_quotes_it(tmp_path, ctx):
    """NixOS/infra PR 523: an AMD host's listing, every section empty but its MCE events (corrected DRAM ECC errors
    of the Unified Memory Controller, bank 17): three corrected MCEs of the host the file is named for."""
    path = QUOTED / "nixos-infra-523.ras-mc-ctl.txt"
    assert isinstance(sniff(path), RasMcCtlReader)
    ev = read_all(RasMcCtlReader(), path, ctx).events
    assert list(ev["kind"]) == ["mce"] * 3 and set(ev["severity"]) == {"corrected"} and set(ev["code"]) == {17}
    assert set(ev["entity"]) == {"nixos-infra-523"} and list(ev["source"]) == ["rasdaemon:mce_record"] * 3
    assert ev["ts"].iloc[0] == pd.Timestamp("2024-12-19 03:52:38Z").timestamp()
    assert ev["message"].iloc[0] == "bank 17: Corrected error, no action required."
    assert not ctx.rejects.messages


def test_newer_rasdaemons_mce_words_and_a_zone_of_their_own(tmp_path, ctx):
    """influxdata/telegraf issue 19511: a newer rasdaemon prints the MCA's own words ("mca DRAM ECC error. ...",
    with commas of their own) and a zone other than UTC; each record at its own time, bank 17."""
    path = tmp_path / "gaia.ras-mc-ctl.txt"
    path.write_text("No Memory errors.\n\nMCE events:\n" + (QUOTED / "telegraf-19511.mce.txt").read_text())
    ev = read_all(RasMcCtlReader(), path, ctx).events
    assert list(ev["code"]) == [17, 17] and set(ev["severity"]) == {"corrected"}
    assert list(ev["ts"]) == [pd.Timestamp("2026-08-23 22:04:24Z").timestamp(),
                              pd.Timestamp("2026-08-23 22:17:31Z").timestamp()]


def _lab_database(path: Path) -> None:
    """A rasdaemon 0.6.8 database (the schema ``rasdaemon --record`` creates) with records of each table it has."""
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    insert(conn, "mc_event", "timestamp, err_count, err_type, err_msg, label, mc, top_layer, middle_layer, "
                             "lower_layer, address, grain, syndrome, driver_detail", [
        (T.format(1), 3, "Corrected", "memory read error", "CPU_SrcID#0_MC#0_Chan#1_DIMM#0", 0, 1, 0, -1, 4660, 32, 0,
         "ProcessorSocketId:0x0"),
        (T.format(2), 1, "Uncorrected", "memory scrubbing error", "DIMM A1 at slot 3", 0, 1, 0, -1, 4660, 32, 0, "")])
    insert(conn, "aer_event", "timestamp, dev_name, err_type, err_msg", [
        (T.format(3), "0000:3a:00.0", "Corrected", "Receiver Error"),
        (T.format(4), "0000:3b:00.0", "Uncorrected (Non-Fatal)", "Completion Timeout"),
        (T.format(5), "0000:3a:00.0", "Uncorrected (Fatal)", "Surprise Down Error")])
    insert(conn, "mce_record", "timestamp, mcgcap, mcgstatus, status, addr, misc, cpu, cpuid, bank, cpuvendor, "
                               "bank_name, error_msg, mcgstatus_msg, mcistatus_msg, mcastatus_msg, user_action, "
                               "mc_location", [
        (T.format(6), 284, 0, 11249847431234011419 - 2**64, 10634470464, 0, 2, 8851216, 17, 2,
         "Unified Memory Controller (bank=17)", "Corrected error, no action required.", "mcgstatus=0", "CECC",
         "DRAM ECC error.", "", "memory_channel=0,csrow=1"),
        (T.format(7), 284, 5, -(2**62), 0, 0, 2, 8851216, 0, 0, "", "Uncorrected, software restartable error.",
         "RIPV MCIP", "Uncorrected_error Error_enabled PCC", "", "Reboot the system", "")])
    insert(conn, "extlog_event", "timestamp, etype, error_count, severity, address, fru_id, fru_text",
           [(T.format(8), 2, 1, 1, 4096, b"\x00" * 16, "DIMM_B2")])
    conn.close()


def _ras_mc_ctl_errors(varlib: Path) -> str:
    """The real ras-mc-ctl's ``--errors`` over ``varlib/rasdaemon/ras-mc_event.db``: it reads only
    /var/lib/rasdaemon, so it runs in a mount namespace of its own with ``varlib`` over /var/lib there."""
    require(shutil.which("ras-mc-ctl") is not None, "rasdaemon's ras-mc-ctl (apt-get install rasdaemon; "
                                                    "scripts/test.sh installs it)")
    require(os.geteuid() == 0 and shutil.which("unshare") is not None,
            "root and unshare (a private mount namespace for ras-mc-ctl's fixed database path)")
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          'mount --bind "$1" /var/lib && exec ras-mc-ctl --errors', "sh", str(varlib)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_real_ras_mc_ctl_lists_what_the_database_reader_reads(tmp_path, ctx):
    """rasdaemon 0.6.8's ras-mc-ctl (Debian 12) lists a database of every table it has; the listing reads as the
    database does, record for record, but where ras-mc-ctl prints less: an MCE of bank 0 prints no bank, and an
    Extlog record's type and severity are printed by name."""
    varlib = tmp_path / "varlib"
    (varlib / "rasdaemon").mkdir(parents=True)
    _lab_database(varlib / "rasdaemon" / "ras-mc_event.db")
    listing = tmp_path / "sn01-b01.ras-mc-ctl"
    listing.write_text(_ras_mc_ctl_errors(varlib))
    assert isinstance(sniff(listing), RasMcCtlReader), listing.read_text()
    got = read_all(RasMcCtlReader(), listing, ctx).events
    assert not ctx.rejects.messages, ctx.rejects.messages
    database = tmp_path / "sn01-b01.db"
    shutil.copy(varlib / "rasdaemon" / "ras-mc_event.db", database)
    want = read_all(RasdaemonReader(), database, ctx).events
    key = ["source", "ts"]
    got, want = got.sort_values(key).reset_index(drop=True), want.sort_values(key).reset_index(drop=True)
    same = ["ts", "entity", "kind", "severity", "pci", "source"]
    assert got[same].equals(want[same]), (got, want)
    assert list(got["severity"]) == ["corrected", "uncorrected", "fatal", "fatal", "corrected", "uncorrected",
                                     "corrected", "fatal"]  # aer x3, extlog, mc x2, mce x2 (by source, then time)
    mce = got["source"] == "rasdaemon:mce_record"
    assert list(got.loc[mce, "code"].astype("Int64")) == [17, pd.NA] and list(want.loc[mce, "code"]) == [17, 0]
    extlog = got["source"] == "rasdaemon:extlog_event"
    assert list(got.loc[extlog, "message"]) == ["extlog single-bit ECC DIMM_B2"]
    assert list(got.loc[mce, "message"])[1] == "bank ?: Uncorrected, software restartable error."
    rest = ~extlog & ~(mce & got["code"].isna())
    assert list(got.loc[rest, "message"]) == list(want.loc[rest, "message"])
    assert "on DIMM A1 at slot 3" in got.loc[got["source"] == "rasdaemon:mc_event", "message"].iloc[1]


def test_a_bad_record_costs_itself_and_other_tables_pass_unread(tmp_path, ctx):
    """A record of a read section in no record's shape, or with an unreadable time, is rejected with its line; a
    section of a table raswarden does not read (CXL's, signals') passes unread, counted in the summary; the rest is
    read."""
    path = tmp_path / "sn01-b01.ras-mc-ctl"
    path.write_text("\n".join([
        "No Memory errors.", "",
        "PCIe AER events:",
        "1 2026-03-02 00:01:00 +0000 0000:3a:00.0 Uncorrected (Fatal) error: Surprise Down Error",
        "2 2026-03-02 00:02:00 +0000 garbled",
        "3 2026-13-02 00:03:00 +0000 0000:3a:00.0 Corrected error: Receiver Error",
        "4 2026-03-02 00:04:00 +0000 0000:3a:00.0 Corrected error: Receiver Error", "",
        "CXL poison events:",
        "1 2026-03-02 00:05:00 +0000 error: memdev=mem0, host=0000:0d:00.0, serial=0x0, trace_type=List, ", "",
        "Memory failure events:",
        "1 2026-03-02 00:06:00 +0000 error: pfn=0x12345, page_type=dirty LRU page, action_result=Recovered", "",
        "No MCE errors.", ""]))
    ev = read_all(RasMcCtlReader(), path, ctx).events
    assert list(zip(ev["kind"], ev["severity"])) == [("aer", "fatal"), ("aer", "corrected"), ("edac", "deferred")]
    rejected = [m for m in ctx.rejects.messages if "sn01-b01.ras-mc-ctl:" in m]
    assert len(rejected) == 2 and f"{path}:5" in rejected[0] and f"{path}:6" in rejected[1], ctx.rejects.messages
    assert any("1 record(s) of sections raswarden does not read passed unread: 'CXL poison events' x1" in m
               for m in ctx.rejects.notes), ctx.rejects.notes


def test_the_host_is_the_files_or_its_sosreports(tmp_path, ctx):
    """The listing names no host: ``<host>.ras-mc-ctl`` names it, or a sosreport's ``hostname`` file
    (``sos_commands/rasdaemon/ras-mc-ctl_--errors``, as sos's rasdaemon plugin saves it); else it is refused."""
    assert host_of_listing(Path("/x/gpu-07.ras-mc-ctl.txt")) == "gpu-07"
    report = tmp_path / "sosreport-gpu-17-2026-03-02-abcdef"
    (report / "sos_commands" / "rasdaemon").mkdir(parents=True)
    listing = report / "sos_commands" / "rasdaemon" / "ras-mc-ctl_--errors"
    listing.write_text("No Memory errors.\n\nPCIe AER events:\n"
                       "1 2026-03-02 00:01:00 +0000 0000:3a:00.0 Corrected error: Receiver Error\n")
    assert isinstance(sniff(listing), RasMcCtlReader)
    assert read_all(RasMcCtlReader(), listing, ctx).events.empty
    assert "names no host: name the file <host>.ras-mc-ctl" in ctx.rejects.messages[-1]
    (report / "hostname").write_text("gpu-17.cluster.example\n")
    assert list(read_all(RasMcCtlReader(), listing, ctx).events["entity"]) == ["gpu-17"]
