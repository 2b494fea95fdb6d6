"""``nvidia-smi -q`` reports: XML (``-q -x``) on real reports telegraf's nvidia_smi tests keep
(fixtures/real/telegraf_nvidia_smi/: schema v10 to v13, drivers 418 to 595, an A100 in MIG mode, an A10G, a T4), text
on real reports gpud's tests kept (fixtures/real/gpud/gpu-node-0[5-7].nvidia-smi.txt: eight H100s, an A10 with rows
pending remap, a TITAN V of the schema before 450)."""

from __future__ import annotations

import re

import pytest

from daemon.ingest.formats import NvidiaSmiTextReader, NvidiaSmiXmlReader, sniff
from detectors.rules import RuleDetector
from detectors.schema import State
from tests.conftest import REAL
from tests.daemon.ingest.formats.conftest import read_all

CAPTURES = REAL / "telegraf_nvidia_smi"
GPUD = REAL / "gpud"


def report(name: str) -> str:
    return (CAPTURES / name).read_text()


def restamped(text: str, stamp: str) -> str:
    return re.sub(r"<timestamp>[^<]*</timestamp>", f"<timestamp>{stamp}</timestamp>", text)


def readings(samples) -> dict[str, float]:
    return dict(zip(samples["metric"], samples["value"]))


@pytest.mark.parametrize("name,expected", [
    # an A100 SXM4 80GB in MIG mode, driver 535 (schema v12): utilisation and remapped rows N/A, the reset status
    ("a100-sxm4-v12.xml", {"gpu_temp_c": 27, "hbm_temp_c": 44, "power_w": 67.03, "sm_clock_mhz": 1275,
                           "mem_clock_mhz": 1593, "fb_used_mib": 50, "fb_free_mib": 80999, "ecc_sbe_total": 0,
                           "ecc_dbe_total": 0, "ecc_sbe_agg_total": 0, "ecc_dbe_agg_total": 0,
                           "pcie_replay_total": 0, "throttle_thermal": 0, "gpu_recovery_action": 0,
                           "pcie_link_width": 16, "pcie_link_width_max": 16}),
    # an A10G, driver 515 (v11): remapped rows and their histogram
    ("a10g.xml", {"gpu_temp_c": 17, "power_w": 25.58, "sm_clock_mhz": 210, "mem_clock_mhz": 405, "gpu_util_pct": 0,
                  "fb_used_mib": 22, "fb_free_mib": 22569, "ecc_sbe_total": 0, "ecc_dbe_total": 0,
                  "ecc_sbe_agg_total": 0, "ecc_dbe_agg_total": 0, "row_remap_correctable_total": 0,
                  "row_remap_uncorrectable_total": 0, "row_remap_pending": 0, "row_remap_failure": 0,
                  "row_remap_banks_exhausted": 0, "pcie_replay_total": 0, "throttle_thermal": 0,
                  "pcie_link_width": 8, "pcie_link_width_max": 16}),
    # a T4 (v11): retired pages
    ("tesla-t4.xml", {"gpu_temp_c": 40, "power_w": 26.78, "sm_clock_mhz": 585, "mem_clock_mhz": 5000,
                      "gpu_util_pct": 0, "fb_used_mib": 1032, "fb_free_mib": 13939, "ecc_sbe_total": 0,
                      "ecc_dbe_total": 0, "ecc_sbe_agg_total": 0, "ecc_dbe_agg_total": 0,
                      "retired_pages_sbe_total": 0, "retired_pages_dbe_total": 0, "retired_pages_pending": 0,
                      "pcie_replay_total": 0, "throttle_thermal": 0, "pcie_link_width": 8,
                      "pcie_link_width_max": 16}),
    # driver 595 (v13): instant power, clock event reasons, gpu_recovery_action; ECC N/A on this part
    ("rtx-4000-sff-ada-v13.xml", {"gpu_temp_c": 38, "power_w": 8.44, "sm_clock_mhz": 210, "mem_clock_mhz": 405,
                                  "gpu_util_pct": 0, "fb_used_mib": 3534, "fb_free_mib": 16482,
                                  "row_remap_correctable_total": 0, "row_remap_uncorrectable_total": 0,
                                  "row_remap_pending": 0, "row_remap_failure": 0, "row_remap_banks_exhausted": 0,
                                  "pcie_replay_total": 0, "throttle_thermal": 0, "gpu_recovery_action": 0,
                                  "pcie_link_width": 16, "pcie_link_width_max": 16}),
    # driver 418 (the schema before 450: single_bit / double_bit totals, N/A on a Quadro)
    ("quadro-p400.xml", {"gpu_temp_c": 33, "sm_clock_mhz": 139, "mem_clock_mhz": 405, "gpu_util_pct": 0,
                         "fb_used_mib": 0, "fb_free_mib": 1998, "pcie_replay_total": 0, "throttle_thermal": 0,
                         "pcie_link_width": 16, "pcie_link_width_max": 16}),
])
def test_each_real_report_gives_its_readings(tmp_path, ctx, name, expected):
    path = tmp_path / "sn01-b01.nvidia-smi.xml"
    path.write_text(report(name))
    assert isinstance(sniff(path), NvidiaSmiXmlReader)
    s = read_all(NvidiaSmiXmlReader(), path, ctx).samples
    assert readings(s) == pytest.approx(expected)
    assert set(s["entity"]) == {"sn01-b01/gpu0"} and s["ts"].nunique() == 1
    assert ctx.rejects.total == 0 and not ctx.mapper.unmapped_metrics


def test_the_gpu_is_named_and_placed(tmp_path, ctx):
    path = tmp_path / "sn01-b01.nvidia-smi.xml"
    path.write_text(report("a100-sxm4-v12.xml"))
    s = read_all(NvidiaSmiXmlReader(), path, ctx).samples
    assert s["ts"].iloc[0] == 1691149470.0  # Fri Aug  4 11:44:30 2023, read as UTC (said in the summary)
    assert ctx.mapper.accelerator_model["sn01-b01/gpu0"] == "NVIDIA A100-SXM4-80GB"
    assert ctx.mapper.accelerator_at("sn01-b01", "0000:01:00") == "sn01-b01/gpu0"
    assert any("read as UTC" in n for n in ctx.rejects.notes)


def test_a_log_of_snapshots_with_a_cut_and_a_bad_one(tmp_path, ctx):
    """``nvidia-smi -q -x -l 60`` appends a report a minute: each is read at its time; one cut short (the file copied
    mid-write), one the parser refuses, one without a timestamp and a bad value are rejected at their lines."""
    a10g = report("a10g.xml")
    pending = a10g.replace("<remapped_row_pending>No</remapped_row_pending>",
                           "<remapped_row_pending>Yes</remapped_row_pending>")
    snapshots = [restamped(a10g, "Mon Apr 24 16:11:51 2023"),
                 restamped(a10g, "Mon Apr 24 16:12:51 2023").split("<temperature>")[0],  # cut short
                 restamped(pending, "Mon Apr 24 16:13:51 2023").replace("<gpu_temp>17 C</gpu_temp>",
                                                                        "<gpu_temp>hot</gpu_temp>"),
                 restamped(a10g, "Mon Apr 24 16:14:51 2023").replace("</fb_memory_usage>", "</fb_memory>", 1),
                 report("gtx-1070-ti.xml"),  # no timestamp
                 "Mon Apr 24 16:16:50 UTC 2023",  # a cron job's date between reports
                 restamped(pending, "Mon Apr 24 16:16:51 2023")]
    path = tmp_path / "sn01-b01.nvidia-smi.xml"
    path.write_text("".join(s if s.endswith("\n") else s + "\n" for s in snapshots))
    starts = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if line.startswith("<?xml")]
    s = read_all(NvidiaSmiXmlReader(), path, ctx).samples
    pend = s[s["metric"] == "row_remap_pending"]
    assert pend["ts"].tolist() == [1682352711.0, 1682352831.0, 1682353011.0] and pend["value"].tolist() == [0, 1, 1]
    temps = s[s["metric"] == "gpu_temp_c"]
    assert temps["ts"].tolist() == [1682352711.0, 1682353011.0]  # the bad value alone is not read
    said = sorted((int(m.split(": ")[0].rsplit(":", 1)[1]), m.split(": ", 1)[1]) for m in ctx.rejects.messages)
    assert [line for line, _ in said[:2]] == starts[1:3]
    assert "cut short" in said[0][1] and "temperature/gpu_temp: 'hot' is not a number" in said[1][1]
    assert "not well-formed XML: mismatched tag" in said[2][1] and starts[3] < said[2][0] < starts[4]
    assert said[3] == (starts[4], "no timestamp it can read (none): a report cannot be placed in time without it")
    assert said[4] == (starts[5] - 1, "a line outside any report: 'Mon Apr 24 16:16:50 UTC 2023'")
    assert len(said) == 5


def test_the_drivers_recovery_action_and_the_reset_status_before_it(tmp_path, ctx):
    """R570's gpu_recovery_action word as NVML's number; before it, reset_required as GPU_RESET and
    drain_and_reset_recommended as DRAIN_AND_RESET; two GPUs of one report are told apart by their order."""
    v13 = report("rtx-4000-sff-ada-v13.xml")
    gpu = v13[v13.index("<gpu id"):v13.index("</gpu>") + len("</gpu>")]
    second = gpu.replace('id="00000000:01:00.0"', 'id="00000000:02:00.0"').replace(
        "<gpu_recovery_action>None</gpu_recovery_action>", "<gpu_recovery_action>Reboot</gpu_recovery_action>")
    (tmp_path / "sn01-b01.nvidia-smi.xml").write_text(v13.replace(gpu, gpu + "\n" + second))
    v12 = report("a100-sxm4-v12.xml").replace("<reset_required>No</reset_required>",
                                              "<reset_required>Yes</reset_required>")
    (tmp_path / "sn02-b01.nvidia-smi.xml").write_text(v12)
    (tmp_path / "sn03-b01.nvidia-smi.xml").write_text(v12.replace(
        "<drain_and_reset_recommended>No</drain_and_reset_recommended>",
        "<drain_and_reset_recommended>Yes</drain_and_reset_recommended>"))
    got = {}
    for host in ("sn01-b01", "sn02-b01", "sn03-b01"):
        s = read_all(NvidiaSmiXmlReader(), tmp_path / f"{host}.nvidia-smi.xml", ctx).samples
        s = s[s["metric"] == "gpu_recovery_action"]
        got.update(zip(s["entity"], s["value"]))
    assert got == {"sn01-b01/gpu0": 0, "sn01-b01/gpu1": 2, "sn02-b01/gpu0": 1, "sn03-b01/gpu0": 4}
    assert ctx.rejects.total == 0


def test_a_report_it_cannot_place_is_refused(tmp_path, ctx):
    path = tmp_path / "gpus.xml"
    path.write_text(report("a10g.xml"))
    assert read_all(NvidiaSmiXmlReader(), path, ctx).samples.empty
    assert "name the file <host>.nvidia-smi.xml" in ctx.rejects.messages[0]


def test_a_pending_row_remap_in_a_report_flags_its_gpu(tmp_path, ctx):
    """The reading the rules act on, end to end from a real report: a remapped row pending its reset is
    sub-healthy (repair: reset), the same report without it is healthy."""
    path = tmp_path / "sn01-b01.nvidia-smi.xml"
    path.write_text(report("a10g.xml").replace("<remapped_row_pending>No</remapped_row_pending>",
                                               "<remapped_row_pending>Yes</remapped_row_pending>"))
    s = read_all(NvidiaSmiXmlReader(), path, ctx).samples
    gauges = s.groupby(["entity", "metric"], as_index=False)["value"].agg(last="last", max="max")
    from tests.detectors.test_rules import run, worst

    assert worst(run(RuleDetector().fit(), float(s["ts"].max()), gauges=gauges), "sn01-b01/gpu0") == State.SUBHEALTHY


def test_a_real_text_report_of_eight_h100s(ctx):
    """nvidia-smi -q on a node of eight H100s (driver 535.161.08): each GPU by its place and bus id, its readings;
    HW Slowdown and HW Power Brake Slowdown active on the first (NVML's 0x88: no thermal bit)."""
    path = GPUD / "gpu-node-05.nvidia-smi.txt"
    assert isinstance(sniff(path), NvidiaSmiTextReader)
    s = read_all(NvidiaSmiTextReader(), path, ctx).samples
    assert ctx.rejects.total == 0 and not ctx.mapper.unmapped_metrics
    assert sorted(set(s["entity"])) == [f"gpu-node-05/gpu{i}" for i in range(8)]
    assert readings(s[s["entity"] == "gpu-node-05/gpu0"]) == pytest.approx({
        "gpu_temp_c": 29, "hbm_temp_c": 39, "power_w": 67.74, "sm_clock_mhz": 86, "mem_clock_mhz": 2619,
        "gpu_util_pct": 0, "fb_used_mib": 0, "fb_free_mib": 81007, "row_remap_correctable_total": 0,
        "row_remap_uncorrectable_total": 0, "row_remap_pending": 0, "row_remap_failure": 0,
        "row_remap_banks_exhausted": 0, "pcie_replay_total": 67, "gpu_recovery_action": 0, "ecc_sbe_total": 0,
        "ecc_dbe_total": 0, "ecc_sbe_agg_total": 0, "ecc_dbe_agg_total": 0, "throttle_thermal": 0,
        "pcie_link_width": 16, "pcie_link_width_max": 16})
    replays = s[s["metric"] == "pcie_replay_total"]
    assert replays["value"].min() == 43 and replays["value"].max() == 82 and len(replays) == 8
    assert set(s["ts"]) == {1722424959.0}  # Wed Jul 31 11:22:39 2024, read as UTC
    assert ctx.mapper.accelerator_model["gpu-node-05/gpu0"] == "NVIDIA H100 80GB HBM3"
    assert ctx.mapper.accelerator_at("gpu-node-05", "0000:19:00") == "gpu-node-05/gpu0"


def test_a_real_text_report_of_a_gpu_with_rows_pending_remap_flags_it(ctx):
    """gpud's A10 report (driver 535.129.03): four uncorrectable errors' rows remapped, pending the GPU's reset:
    sub-healthy, the repair a reset; the TITAN V's report of the schema before 450 gives its readings, its ECC
    N/A."""
    from detectors.xid_catalog import vendor_repair
    from tests.detectors.test_rules import run

    s = read_all(NvidiaSmiTextReader(), GPUD / "gpu-node-06.nvidia-smi.txt", ctx).samples
    got = readings(s)
    assert (got["row_remap_uncorrectable_total"], got["row_remap_pending"], got["gpu_recovery_action"]) == (4, 1, 0)
    gauges = s.groupby(["entity", "metric"], as_index=False)["value"].agg(last="last", max="max")
    ev = [e for e in run(RuleDetector().fit(), float(s["ts"].max()), gauges=gauges) if e.entity == "gpu-node-06/gpu0"]
    assert [(e.level, vendor_repair(e.reasons)) for e in ev] == [(State.SUBHEALTHY, "reset")]
    old = read_all(NvidiaSmiTextReader(), GPUD / "gpu-node-07.nvidia-smi.txt", ctx).samples
    assert readings(old) == pytest.approx({"gpu_temp_c": 44, "hbm_temp_c": 41, "power_w": 29.02, "sm_clock_mhz": 135,
                                           "mem_clock_mhz": 850, "gpu_util_pct": 0, "fb_used_mib": 290,
                                           "fb_free_mib": 11760, "pcie_replay_total": 0, "gpu_recovery_action": 0,
                                           "throttle_thermal": 0, "pcie_link_width": 16,
                                           "pcie_link_width_max": 16})
    assert ctx.rejects.total == 0


def test_a_log_of_text_reports_each_at_its_time(tmp_path, ctx):
    """``nvidia-smi -q -l 60 > <host>.nvidia-smi.txt``: each report read at its time; a line before the first
    report, a value that is no number and a report with no timestamp are rejected with their lines."""
    a10 = (GPUD / "gpu-node-06.nvidia-smi.txt").read_text()
    stamp = "Wed Sep 25 10:40:24 2024"
    later = a10.replace(stamp, "Wed Sep 25 10:41:24 2024").replace("Pending                           : Yes",
                                                                   "Pending                           : No")
    bad = a10.replace(stamp, "Wed Sep 25 10:42:24 2024").replace("GPU Current Temp                  : 33 C",
                                                                 "GPU Current Temp                  : hot")
    unstamped = a10.replace(f"Timestamp                                 : {stamp}\n", "")
    misstamped = a10.replace(stamp, "Wed Sep 25 25:40:24 2024")
    path = tmp_path / "sn01-b01.nvidia-smi.txt"
    path.write_text("nvidia-smi -q -l 60\n" + a10 + later + bad + unstamped + misstamped)
    s = read_all(NvidiaSmiTextReader(), path, ctx).samples
    pending = s[s["metric"] == "row_remap_pending"]
    assert pending["ts"].tolist() == [1727260824.0, 1727260884.0, 1727260944.0]
    assert pending["value"].tolist() == [1, 0, 1]
    assert s[s["metric"] == "gpu_temp_c"]["value"].tolist() == [33, 33]
    lines = path.read_text().splitlines()
    said = sorted((int(m.split(": ")[0].rsplit(":", 1)[1]), m.split(": ", 1)[1]) for m in ctx.rejects.messages)
    heads = [i + 1 for i, line in enumerate(lines) if "NVSMI LOG" in line]
    stamped = [i + 1 for i, line in enumerate(lines) if line.startswith("Timestamp")]
    gpus = [i + 1 for i, line in enumerate(lines) if line.startswith("GPU 0000")]
    hot = next(i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(": hot"))
    assert said == [(1, "a line outside any report: 'nvidia-smi -q -l 60'"),
                    (hot, "temperature/gpu current temp: 'hot' is not a number"),  # at its own line
                    (gpus[3], "no timestamp it can read (none): a report cannot be placed in time without it"),
                    (stamped[-1], "no timestamp it can read (Wed Sep 25 25:40:24 2024): a report cannot be placed in "
                                  "time without it")]
    assert len(heads) == 5


def test_a_single_gpu_wired_x8_by_design_is_not_watched(tmp_path, ctx):
    """The real A10G and T4 reports (AWS's single-GPU machines) run x8 of the GPU's x16: the slot, not a lane lost.
    With no other GPU on the node and no narrower reading before, the PCIe width says nothing."""
    from tests.detectors.test_rules import run

    for name in ("a10g.xml", "tesla-t4.xml"):
        path = tmp_path / "sn01-b01.nvidia-smi.xml"
        path.write_text(report(name))
        s = read_all(NvidiaSmiXmlReader(), path, ctx).samples
        assert readings(s)["pcie_link_width"] == 8
        gauges = s.groupby(["entity", "metric"], as_index=False)["value"].agg(last="last", max="max")
        assert [e for e in run(RuleDetector().fit(), float(s["ts"].max()), gauges=gauges)
                if e.category == "gpu_bus"] == []


def test_a_text_reports_recovery_action_fails_or_flags_its_gpu(tmp_path, ctx):
    """The text report's ``GPU Recovery Action`` (R570 on: placed as its XML sibling is, after the reset status) and,
    before it, ``Reset Required``: a reboot fails the GPU, a reset it asks for makes it sub-healthy, end to end
    through the rules; the other GPUs of the report stay healthy."""
    from detectors.xid_catalog import vendor_repair
    from tests.detectors.test_rules import run

    text = (GPUD / "gpu-node-05.nvidia-smi.txt").read_text()
    status = "        Drain and Reset Recommended       : No\n"
    first, rest = text.split(status, 1)
    rebooting = first + status + "    GPU Recovery Action                   : Reboot\n" + rest  # the first GPU
    reset = text.replace("        Reset Required                    : No\n",
                         "        Reset Required                    : Yes\n", 1)
    got = {}
    for host, report_text in (("sn01-b01", rebooting), ("sn02-b01", reset)):
        path = tmp_path / f"{host}.nvidia-smi.txt"
        path.write_text(report_text)
        s = read_all(NvidiaSmiTextReader(), path, ctx).samples
        gauges = s.groupby(["entity", "metric"], as_index=False)["value"].agg(last="last", max="max")
        for e in run(RuleDetector().fit(), float(s["ts"].max()), gauges=gauges):
            got[e.entity] = (e.level, vendor_repair(e.reasons))
    assert got == {"sn01-b01/gpu0": (State.FAILED, "reboot"), "sn02-b01/gpu0": (State.SUBHEALTHY, "reset")}
    assert ctx.rejects.total == 0
