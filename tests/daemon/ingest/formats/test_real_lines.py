"""Kernel, Fabric Manager and exporter lines as real machines print them (fixtures/real, provenance in
fixtures/README.md): each shape a fleet's logs come in is read, and what cannot be placed in time says what it is."""

from __future__ import annotations

import json
import shutil
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import require

from daemon.ingest.formats import (FabricManagerReader, JournalJsonReader, OpenMetricsReader, TextLogReader,
                                   describe_unread, sniff)
from daemon.ingest.formats.kernel_events import DRIVER_SOURCE, MessageJoiner, parse_kernel_message
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.resolve import EventResolver
from daemon.topology import Topology
from detectors.contract import TickInput
from detectors.rules import RuleDetector
from detectors.schema import State, events_frame
from tests.daemon.ingest.formats.conftest import read_all

REAL = Path(__file__).resolve().parents[4] / "fixtures" / "real"
GPUD = REAL / "gpud"
QUOTED = REAL / "quoted"


def test_dmesg_decode_is_a_kernel_log_not_openmetrics(ctx):
    """gpud's `dmesg --decode --time-format iso` sample: every Xid line becomes an event, the segfault and the VFS
    line none (it was sniffed as OpenMetrics before, and every event lost without a word)."""
    path = GPUD / "gpu-node-01.dmesg-decode-iso.log"
    assert isinstance(sniff(path), TextLogReader)
    ev = read_all(TextLogReader(), path, ctx).events
    xid_lines = sum("NVRM: Xid" in ln for ln in path.read_text().splitlines())
    assert xid_lines > 10 and len(ev) == xid_lines and ctx.rejects.total == 0
    assert set(ev["code"]) == {13, 43} and set(ev["entity"]) == {"gpu-node-01"}
    assert ev["ts"].iloc[0] == pytest.approx(1737434504.283302)  # 2025-01-21T04:41:44,283302+00:00


def test_dmesg_decode_keeps_a_drivers_line_under_another_facility(ctx, tmp_path):
    """gpud PR 870's `dmesg --decode`: an Xid 79 relayed to /dev/kmsg shows as `syslog:err`; it is the driver's fact
    and becomes the event, the program's own `syslog:emerg` line none."""
    path = tmp_path / "gpu-node-04.dmesg"
    path.write_text((QUOTED / "gpud-870-syslog-facility.dmesg.txt").read_text())
    ev = read_all(TextLogReader(), path, ctx).events
    assert list(ev["code"]) == [79] and list(ev["pci"]) == ["0000:04:00"] and ctx.rejects.total == 0
    assert ev["ts"].iloc[0] == pytest.approx(1748319536.089671)  # 2025-05-27T04:18:56,089671+00:00


def test_nvlink5_kmsg_lines_are_decoded_by_the_sheet():
    """gpud PR 1174's kmsg lines: 149 NETIR (V1 IntrInfo 0x000fe406) is NETIR/NETIR_INT, RESET_GPU at Link Fatal;
    149 NETIR_LINK_EVT link-down reason 37; 145 RLW_RXPIPE status 0x8 an IGNORE (investigate) row."""
    from detectors.xid_catalog import decode_nvlink5, load_decode_sheet

    sheet = load_decode_sheet()
    decoded = [decode_nvlink5(e.code, e.message, sheet) for e in
               (parse_kernel_message(ln) for ln in (QUOTED / "gpud-1174-nvlink5-kmsg.txt").read_text().splitlines())]
    assert [(d.row.unit, d.action, d.state) for d in decoded] == [
        ("NETIR/NETIR_INT", "RESET_GPU", "subhealthy"),
        ("NETIR_LINK_EVT/NETIR_LINK_DOWN", "RESET_GPU", "subhealthy"),
        ("RLW_RXPIPE", "IGNORE", "suspect")]
    assert "INVESTIGATE_PEER_DEVICE" in decoded[1].reason()


def test_dmesg_T_with_the_gsp_dump_after_xid_119(ctx):
    path = GPUD / "gpu-node-02.dmesg-T-xid119.log"
    ev = read_all(TextLogReader(), path, ctx).events
    assert set(ev["code"]) == {119} and len(ev) == 5 and set(ev["pci"]) == {"0000:9b:00"} and ctx.rejects.total == 0


def test_fabric_manager_log_gives_the_nvswitch_errors(ctx, tmp_path):
    path = GPUD / "gpu-node-03.fabricmanager.log"
    assert isinstance(sniff(path), FabricManagerReader)
    ev = read_all(FabricManagerReader(), path, ctx).events
    assert list(ev["kind"]) == ["sxid"] and int(ev["code"].iloc[0]) == 12028 and ev["severity"].iloc[0] == "error"
    assert ev["entity"].iloc[0] == "gpu-node-03" and "physical id 3 port 61" in ev["message"].iloc[0]
    fatal = tmp_path / "sw1.fabricmanager.log"
    fatal.write_text("[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on "
                     "NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33\n")
    ev = read_all(FabricManagerReader(), fatal, ctx).events
    assert ev["severity"].iloc[0] == "fatal"
    nameless = tmp_path / "fabricmanager.log"
    nameless.write_text(fatal.read_text())
    assert not len(read_all(FabricManagerReader(), nameless, ctx).events)
    assert any("names no host" in m for m in ctx.rejects.messages)


@pytest.mark.parametrize("name,words", [
    ("kmsg.1.log", "/dev/kmsg dump"),
    ("dmesg-erst-7530486857247752193", "pstore crash record"),
])
def test_files_that_cannot_be_placed_in_time_say_what_they_are(name, words):
    path = GPUD / name
    assert sniff(path) is None
    why = describe_unread(path)
    assert words in why and "since" in why and "boot" in why


def test_pstore_record_lists_the_hardware_lines_it_holds(tmp_path):
    record = tmp_path / "dmesg-erst-1"
    record.write_text("Panic#1 Part1\n<4>[ 88.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n")
    assert "1 hardware RAS line(s) (xid 79 at 0000:3b:00)" in describe_unread(record)


def test_aer_correctable_of_current_kernels(tmp_path, ctx):
    """pop-os/pop#3363: `severity=Correctable` (kernels since 6.x; older ones print `Corrected`)."""
    ev = read_all(TextLogReader(), QUOTED / "pop-os-pop-3363.kern.log", ctx).events
    assert list(ev["kind"]) == ["aer", "aer"] and set(ev["severity"]) == {"corrected"}
    assert set(ev["pci"]) == {"0000:00:03.1"} and set(ev["entity"]) == {"bubz"}
    # the year: nothing else in this trace dates the RFC 3164 stamps, so the file's modification year, said
    assert any("modification year" in n for n in ctx.rejects.notes)


def test_printk_caller_id_prefix():
    """qualcomm-linux/kernel#323: `[   24.235980][  T511] ath11k_pci ...` (CONFIG_PRINTK_CALLER)."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "qualcomm-linux-kernel-323.dmesg.txt").read_text().splitlines()
    events = [parse_kernel_message(_MONOTONIC_PREFIX.sub("", ln)) for ln in lines]
    aer = [e for e in events if e is not None]
    assert len(aer) == 1 and aer[0].severity == "corrected" and aer[0].pci == "0000:01:00.0"


def test_ib_port_state_lines_name_the_port_themselves():
    lines = (QUOTED / "kernel-ib-port-state.txt").read_text().splitlines()
    ev = [parse_kernel_message(ln) for ln in lines]
    assert [e.severity for e in ev] == ["error", "notice", "info", "notice", "info"]
    assert ev[0].device == "mlx5_5:1" and ev[3].device == "ibp195s0:1" and ev[0].pci == "0000:ab:00.0"
    resolver = EventResolver(SeriesMapper())
    frame = events_frame([(1.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device) for e in ev])
    assert resolver.resolve(frame)["entity"].iloc[0] == "n1/mlx5_5:1"


def _fallen_off_lines() -> list[str]:
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    return [_MONOTONIC_PREFIX.sub("", ln).strip() for ln in (QUOTED / "nvidia-nvsentinel-155.dmesg.txt")
            .read_text().splitlines()]


def test_fallen_off_the_bus_without_an_xid_journald_form():
    """NVIDIA/NVSentinel#155: the driver's three-line message with no Xid line; journald keeps it as one message."""
    message = "\n".join(_fallen_off_lines()[:3])
    ev = parse_kernel_message(message)
    assert (ev.kind, ev.code, ev.pci) == ("xid", 79, "0000:b3:00")


def test_fallen_off_the_bus_without_an_xid_over_several_records(tmp_path, ctx):
    lines = _fallen_off_lines()
    joiner = MessageJoiner()
    events = [parse_kernel_message(joiner.feed("h", 10.0, ln)) for ln in lines]
    assert [e.code for e in events if e is not None] == [79]
    # as dmesg -T prints it: the later lines indented and without a time
    dmesg = tmp_path / "sn01-b01.dmesg"
    dmesg.write_text("[Mon Mar  2 00:30:43 2026] NVRM: The NVIDIA GPU 0000:18:00.0\n"
                     "                           NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
                     "                           NVRM: fallen off the bus and is not responding to commands.\n"
                     "[Mon Mar  2 00:30:43 2026] NVRM: The NVIDIA probe routine failed for 1 device(s).\n")
    ev = read_all(TextLogReader(), dmesg, ctx).events
    assert list(ev["code"]) == [79] and ctx.rejects.total == 0
    # as rsyslog writes one message with its newlines escaped
    syslog = tmp_path / "kern.log"
    syslog.write_text("2026-03-02T00:30:43+00:00 sn01-b01 kernel: NVRM: The NVIDIA GPU 0000:18:00.0#012NVRM: (PCI ID: "
                      "10de:26b5) installed in this system has#012NVRM: fallen off the bus and is not responding to "
                      "commands.\n")
    assert list(read_all(TextLogReader(), syslog, ctx).events["code"]) == [79]


def test_nvlink5_xids_rate_themselves():
    """gpud's Xid 144/145/149 lines, judged by the decode sheet's row for each (detectors/xid_catalog.py)."""
    lines = (QUOTED / "gpud-nvlink5-xids.txt").read_text().splitlines()
    events = [parse_kernel_message(ln) for ln in lines]
    assert [e.severity for e in events] == ["fatal", "nonfatal", "nonfatal"]
    rules = RuleDetector().fit()
    frame = events_frame([(1.0, f"n1/gpu{k}", "xid", e.code, e.severity, e.message, "kernel", None, None)
                          for k, e in enumerate(events)])
    out = {ev.entity: ev for ev in rules.update(TickInput(30.0, frame, pd.DataFrame(), pd.DataFrame()))}
    # 149 NETIR_LINK_EVT, link-down reason 100101 (V1 IntrInfo): RESET_GPU at "Link Fatal", which NVIDIA says puts the
    # GPU in a "drain and reset recommended" state: sub-healthy (checkpoint, drain, reset), not failed at once
    assert out["n1/gpu0"].level == State.SUBHEALTHY and not out["n1/gpu0"].hard
    assert "NETIR_LINK_EVT/NETIR_LINK_DOWN" in out["n1/gpu0"].reasons[0]
    assert "n1/gpu1" not in out  # 145 RLW_REMAP status 0x1: XID_154_EVAL, the job's unless a 154 comes with it
    assert out["n1/gpu2"].level == State.SUSPECT  # 144 SAW_MVB status 0x8: IGNORE, investigate: a watch


def test_dcgm_blanks_and_impossible_temperatures_are_no_readings(ctx):
    path = QUOTED / "dcgm-blank-and-garbage.prom"
    samples = read_all(OpenMetricsReader(), path, ctx).samples
    got = samples.groupby("metric")["value"].apply(list).to_dict()
    assert got == {"gpu_temp_c": [44.0], "power_w": [70.5]}, got  # no HBM at 9.2e18, no GPU at 345 °C
    not_read = ctx.mapper.values_not_read
    assert not_read["the exporter's blank (field not supported or not read yet)"] == 4
    assert not_read["outside -40..150"] == 4


def test_dual_port_nic_ports_stay_apart():
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "n1", "ports": [
        {"device": "mlx5_0", "port": 1, "pci": "0000:41:00.0", "netdev": "ibp65s0f0"},
        {"device": "mlx5_1", "port": 1, "pci": "0000:41:00.1", "netdev": "ibp65s0f1"},
        {"device": "mlx5_2", "port": 1, "pci": "0000:c1:00.0"}]}]}]})
    resolver = EventResolver(SeriesMapper(topology=topo))
    lines = ["mlx5_core 0000:41:00.0 ibp65s0f0: Link down", "pcieport 0000:41:00.1: PCIe Bus Error: "
             "severity=Uncorrectable (Non-Fatal), type=Transaction Layer, (Requester ID)",
             "mlx5_core 0000:c1:00.0 eth9: Link down"]
    ev = [parse_kernel_message(ln) for ln in lines]
    frame = events_frame([(1.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device) for e in ev])
    assert list(resolver.resolve(frame)["entity"]) == ["n1/mlx5_0:1", "n1/mlx5_1:1", "n1/mlx5_2:1"]


def test_kernel_xid_repeats_are_events_and_only_the_gauge_merges():
    """Application Xids repeating across processes within 120 s are each an event (the repeats-across-jobs rule
    needs them); the dcgm-exporter gauge's report of the same Xid is the one merged."""
    resolver = EventResolver(SeriesMapper(), window_s=120.0)
    rows = [(10.0, "n1/gpu0", "xid", 13, "error", "pid=100, name=python3", "kernel", None, None),
            (40.0, "n1/gpu0", "xid", 13, "error", "pid=200, name=python3", "kernel", None, None),
            (45.0, "n1/gpu0", "xid", 13, "error", "reported by dcgm-exporter", "dcgm-exporter", None, None),
            (70.0, "n1/gpu0", "xid", 13, "error", "pid=300, name=python3", "kernel", None, None)]
    out = resolver.merge_xids(events_frame(rows), 90.0)
    assert list(out["source"]) == ["kernel"] * 3 and resolver.merged == 1


def test_journal_boot_id_change_is_a_boot_event(tmp_path, ctx):
    def rec(ts, boot, msg="NVRM: GPU at PCI:0000:18:00: GPU-1"):
        return json.dumps({"__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "_HOSTNAME": "sn01-b01", "_BOOT_ID": boot,
                           "_TRANSPORT": "kernel", "MESSAGE": msg})

    path = tmp_path / "k.json"
    path.write_text("\n".join([rec(100, "aaaa"), rec(200, "aaaa"), rec(400, "bbbb")]) + "\n")
    ev = read_all(JournalJsonReader(), path, ctx).events
    assert list(ev["kind"]) == ["boot"] and list(ev["ts"]) == [400.0]


def test_rfc3164_year_comes_from_the_rest_of_the_trace(tmp_path, ctx):
    path = tmp_path / "kern.log"
    path.write_text("Dec 31 23:59:58 a kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
                    "Jan  1 00:00:01 b kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
                    "Dec 31 23:59:59 a kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n")
    os.utime(path, (0, 0))  # a copied file: its modification time says 1970
    ctx.span = (1767139200.0, 1767225600.0)  # other files of the trace: 2025-12-31 .. 2026-01-01
    ev = read_all(TextLogReader(), path, ctx).events
    years = [pd.Timestamp(t, unit="s").year for t in ev["ts"]]
    assert years == [2025, 2026, 2025], years  # host a's last line stays in December: rollover is per host
    assert ctx.rejects.notes == [f"{path}: its times name no zone: read as UTC"]  # no year guessed from the file
    assert np.all(np.isfinite(ev["ts"]))


def test_firmware_first_memory_errors_in_syslog(ctx):
    """APEI GHES records (the platform saw the error, not the kernel's EDAC driver): node_exporter#3511 (syslog) and
    jsk-ros-pkg/jsk_robot#1776 (syslog with the monotonic prefix): one corrected memory error each, on its host;
    the lines of the record after the section (address, DIMM) and the cron line are no events."""
    ev = read_all(TextLogReader(), QUOTED / "node-exporter-3511.kern.log", ctx).events
    assert list(ev["kind"]) == ["edac"] and list(ev["severity"]) == ["corrected"]
    assert list(ev["entity"]) == ["proxmox"] and "(D2)" in ev["message"].iloc[0]
    ev = read_all(TextLogReader(), QUOTED / "jsk-robot-1776.kern.log", ctx).events
    assert list(ev["kind"]) == ["edac"] and list(ev["entity"]) == ["pr1012"] and list(ev["code"]) == [1]


def test_a_firmware_first_pcie_error_names_its_device_across_other_drivers_lines(ctx):
    """ovro-lwa/lwa-issues#117 (dmesg): a recoverable PCIe error record whose device_id line comes after the
    section type, with the MCE driver's and EDAC's own lines printed between its lines: the native EDAC UE, the
    record's PCIe error at 0000:5e:00.0 (uncorrected), the MCE notice, in that order."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX, EventRows

    rows = EventRows(ctx, "dmesg", "test")
    for i, line in enumerate((QUOTED / "ovro-lwa-issues-117.dmesg.txt").read_text().splitlines()):
        rows.add(float(i), "gpu09", _MONOTONIC_PREFIX.sub("", line), f"line {i + 1}")
    got = [(r[2], r[4], r[7]) for r in rows.rows]
    assert got == [("edac", "uncorrected", None), ("aer", "uncorrected", "0000:5e:00.0"), ("mce", "corrected", None)]


def test_each_error_of_a_record_takes_its_own_severity():
    """A record's errors each say their type: a Dell server's record of severity recoverable whose error is fatal
    (quoted on the linux-kernel list, \"PM: ACPI: reboot: Use S5 for reboot\" revert), two records interleaved, a
    processor error, and an informational record (no event)."""
    from daemon.ingest.formats.kernel_events import CperRecords

    cper = CperRecords()
    lines = ["{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 5",
             "{1}[Hardware Error]: event severity: recoverable",
             "{1}[Hardware Error]: Error 0, type: fatal",
             "{2}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1",
             "{2}[Hardware Error]: event severity: corrected",
             "{1}[Hardware Error]: section_type: PCIe error",
             "{2}[Hardware Error]:  Error 0, type: corrected",
             "{2}[Hardware Error]:   section_type: general processor error",
             "{1}[Hardware Error]: port_type: 0, PCIe end point",
             "{1}[Hardware Error]: device_id: 0000:04:00.0",
             "{1}[Hardware Error]: vendor_id: 0x14e4, device_id: 0x165f",
             "{3}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 2",
             "{3}[Hardware Error]: event severity: info",
             "{3}[Hardware Error]:   section_type: memory error"]
    events = [e for e in (cper.feed("n1", ln) for ln in lines) if e is not None]
    assert [(e.kind, e.severity, e.pci) for e in events] == [("mce", "corrected", None),
                                                              ("aer", "fatal", "0000:04:00.0")]


def test_an_mlx5_adapter_whose_firmware_stopped_fails_its_port():
    """NVIDIA/NVSentinel's syslog tests: mlx5's health poller finding the adapter's firmware silent is one event, a
    link down of the port on that PCI function (its ports are down until it recovers); the syndrome line after it
    and a command timeout are not events of their own."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "nvsentinel-mlx5-health.txt").read_text().splitlines()
    ev = [e for e in (parse_kernel_message(_MONOTONIC_PREFIX.sub("", ln.removeprefix("kernel: ")).strip())
                      for ln in lines) if e is not None]
    assert [(e.kind, e.severity, e.pci) for e in ev] == [("link", "error", "0000:41:00.0")]
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [
        {"name": "n1", "ports": [{"device": "mlx5_0", "port": 1, "pci": "0000:41:00.0"}]}]}]})
    frame = events_frame([(5.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device) for e in ev])
    resolved = EventResolver(SeriesMapper(topology=topo)).resolve(frame)
    assert list(resolved["entity"]) == ["n1/mlx5_0:1"]
    det = RuleDetector().fit()
    out = det.update(TickInput(5.0, resolved, pd.DataFrame(), pd.DataFrame()))
    assert [(e.entity, e.level, e.hard) for e in out] == [("n1/mlx5_0:1", State.FAILED, True)]


def test_cpu_thermal_throttling_is_one_cooling_watch_on_the_node():
    """erpalma/throttled#186: the x86 thermal throttling interrupt names every core and package of the CPU in one
    burst ("mce: CPU2: Core temperature above threshold, cpu clock throttled (total events = 2675)"), then "normal":
    thermal events of the node, and one cooling watch (suspect, no drain) on it, not one per CPU; the baseline, and
    the lines of normal temperature, say nothing. (Raw dmesg without a boot time: its lines parsed one by one.)"""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "throttled-186.dmesg.txt").read_text().splitlines()
    ev = [parse_kernel_message(_MONOTONIC_PREFIX.sub("", ln).strip()) for ln in lines]
    assert all(e is not None and e.kind == "thermal" and e.pci is None for e in ev)
    assert [e.severity for e in ev] == ["warning"] * 10 + ["info"] * 3
    assert {e.code for e in ev} == set(range(8)) and "total events = 2675" in ev[0].message
    frame = events_frame([(1000.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                          for e in ev])
    out = RuleDetector().fit().update(TickInput(1000.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert [(e.entity, e.level, e.category, e.hard) for e in out] == [("n1", State.SUSPECT, "cooling", False)]
    assert "CPU7 package temperature" in out[0].reasons[0]  # the burst's last warning
    assert RuleDetector(baseline=True).fit().update(TickInput(1000.0, frame, pd.DataFrame(), pd.DataFrame())) == []
    normal = frame[frame["severity"] == "info"]
    assert RuleDetector().fit().update(TickInput(1000.0, normal, pd.DataFrame(), pd.DataFrame())) == []


def test_an_xid_line_of_an_older_driver_without_the_pci_prefix():
    """leptonai/gpud's matcher test: "NVRM: Xid (0000:03:00): 14, Channel 00000001", the address without "PCI:" as
    older drivers print it, was no event at all (a DBE, Xid 48, in that shape would have been lost); the same GPU
    address as with the prefix."""
    line = (QUOTED / "gpud-xid-without-pci-prefix.txt").read_text().strip()
    ev = parse_kernel_message(line.removeprefix("[...] "))
    assert (ev.kind, ev.code, ev.pci, ev.message) == ("xid", 14, "0000:03:00", "Channel 00000001")
    dbe = parse_kernel_message("NVRM: Xid (0000:af:00): 48, An uncorrectable double bit error (DBE) has been detected")
    assert (dbe.code, dbe.pci) == (48, parse_kernel_message("NVRM: Xid (PCI:0000:af:00): 48, x").pci)
    assert parse_kernel_message("NVRM: Xid (invalid): some error") is None


def test_a_thermal_zone_past_its_critical_trip_fails_the_node_for_its_cooling():
    """The kernel powering a host off for heat: thermal_core's line before 5.12 (a patch's commit message, quoted by
    Phoronix) and since (the zone's type, no degrees), and the old ACPI thermal driver's (a kern.log on
    rigacci.org): a critical ``thermal`` event of the node, which fails it for its cooling at once (a hard fault,
    the static baseline too), where a CPU's throttling is only a watch."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "kernel-thermal-shutdown.txt").read_text().splitlines()
    ev = [parse_kernel_message(_MONOTONIC_PREFIX.sub("", ln.split("kernel: ", 1)[1]).strip()) for ln in lines]
    assert [(e.kind, e.code, e.severity) for e in ev] == [("thermal", 15, "critical"), ("thermal", None, "critical"),
                                                          ("thermal", 0, "critical")]
    assert "thermal zone 15 past its critical temperature at 101 °C" in ev[0].message
    assert "the ACPI thermal zone" in ev[1].message and "(x86_pkg_temp)" in ev[2].message
    assert parse_kernel_message("thermal thermal_zone2: failed to read out thermal zone (-61)") is None
    for baseline in (False, True):
        frame = events_frame([(1000.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                              for e in ev[:1]])
        out = RuleDetector(baseline=baseline).fit().update(TickInput(1000.0, frame, pd.DataFrame(), pd.DataFrame()))
        assert [(e.entity, e.level, e.category, e.hard) for e in out] == [("n1", State.FAILED, "cooling", True)]


def test_a_gpu_the_driver_could_not_initialize(ctx):
    """NVIDIA/gpu-operator#1146: one GPU of a worker failing RmInitAdapter at every try: a gpu_init event each time
    (the minor-number line after it is none), sub-healthy, not failed (a driver mismatch fails every GPU alike)."""
    ev = read_all(TextLogReader(), QUOTED / "gpu-operator-1146.kern.log", ctx).events
    assert list(ev["kind"]) == ["gpu_init", "gpu_init"] and set(ev["pci"]) == {"0000:0a:00"}
    assert "0x24:0x72:1568" in ev["message"].iloc[0]
    frame = ev.assign(entity="worker4/gpu5", pci=None)
    out = RuleDetector().fit().update(TickInput(1000.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert {(e.entity, e.level, e.category, e.hard) for e in out} == {("worker4/gpu5", State.SUBHEALTHY, "gpu_bus",
                                                                       False)}
    assert RuleDetector(baseline=True).fit().update(TickInput(1000.0, frame, pd.DataFrame(), pd.DataFrame())) == []


def test_an_mlx5_adapter_short_of_slot_power_makes_its_port_sub_healthy():
    """leptonai/gpud#348: 'Detected insufficient power on the PCIe slot (27W)': the port still works but its adapter
    throttles or stops; sub-healthy (inspect the slot), not failed, and nothing for the static baseline."""
    line = (QUOTED / "gpud-348-mlx5-power.txt").read_text().strip()
    ev = parse_kernel_message(line.split(" kernel: ", 1)[1])
    assert (ev.kind, ev.severity, ev.pci) == ("link", "warning", "0000:5c:00.0") and "27 W" in ev.message
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [
        {"name": "n1", "ports": [{"device": "mlx5_3", "port": 1, "pci": "0000:5c:00.0"}]}]}]})
    frame = EventResolver(SeriesMapper(topology=topo)).resolve(
        events_frame([(5.0, "n1", ev.kind, ev.code, ev.severity, ev.message, "kernel", ev.pci, ev.device)]))
    out = RuleDetector().fit().update(TickInput(5.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert [(e.entity, e.level, e.hard) for e in out] == [("n1/mlx5_3:1", State.SUBHEALTHY, False)]
    assert RuleDetector(baseline=True).fit().update(TickInput(5.0, frame, pd.DataFrame(), pd.DataFrame())) == []


def test_ethernet_nic_link_lines_are_link_events_of_their_port(ctx):
    """Link down/up as the Ethernet/RoCE drivers print it, "<driver> <PCI> <netdev>: NIC Link is Down" (ixgbe in a
    syslog, ntop/PF_RING#293; igb in SONiC's syslog with fractions of a second and a severity word,
    sonic-net/sonic-buildimage#7310, which was sniffed as OpenMetrics and lost; bnxt_en and ice from their format
    strings) and sfc's "link down" (coreos/bugs#412), each on the port its PCI function and netdev name."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    got = {}
    for name in ("ntop-pf-ring-293.syslog", "sonic-buildimage-7310.syslog"):
        path = QUOTED / name
        assert isinstance(sniff(path), TextLogReader), name
        ev = read_all(TextLogReader(), path, ctx).events
        got[name] = [(m, s) for m, s in zip(ev["message"], ev["severity"])]
    assert got == {"ntop-pf-ring-293.syslog": [("eth11 link up", "info"), ("eth11 link down", "error")],
                   "sonic-buildimage-7310.syslog": [("eth0 link down", "error")]}
    assert ctx.rejects.total == 0
    sfc = [parse_kernel_message(_MONOTONIC_PREFIX.sub("", ln))  # raw dmesg: no clock to place it by
           for ln in (QUOTED / "coreos-bugs-412.dmesg.txt").read_text().splitlines()]
    assert [(e.message, e.pci) for e in sfc if e] == [("ens1f1 link down", "0000:06:00.1"),
                                                       ("ens1f0 link down", "0000:06:00.0")]
    sonic = read_all(TextLogReader(), QUOTED / "sonic-buildimage-7310.syslog", ctx).events
    assert sonic["ts"].iloc[0] % 60 == pytest.approx(38.106121)  # 21:05:38.106121, the fraction kept

    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "n1", "ports": [
        {"device": "bnxt_re0", "port": 1, "pci": "0000:3b:00.0", "netdev": "ens1f0np0"},
        {"device": "bnxt_re1", "port": 1, "pci": "0000:3b:00.1", "netdev": "ens1f1np1"},
        {"device": "irdma0", "port": 1, "pci": "0000:ab:00.0", "netdev": "ens5f0"}]}]}]})
    ev = [parse_kernel_message(ln) for ln in (QUOTED / "kernel-nic-link-formats.txt").read_text().splitlines()]
    assert [(e.kind, e.severity) for e in ev] == [("link", "info"), ("link", "error"), ("link", "info"),
                                                   ("link", "error")]
    frame = events_frame([(1.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device) for e in ev])
    assert list(EventResolver(SeriesMapper(topology=topo)).resolve(frame)["entity"]) == [
        "n1/bnxt_re0:1", "n1/bnxt_re1:1", "n1/irdma0:1", "n1/irdma0:1"]
    for line in ("sfc 0000:06:00.1 ens1f1: renamed from eth1", "e1000e: eth1 NIC Link is Down",
                 "bpmod: eth11 is in the Bypass mode now."):
        assert parse_kernel_message(line) is None, line  # no port to put it on, or no link news


def test_mlx5_port_module_events_and_the_adapters_temperature_warning():
    """mlx5's port module events (NVIDIA/NVSentinel's syslog tests, and lines of the driver's format strings): a cable
    unplugged fails the port of its PCI function (the second port of a dual-port NIC, not the first), a module error
    or the adapter over its warning temperature makes it sub-healthy, a cable plugged is a port on its way up; the
    health syndrome's text is no event of its own; during a reboot's grace an unplugged cable fails nothing."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "mlx5-module-and-temperature.txt").read_text().splitlines()
    ev = [parse_kernel_message(_MONOTONIC_PREFIX.sub("", ln.removeprefix("kernel: ")).strip()) for ln in lines]
    assert [(e.kind, e.severity, e.pci) if e else None for e in ev] == [
        ("link", "warning", "0000:5c:00.0"), ("link", "error", "0000:63:00.1"), ("link", "warning", "0000:41:00.1"),
        None, ("link", "notice", "0000:0b:00.0")]
    assert "High Temperature" in ev[0].message and "unplugged" in ev[1].message
    ports = [("mlx5_0", "0000:5c:00.0"), ("mlx5_1", "0000:63:00.0"), ("mlx5_2", "0000:63:00.1"),
             ("mlx5_3", "0000:41:00.1"), ("mlx5_4", "0000:0b:00.0")]
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [
        {"name": "n1", "ports": [{"device": d, "port": 1, "pci": pci} for d, pci in ports]}]}]})
    frame = events_frame([(5.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                          for e in ev if e is not None])
    resolved = EventResolver(SeriesMapper(topology=topo)).resolve(frame)
    assert list(resolved["entity"]) == ["n1/mlx5_0:1", "n1/mlx5_2:1", "n1/mlx5_3:1", "n1/mlx5_4:1"]
    out = RuleDetector().fit().update(TickInput(5.0, resolved, pd.DataFrame(), pd.DataFrame()))
    assert sorted((e.entity, e.level, e.category, e.hard) for e in out) == [
        ("n1/mlx5_0:1", State.SUBHEALTHY, "fabric_link", False), ("n1/mlx5_2:1", State.FAILED, "fabric_link", True),
        ("n1/mlx5_3:1", State.SUBHEALTHY, "fabric_link", False)]
    in_grace = RuleDetector().fit().update(TickInput(5.0, resolved, pd.DataFrame(), pd.DataFrame(),
                                                     frozenset({"n1"})))
    assert all(e.level < State.FAILED for e in in_grace)


def test_rfc5424_syslog_is_read_with_or_without_its_priority(ctx, tmp_path):
    """RFC 5424 lines (rsyslog's protocol-23 format, syslog-ng, network collectors): the RFC's own examples (with
    "<PRI>1", structured data or "-") and a kernel log stored without the priority (linux-kernel, Message-ID
    462e7bd3-d1f2-3718-fde9-77b418e9fd91@gmx.com) are taken apart into time, host, tag and message; before, the
    kernel's lines matched the RFC 3339 shape with "kernel - - - BTRFS critical (device sda2)" as their tag and were
    dropped as another program's."""
    from daemon.ingest.formats.kernellog import TextLogReader as R

    lkml = (QUOTED / "lkml-462e7bd3-rfc5424.log").read_text().splitlines()
    assert isinstance(sniff(QUOTED / "lkml-462e7bd3-rfc5424.log"), TextLogReader)
    parsed = [R._parse(R._detect(ln), ln, 1970) for ln in lkml]
    assert [(p[1], p[2]) for p in parsed] == [("server02", "kernel")] * 4
    assert parsed[0][0] == pytest.approx(1672037085.0)  # 07:44:45+01:00
    assert parsed[0][3].startswith("BTRFS critical (device sda2): corrupt leaf")
    examples = [R._parse(R._detect(ln), ln, 1970) for ln in (QUOTED / "rfc5424-examples.log").read_text().splitlines()]
    assert [(p[1], p[2], p[3][:24]) for p in examples] == [
        ("mymachine.example.com", "su", "'su root' failed for lon"),
        ("192.0.2.1", "myproc", "%% It's time to make the"),
        ("mymachine.example.com", "evntslog", "An application event log"), ("mymachine.example.com", "evntslog", "")]
    assert examples[1][0] == pytest.approx(1061727255.000003)  # 05:14:15.000003-07:00
    # a fleet's kernel record in that shape is an event of its host
    path = tmp_path / "kern.log"
    path.write_text("<4>1 2025-01-21T04:41:44.283302+00:00 gpu-node-01 kernel - - - [849085.223282] NVRM: Xid "
                    "(PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus.\n" + "\n".join(lkml) + "\n")
    ev = read_all(TextLogReader(), path, ctx).events
    assert list(zip(ev["entity"], ev["code"])) == [("gpu-node-01", 79)] and ctx.rejects.total == 0


@pytest.mark.parametrize("mode,tz", [("short", "UTC"), ("short-precise", "UTC"), ("short-iso", "Asia/Shanghai"),
                                     ("short-iso-precise", "America/New_York"), ("short-full", "UTC"),
                                     ("short-unix", "Europe/Berlin")])
def test_every_short_journalctl_output_is_read_at_its_time(journal_file, tmp_path, ctx, mode, tz):
    """What the real journalctl prints in each of its short output modes (journalctl(1)), saved to a file, is read
    at the record's time; -o short-full was sniffed as OpenMetrics (its weekday looked like a metric name) and every
    record lost without a word, -o short-unix was no format."""
    import subprocess

    out, write = journal_file
    write((1737434504.283302, "NVRM: Xid (PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus."))
    text = subprocess.run(["journalctl", f"--file={out}", f"--output={mode}", "--no-pager", "-q"],
                          env={**os.environ, "TZ": tz}, capture_output=True, text=True, check=True).stdout
    path = tmp_path / "kern.log"
    path.write_text(text)
    os.utime(path, (1737434600, 1737434600))  # saved then: the year of stamps without one (short, short-precise)
    assert isinstance(sniff(path), TextLogReader), text
    ev = read_all(TextLogReader(), path, ctx).events
    assert list(zip(ev["entity"], ev["code"])) == [("sn01-b01", 79)], text
    precise = mode in ("short-precise", "short-iso-precise", "short-unix")
    assert ev["ts"].iloc[0] == pytest.approx(1737434504.283302 if precise else 1737434504.0, abs=1e-6), text


def test_short_full_in_a_named_zone_is_refused_with_what_to_do(journal_file, tmp_path, ctx):
    import subprocess

    out, write = journal_file
    write((1737434504.283302, "NVRM: Xid (PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus."))
    path = tmp_path / "kern.log"
    path.write_text(subprocess.run(["journalctl", f"--file={out}", "--output=short-full", "--no-pager", "-q"],
                                   env={**os.environ, "TZ": "Europe/Berlin"}, capture_output=True, text=True,
                                   check=True).stdout)
    assert len(read_all(TextLogReader(), path, ctx).events) == 0 and ctx.rejects.total == 1
    assert "name their zone (CET) but not its offset" in ctx.rejects.messages[-1]


@pytest.mark.parametrize("tz, when", [("Asia/Shanghai", 1737434504.283302), ("Europe/Berlin", 1751334504.0),
                                      ("Europe/Berlin", 1737434504.283302)])
def test_short_full_in_the_hosts_zone_is_read_at_its_time(journal_file, tmp_path, ctx, tz, when):
    """journalctl -o short-full on a host in China names its stamps CST (China's, or America's Central: the name alone
    does not say): where the hosts' zone is given and goes by that name at the stamp's time, the stamp is read in it
    (Berlin's CET in January and CEST in July)."""
    import subprocess

    from daemon.timetext import parse_zone

    out, write = journal_file
    write((when, "NVRM: Xid (PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus."))
    path = tmp_path / "kern.log"
    text = subprocess.run(["journalctl", f"--file={out}", "--output=short-full", "--no-pager", "-q"],
                          env={**os.environ, "TZ": tz}, capture_output=True, text=True, check=True).stdout
    path.write_text(text)
    ctx.zone = parse_zone(tz)
    ev = read_all(TextLogReader(), path, ctx).events
    assert list(ev["code"]) == [79] and ev["ts"].iloc[0] == float(int(when)) and ctx.rejects.total == 0, text


@pytest.mark.parametrize("lang", ["zh_CN.UTF-8", "ja_JP.UTF-8", "de_DE.UTF-8", "fr_FR.UTF-8", "ru_RU.UTF-8"])
def test_journalctl_short_in_the_hosts_language_is_read(journal_file, tmp_path, ctx, lang):
    """The real journalctl's short output under a host's LANG prints the month in its language ("12月 05 ...", "Okt 06
    ..."): read at the record's time (the file was not even taken for a kernel log under zh_CN, and German lines were
    rejected: the Xid lost)."""
    import subprocess

    require(os.path.isdir(f"/usr/lib/locale/{lang.replace('UTF-8', 'utf8')}"),
            f"the {lang} locale (apt-get install locales-all; scripts/test.sh installs it)")
    out, write = journal_file
    times = [1737434504.0, 1741234504.0, 1751334504.0, 1760004504.0, 1765881504.0]  # 2025: Jan, Mar, Jul, Oct, Dec
    write(*[(t, "NVRM: Xid (PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus.") for t in times])
    text = subprocess.run(["journalctl", f"--file={out}", "--output=short", "--no-pager", "-q"],
                          env={**os.environ, "TZ": "UTC", "LANG": lang, "LC_ALL": lang}, capture_output=True,
                          text=True, check=True).stdout
    path = tmp_path / "kern.log"
    path.write_text(text)
    os.utime(path, (1765881600, 1765881600))  # saved then: the year of stamps without one
    assert isinstance(sniff(path), TextLogReader), text
    ev = read_all(TextLogReader(), path, ctx).events
    assert list(ev["ts"]) == times and ctx.rejects.total == 0, (text, ctx.rejects.messages)


def test_a_log_kept_in_local_time_is_read_in_the_zone_named(tmp_path, ctx):
    """Syslog and dmesg -T stamps name no zone; hosts often keep local time (a fleet in China at UTC+8). Read as UTC,
    the real kern.log of NVIDIA/gpu-operator#1146 written at 11:50 Beijing time would put its events 8 hours after the
    file was written: the summary says so and how to name the zone; named (an IANA zone, or an offset), its events
    fall at their true time, and the note says the zone read."""
    import datetime as dt
    import shutil

    from daemon.timetext import parse_zone

    path = tmp_path / "kern.log"
    shutil.copy(QUOTED / "gpu-operator-1146.kern.log", path)
    written = dt.datetime(2025, 12, 2, 3, 51, tzinfo=dt.UTC).timestamp()  # 11:51 in Beijing, a minute after its end
    os.utime(path, (written, written))
    ctx.span = (written - 86400, written)  # dates the year, as other files of a trace do
    ev = read_all(TextLogReader(), path, ctx).events
    assert ev["ts"].max() == dt.datetime(2025, 12, 2, 11, 50, 34, tzinfo=dt.UTC).timestamp()
    assert ctx.rejects.notes[0] == f"{path}: its times name no zone: read as UTC"
    assert "its last line is stamped 8.0 h after the file was last written, read as UTC" in ctx.rejects.notes[1]
    assert "--timezone ZONE (e.g. Asia/Shanghai)" in ctx.rejects.notes[1]
    for zone in ("Asia/Shanghai", "+08:00", "UTC+8"):
        ctx.rejects.notes.clear()
        ctx.zone = parse_zone(zone)
        ev = read_all(TextLogReader(), path, ctx).events
        assert ev["ts"].max() == written - 26 and list(ev["kind"]) == ["gpu_init", "gpu_init"]
        assert len(ctx.rejects.notes) == 1 and ctx.rejects.notes[0].endswith(f"read as {ctx.zone}")
    with pytest.raises(ValueError, match="no time zone"):
        parse_zone("Mars/Base")
    with pytest.raises(ValueError, match="at most 14 hours"):
        parse_zone("+15:00")


def test_journalctl_own_lines_are_not_records(journal_file, tmp_path, ctx):
    """journalctl prints lines of its own among the records: "-- Boot ID --" between boots (the real journalctl
    here, without -q), "-- Logs begin at ..., end at ... --" heading its output before systemd 246 (RHEL 8, Ubuntu
    20.04: such a file was not taken for a kernel log at all, its Xids lost), and -x's catalog text. They are
    skipped, neither records nor rejects."""
    import subprocess

    import shutil

    out, _ = journal_file  # (the fixture requires systemd-journal-remote: two boots written here at once)
    export = "".join(
        f"__REALTIME_TIMESTAMP={int(ts * 1e6)}\n__MONOTONIC_TIMESTAMP=1\n_BOOT_ID={boot}\n_HOSTNAME=sn01-b01\n"
        f"_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\nMESSAGE={msg}\n\n" for ts, boot, msg in (
            (1765881504.0, "0123456789abcdef0123456789abcdef",
             "NVRM: Xid (PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus."),
            (1765881904.0, "fedcba9876543210fedcba9876543210", "NVRM: Xid (PCI:0000:38:00): 48, pid=0, DBE.")))
    remote = shutil.which("systemd-journal-remote") or "/lib/systemd/systemd-journal-remote"
    subprocess.run([remote, f"--output={out}", "--split-mode=none", "-"], input=export.encode(), check=True,
                   capture_output=True)
    text = subprocess.run(["journalctl", f"--file={out}", "--output=short", "--no-pager"],
                          env={**os.environ, "TZ": "UTC"}, capture_output=True, text=True, check=True).stdout
    assert "-- Boot fedcba9876543210fedcba9876543210 --" in text, text
    head = "-- Logs begin at Tue 2025-12-16 10:00:00 UTC, end at Tue 2025-12-16 10:45:04 UTC. --\n"
    catalog = "-- Subject: A start job for unit x has finished successfully\n-- Defined-By: systemd\n--\n"
    path = tmp_path / "kern.log"
    path.write_text(head + text + catalog)
    os.utime(path, (1765882000, 1765882000))
    assert isinstance(sniff(path), TextLogReader)
    ev = read_all(TextLogReader(), path, ctx).events
    assert list(ev["code"]) == [79, 48] and list(ev["ts"]) == [1765881504.0, 1765881904.0]
    assert ctx.rejects.total == 0, ctx.rejects.messages


def test_journalctl_output_without_a_record_is_said_so(tmp_path):
    from daemon.ingest.formats import describe_unread

    path = tmp_path / "kern.log"
    path.write_text("-- Logs begin at Tue 2025-12-16 10:00:00 UTC, end at Tue 2025-12-16 10:45:04 UTC. --\n"
                    "-- No entries --\n")
    assert sniff(path) is None
    assert describe_unread(path) == "journalctl's output without a record (it says '-- No entries --')"


# the kernel's records as /dev/kmsg-style raw lines (seconds since boot) for util-linux's dmesg -F to print
_KMSG_RECORDS = [(201.650687, 6, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06"),
                 (201.650700, 4, "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."),
                 (205.100000, 6, "mlx5_core 0000:0c:00.0: Port module event: module 0, Cable plugged"),
                 (400.000000, 4, "NVRM: Xid (PCI:0000:3a:00): 48, pid=1234, An uncorrectable double bit error"),
                 (400.250000, 6, "  (continued)"),
                 (4000.000000, 4, "NVRM: Xid (PCI:0000:18:00): 31, pid=77, Ch 00000008, intr 10000000. MMU Fault"),
                 (4012.500000, 4, "NVRM: Xid (PCI:0000:3a:00): 13, pid=77, Graphics Exception")]


def _minute_aligned(records: list[tuple[float, int, str]]) -> list[tuple[float, int, str]]:
    """The records moved later by under a minute, so that the real dmesg, which dates a record by this machine's
    boot time, puts the first about 10 s into its minute: then each record printed as the time since the one before
    (the 2nd, 3rd, 5th and 7th) shares its minute with that one whatever the clock reads (in a new minute dmesg's
    reltime would stamp it with that minute instead)."""
    import time

    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    shift = (10.0 - (boot + records[0][0])) % 60.0
    return [(t + shift, level, message) for t, level, message in records]


def _dmesg(raw: Path, env: dict[str, str], *args: str) -> str:
    import shutil
    import subprocess

    require(shutil.which("dmesg") is not None, "util-linux's dmesg")
    return subprocess.run(["dmesg", "-F", str(raw), *args], env={**os.environ, **env}, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.parametrize("lang,decode", [("C.UTF-8", False), ("de_DE.UTF-8", False), ("zh_CN.UTF-8", True)])
def test_dmesg_reltime_is_read_to_its_minute(tmp_path, ctx, lang, decode):
    """util-linux's ``dmesg --time-format reltime`` (what ``dmesg -H`` prints) stamps a record in a new minute with
    that minute alone (no year, no seconds: ``[Dec 5 02:39]``) and the records after it with their time since the
    one before (``[  +0.000013]``; ``+0,000013`` in German). Each record is read within 30 s of the time the real
    dmesg gives it in ISO, those after a stamped one exactly apart from it; the events are those of the ISO output.
    (Its RAS lines were skipped with the file before.)"""
    require(lang.startswith("C.") or os.path.isdir(f"/usr/lib/locale/{lang.replace('UTF-8', 'utf8')}"),
            f"the {lang} locale (apt-get install locales-all; scripts/test.sh installs it)")
    raw = tmp_path / "records.kmsg"
    raw.write_text("".join(f"<{level}>[{t:12.6f}] {message}\n" for t, level, message in _minute_aligned(_KMSG_RECORDS)))
    env = {"TZ": "UTC", "LANG": lang, "LC_ALL": lang}
    rel = tmp_path / "sn01-b01.dmesg"
    rel.write_text(_dmesg(raw, env, "--time-format", "reltime", *(["--decode"] if decode else [])))
    iso = tmp_path / "sn01-b01.dmesg.iso"
    iso.write_text(_dmesg(raw, {"TZ": "UTC", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}, "--time-format", "iso"))
    assert isinstance(sniff(rel), TextLogReader), rel.read_text()
    got = read_all(TextLogReader(), rel, ctx).events
    want = read_all(TextLogReader(), iso, ctx).events
    assert list(got["kind"]) == list(want["kind"]) and len(got) == len(want) == 5, rel.read_text()
    got, want = got[got["kind"] == "xid"], want[want["kind"] == "xid"]
    assert list(got["code"]) == list(want["code"]) == [79, 48, 31, 13], rel.read_text()
    assert list(got["pci"]) == list(want["pci"])
    assert np.all(np.abs(got["ts"].to_numpy() - want["ts"].to_numpy()) <= 30.0), (rel.read_text(), iso.read_text())
    assert want["ts"].iloc[2] // 60 == want["ts"].iloc[3] // 60, "the 31 and the 13 were to share a minute"
    assert got["ts"].iloc[3] - got["ts"].iloc[2] == pytest.approx(12.5, abs=1e-6)  # "+12.500000" after the 31
    assert ctx.rejects.total == 0, ctx.rejects.messages


def test_dmesg_reltime_cut_within_a_minute_says_why_its_head_is_not_read(tmp_path, ctx):
    """A reltime output cut at its head (``dmesg -H | tail``) begins with times since records it does not hold: those
    lines are rejected saying so; from the first stamped minute on, the records are read."""
    raw = tmp_path / "records.kmsg"
    raw.write_text("".join(f"<{level}>[{t:12.6f}] {message}\n" for t, level, message in _minute_aligned(_KMSG_RECORDS)))
    lines = _dmesg(raw, {"TZ": "UTC", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}, "--time-format", "reltime")
    path = tmp_path / "sn01-b01.dmesg"
    path.write_text("".join(lines.splitlines(keepends=True)[1:]))
    ev = read_all(TextLogReader(), path, ctx).events
    assert list(ev["code"]) == [48, 31, 13]
    assert len(ctx.rejects.messages) == 2 and all("no stamped record before it" in m for m in ctx.rejects.messages)


@pytest.mark.parametrize("mode", ["json-pretty", "json-seq", "json-sse", "verbose"])
def test_journalctls_other_outputs_are_read_at_their_time(journal_file, tmp_path, ctx, mode):
    """What the real journalctl prints with -o json-pretty (an object over lines), json-seq (RFC 7464), json-sse
    (``data:`` lines) and verbose (every field, a value's later lines indented), kernel records only, at their exact
    time; a message over two lines is one message. json-pretty was taken for a Prometheus response and read as
    nothing, without a word; the others were skipped as no format (their Xids listed, not read)."""
    import struct
    import subprocess

    out, _ = journal_file
    remote = shutil.which("systemd-journal-remote") or "/lib/systemd/systemd-journal-remote"
    entries = [(1737434504.283302, b"NVRM: Xid (PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus."),
               (1737434505.0, b"nvidia-modeset: Loading\n  NVIDIA Kernel Mode Setting Driver"),  # over two lines
               (1737434505.5, b"mlx5_core 0000:0c:00.0: Port module event: module 0, Cable unplugged"),
               (1737434506.25, b"NVRM: Xid (PCI:0000:38:00): 48, pid=1, An uncorrectable double bit error")]
    export = b"".join(
        f"__REALTIME_TIMESTAMP={int(ts * 1e6)}\n__MONOTONIC_TIMESTAMP={i + 1}\n_BOOT_ID={'0' * 32}\n"
        f"_HOSTNAME=sn01-b01\n_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\nMESSAGE\n".encode()
        + struct.pack("<Q", len(msg)) + msg + b"\n\n" for i, (ts, msg) in enumerate(entries))
    subprocess.run([remote, f"--output={out}", "--split-mode=none", "-"], input=export, check=True, capture_output=True)
    text = subprocess.run(["journalctl", f"--file={out}", f"--output={mode}", "--no-pager", "-q"],
                          env={**os.environ, "TZ": "Asia/Shanghai"}, capture_output=True, text=True, check=True).stdout
    path = tmp_path / "kern.log"
    path.write_text(text)
    reader = sniff(path)
    assert reader is not None and type(reader).__name__ == (
        "JournalVerboseReader" if mode == "verbose" else "JournalJsonReader"), text
    ev = read_all(reader, path, ctx).events
    assert list(ev["kind"]) == ["xid", "link", "xid"] and list(ev["code"].iloc[::2]) == [79, 48], ev
    assert list(ev["ts"]) == pytest.approx([entries[i][0] for i in (0, 2, 3)], abs=1e-6)
    assert list(ev["entity"].str.split("/").str[0]) == ["sn01-b01"] * 3
    assert ctx.rejects.total == 0, ctx.rejects.messages


def test_json_that_is_no_prometheus_response_is_said_so(tmp_path, ctx):
    """A JSON file whose top object is not a Prometheus response (a pretty-printed journal entry without its time,
    an inventory) was read as an empty query result without a word: it is refused, saying what it is not."""
    from daemon.ingest.formats import QueryRangeReader

    path = tmp_path / "inventory.json"
    path.write_text('{\n  "hostname": "sn01-b01",\n  "gpus": 8\n}\n')
    assert isinstance(sniff(path), QueryRangeReader)
    assert read_all(QueryRangeReader(), path, ctx).samples.empty
    assert ctx.rejects.messages == [f"{path}: JSON that is no Prometheus query response (no 'status' and 'data' at "
                                    "its top): nothing read"]
    empty = tmp_path / "empty.json"
    empty.write_text('{"status": "success", "data": {"resultType": "matrix", "result": []}}')
    assert read_all(QueryRangeReader(), empty, ctx).samples.empty and len(ctx.rejects.messages) == 1


@pytest.mark.parametrize("mode", ["short-monotonic", "short-delta"])
def test_journalctls_outputs_stamped_since_boot_say_how_to_record(journal_file, tmp_path, ctx, mode):
    """The real journalctl's -o short-monotonic and short-delta count seconds since boot: they cannot be placed in
    time, and the reason names journalctl's own way out (it spoke of dmesg, or of no format, before)."""
    import subprocess

    out, write = journal_file
    write((1737434504.283302, "NVRM: Xid (PCI:0000:38:00): 79, pid=0, GPU has fallen off the bus."))
    path = tmp_path / "kern.log"
    path.write_text(subprocess.run(["journalctl", f"--file={out}", f"--output={mode}", "--no-pager", "-q"],
                                   capture_output=True, text=True, check=True).stdout)
    reader = sniff(path)
    if reader is not None:
        assert read_all(reader, path, ctx).events.empty
    said = " ".join(ctx.rejects.messages) if reader is not None else describe_unread(path)
    assert f"journalctl -o {mode}" in said and "journalctl -o short-iso" in said, said


def test_dmesg_json_says_it_cannot_be_placed_in_time(tmp_path, ctx):
    """util-linux's ``dmesg --json`` (2.38: seconds since boot whatever --time-format says) is refused saying so
    and how to record instead (it was taken for a Prometheus response and read as nothing)."""
    from daemon.ingest.formats import QueryRangeReader

    raw = tmp_path / "records.kmsg"
    raw.write_text("".join(f"<{level}>[{t:12.6f}] {message}\n" for t, level, message in _KMSG_RECORDS[:2]))
    path = tmp_path / "sn01-b01.dmesg.json"
    path.write_text(_dmesg(raw, {"TZ": "UTC"}, "--json"))
    assert isinstance(sniff(path), QueryRangeReader)
    assert read_all(QueryRangeReader(), path, ctx).samples.empty
    assert len(ctx.rejects.messages) == 1 and "dmesg --json: its times count seconds since boot" in \
        ctx.rejects.messages[0]


def test_mlx5s_health_buffer_lines_of_newer_kernels():
    """mlx5's "Health issue observed" (kernels from 5.17): the firmware's own severity ERROR or worse is the adapter
    unwell (sub-healthy port), WARNING is said by the adapter's own temperature lines; "PCI slot is unavailable" is the
    adapter gone from PCI, its port failed. Lines made from health.c's format strings."""
    ev = [parse_kernel_message(ln) for ln in (QUOTED / "mlx5-health-formats.txt").read_text().splitlines()]
    assert [(e.kind, e.severity, e.pci) if e else None for e in ev] == [
        ("link", "warning", "0000:ca:00.0"), None, None, ("link", "error", "0000:cc:00.0")]
    assert "firmware internal error" in ev[0].message
    ports = [{"device": "mlx5_0", "port": 1, "pci": "0000:ca:00.0"},
             {"device": "mlx5_2", "port": 1, "pci": "0000:cc:00.0"}]
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "n1", "ports": ports}]}]})
    frame = events_frame([(5.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                          for e in ev if e is not None])
    resolved = EventResolver(SeriesMapper(topology=topo)).resolve(frame)
    out = RuleDetector().fit().update(TickInput(5.0, resolved, pd.DataFrame(), pd.DataFrame()))
    assert sorted((e.entity, e.level) for e in out) == [("n1/mlx5_0:1", State.SUBHEALTHY),
                                                         ("n1/mlx5_2:1", State.FAILED)]


def test_the_kernels_handling_of_a_poisoned_page_is_read_as_rasdaemon_reads_it():
    """mm/memory-failure.c's "recovery action" lines: contained (Recovered) is a deferred memory error, a sub-healthy
    host; not contained (Ignored) an uncorrected one, a failed host (as rasdaemon's memory_failure_event rows)."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "memory-failure.dmesg.txt").read_text().splitlines()
    ev = [parse_kernel_message(_MONOTONIC_PREFIX.sub("", ln).strip()) for ln in lines]
    assert [(e.kind, e.severity) if e else None for e in ev] == [
        None, ("edac", "deferred"), None, ("edac", "deferred"), ("edac", "deferred"), ("edac", "uncorrected")]
    assert ev[4].message == "memory failure at page 0x3b6c1f (dirty LRU page): Recovered"
    frame = events_frame([(5.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                          for e in ev[4:]])
    out = RuleDetector().fit().update(TickInput(5.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert max(e.level for e in out) == State.FAILED and {e.level for e in out} == {State.SUBHEALTHY, State.FAILED}


def test_amdgpus_fatal_error_interrupt_as_fleets_print_it_fails_its_gpu():
    """The fatal-error interrupt as amdgpu prints it, in lower case (ROCm issues 4021, an MI300X fleet with "{1}"
    before it; 1386 and 1886, MI50s): a fatal amdgpu event of that GPU, failed; the ACA register dump beside it is no
    event of its own."""
    import re

    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "rocm-athub-fatal.dmesg.txt").read_text().splitlines()
    ev = [parse_kernel_message(re.sub(r"^\[[A-Z][a-z]{2} [^]]*\] ", "", _MONOTONIC_PREFIX.sub("", ln)).strip())
          for ln in lines]
    assert [(e.kind, e.severity, e.pci) for e in ev if e] == [
        ("amdgpu", "fatal", "0000:68:00"), ("amdgpu", "fatal", "0000:83:00"), ("amdgpu", "fatal", "0000:e3:00")]
    frame = events_frame([(5.0, "n1/gpu0", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                          for e in ev[:1]])
    out = RuleDetector().fit().update(TickInput(5.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert [(e.entity, e.level, e.hard) for e in out] == [("n1/gpu0", State.FAILED, True)]


def test_amdgpu_failing_to_bring_a_gpu_up_is_read_as_nvidias_rminitadapter():
    """amdgpu_device.c's "Fatal error during GPU init" (its dev_err: the device's prefix, then amdgpu's; ROCm issues
    1552 and 5008 name it for an MI50 and an MI300A the driver could not initialize): a gpu_init event of that GPU,
    sub-healthy (gpu_bus), as NVIDIA's RmInitAdapter."""
    event = parse_kernel_message("amdgpu 0000:03:00.0: amdgpu: Fatal error during GPU init")
    assert (event.kind, event.severity, event.pci) == ("gpu_init", "error", "0000:03:00")
    frame = events_frame([(5.0, "n1/gpu0", event.kind, event.code, event.severity, event.message, "kernel", event.pci,
                           None)])
    out = RuleDetector().fit().update(TickInput(5.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert [(e.entity, e.level, e.category) for e in out] == [("n1/gpu0", State.SUBHEALTHY, "gpu_bus")]
    assert parse_kernel_message("amdgpu: Fatal error during GPU init") is None  # (no GPU named: nothing to place)


def test_a_device_its_driver_cannot_recover_from_an_uncorrectable_pcie_error():
    """The kernel's AER recovery names each device below the erring port whose driver has no error handlers, the
    NVIDIA driver's GPUs among them ("can't recover (no error_detected callback)", "device has no AER-aware driver"
    on older kernels): an uncorrected AER event of that device, where the port's own line names no GPU. Lines quoted in
    rwth-i6/returnn issue 1500 and wilicc/gpu-burn issue 1. Meta's GCM rates the line critical: raswarden makes the
    GPU sub-healthy (gpu_bus), its port's fatal line fails the node's host as before (docs/rules.md)."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    lines = (QUOTED / "aer-unrecovered.dmesg.txt").read_text().splitlines()
    ev = [parse_kernel_message(_MONOTONIC_PREFIX.sub("", re.sub(r"^\[\s*\+[0-9.]+\] ", "", ln)).strip())
          for ln in lines]
    got = [(e.kind, e.code, e.severity, e.pci) for e in ev if e]
    assert got == [("aer", None, "uncorrected", "0000:03:00.0"), ("aer", None, "uncorrected", "0000:03:00.1"),
                   ("aer", None, "fatal", "0000:00:03.0"),
                   ("aer", None, "uncorrected", "0000:03:00.0"), ("aer", None, "uncorrected", "0000:03:00.1"),
                   ("aer", None, "fatal", "0000:00:02.0"), ("aer", None, "uncorrected", "0000:02:00.0"),
                   ("xid", 79, "error", "0000:02:00")]
    assert "its driver (nvidia) has no error recovery" in ev[0].message
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "n1", "accelerators": [
        {"index": 0, "pci_bus_id": "00000000:03:00.0"}, {"index": 1, "pci_bus_id": "00000000:04:00.0"}]}]}]})
    frame = events_frame([(5.0, "n1", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                          for e in ev[:5] if e is not None])
    resolved = EventResolver(SeriesMapper(topology=topo)).resolve(frame)
    assert list(resolved["entity"]) == ["n1/gpu0", "n1/gpu0", "n1"]  # (the GPU's audio function is the GPU's card)
    out = RuleDetector().fit().update(TickInput(5.0, resolved, pd.DataFrame(), pd.DataFrame()))
    assert sorted({(e.entity, e.level, e.category) for e in out}) == [("n1", State.FAILED, "host"),
                                                                    ("n1/gpu0", State.SUBHEALTHY, "gpu_bus")]
    assert parse_kernel_message("pcieport 0000:00:03.0: AER: device recovery failed") is None


def test_the_nvidia_drivers_own_line_for_a_gpu_fallen_off_the_bus():
    """Beside its Xid 79 the driver prints the loss itself (osinit.c ``osHandleGpuLost``, NVIDIA/open-gpu-kernel-
    modules, NV_DEV_PRINTF's "NVRM: GPU 0000:3b:00.0: " prefix) and older drivers printed "NVRM: GPU at 0000:01:00.0
    has fallen off the bus." alone (Bumblebee-Project/Bumblebee issue 554): each is read as Xid 79 of that GPU."""
    lines = [re.sub(r"^\[[ 0-9.]+\] ", "", ln) for ln in (QUOTED / "nvrm-off-bus-forms.txt").read_text().splitlines()]
    ev = [parse_kernel_message(ln) for ln in lines]
    assert [(e.kind, e.code, e.pci) if e else None for e in ev] == [
        ("xid", 79, "0000:01:00"), None, ("xid", 79, "0000:01:00"), ("xid", 79, "0000:3b:00")]
    assert parse_kernel_message("NVRM: GPU 0000:3b:00.0: GPU serial number is 1652922016402.") is None
    # beside its Xid 79 line (nvErrorLog_va prints that first), the same fact: one event, the Xid line's
    xid = parse_kernel_message("NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.")
    resolver = EventResolver(SeriesMapper())
    assert (xid.source, ev[3].source) == (None, DRIVER_SOURCE)  # (the reader's own for the Xid line: "kernel")
    out = resolver.merge_xids(events_frame([(9.0, "n1/gpu0", e.kind, e.code, e.severity, e.message,
                                             e.source or "kernel", e.pci, None) for e in (xid, ev[3])]), 9.0)
    assert list(out["message"]) == ["pid=0, GPU has fallen off the bus."] and resolver.merged == 1
    again = resolver.merge_xids(events_frame([(9000.0, "n1/gpu0", "xid", 79, "error", xid.message, "kernel",
                                               xid.pci, None)]), 9000.0)
    assert len(again) == 1  # (the kernel repeating an Xid later is another event, as before)


def test_the_nvidia_drivers_status_in_its_assertion_lines():
    """The driver's assertion lines carry its status: "Reset required [NV_ERR_RESET_REQUIRED]" (its GSP firmware
    stopped; a GB200 and an H100 fleet quote it with nothing else in dmesg, scitix/sichek rates it critical) and
    "GPU lost from the bus [NV_ERR_GPU_IS_LOST]". They name no GPU: a ``gpu_state`` event of the node, sub-healthy with
    repair reset, failed (hard) with repair reboot when lost. An assertion without such a status is no event."""
    from daemon.ingest.formats.kernellog import _MONOTONIC_PREFIX

    def message(line: str) -> str:
        line = re.sub(r"^(?:\[[A-Z][a-z]{2} [^]]*\] |[A-Z][a-z]{2} [ 0-9]\d \S+ \S+ kernel: )", "", line)
        return _MONOTONIC_PREFIX.sub("", line).strip()

    ev = [parse_kernel_message(message(ln)) for ln in (QUOTED / "nvrm-status-asserts.txt").read_text().splitlines()]
    assert [(e.kind, e.severity, e.pci) if e else None for e in ev] == [
        ("gpu_state", "reset_required", None), None, ("gpu_state", "reset_required", None),
        ("gpu_state", "lost", None), None, None, None]
    frame = events_frame([(5.0, f"n{i}", e.kind, e.code, e.severity, e.message, "kernel", e.pci, e.device)
                          for i, e in enumerate(ev) if e is not None])
    rules = RuleDetector().fit()
    out = rules.update(TickInput(5.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert sorted((e.entity, e.level, e.category, e.hard) for e in out) == [
        ("n0", State.SUBHEALTHY, "gpu_compute", False), ("n2", State.SUBHEALTHY, "gpu_compute", False),
        ("n3", State.FAILED, "gpu_bus", True)]
    assert all("repair: reset" in e.reasons[0] for e in out if e.entity != "n3")
    assert "repair: reboot" in [e for e in out if e.entity == "n3"][0].reasons[0]
    again = rules.update(TickInput(65.0, frame.assign(ts=65.0), pd.DataFrame(), pd.DataFrame()))
    assert len(again) == 3  # (the driver repeats its lines: one watch a node, refreshed)
    base = RuleDetector(baseline=True).fit().update(TickInput(5.0, frame, pd.DataFrame(), pd.DataFrame()))
    assert [(e.entity, e.level) for e in base] == [("n3", State.FAILED)]  # (the static baseline: the hard fault only)


def test_amdgpu_gpu_lost_from_the_bus_and_a_recovery_that_failed(tmp_path, ctx):
    """amdgpu's health check before a reset finds the GPU's configuration space all ones ("device lost from bus!":
    NVIDIA's Xid 79) and the job timeout's reset fails ("GPU Recovery Failed: -19"): a journal in French quoted in
    Dasharo/dasharo-issues 1849, read whole; both fail the GPU, and the lines around them are no event."""
    path = tmp_path / "sn01-b01.kern.log"
    shutil.copy(QUOTED / "dasharo-1849-amdgpu-lost.kern.log", path)
    ev = read_all(TextLogReader(), path, ctx).events
    assert [(e.kind, e.severity, e.pci) for e in ev.itertuples()] == [("amdgpu", "lost", "0000:06:00"),
                                                                      ("amdgpu", "fatal", "0000:06:00")]
    assert "error -19" in ev["message"].iloc[1]
    frame = ev.assign(entity="n1/gpu0")
    out = RuleDetector().fit().update(TickInput(float(ev["ts"].max()), frame, pd.DataFrame(), pd.DataFrame()))
    assert {(e.entity, e.level, e.category, e.hard) for e in out} == {
        ("n1/gpu0", State.FAILED, "gpu_bus", True), ("n1/gpu0", State.FAILED, "gpu_compute", True)}
