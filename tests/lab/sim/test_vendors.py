"""Vendors in the simulator: presets, each fault's signature in each vendor's stack, end to end."""

import io
import json

import numpy as np
import pytest

from daemon.ingest.formats.kernel_events import parse_kernel_message
from daemon.replay import replay
from detectors.xid_catalog import decode_nvlink5, load_decode_sheet
from lab.sim.batches import chunk_to_batch
from lab.sim.simulator import Simulator
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario
from lab.sim.layout import PRESETS
from lab.sim.vendors import AMD, ASCEND, GB200, NVIDIA, render_line
from lab.sim.writer import simulate_to
from daemon.topology import Topology
from tests.detectors.sim_helpers import LIBRARY


def test_presets_of_the_sources():
    cm = PRESETS["cloudmatrix384"]()
    assert (cm.n_gpus, cm.n_nodes, len(cm.racks), cm.vendors) == (384, 48, 16, ("ascend",))
    assert len(set(cm.supernode_of_rack)) == 1 and set(cm.node_rack) == set(range(12))  # 4 racks of UB switches
    nvl = PRESETS["nvl72"]()
    assert (nvl.n_gpus, nvl.n_nodes, nvl.gpus_per_node, len(nvl.racks), nvl.vendors) == (72, 18, 4, 1, ("gb200",))
    assert [nvl.gpu_pci(g) for g in range(4)] == ["00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0",
                                                  "00000019:01:00.0"]  # a real GB200 tray's (dcgm-exporter 581)
    mixed = PRESETS["scalex640-mixed"]()
    assert mixed.n_gpus == 640 and mixed.vendors == ("nvidia", "amd", "ascend")
    counts = {v: mixed.node_vendor.count(v) for v in mixed.vendors}
    assert max(counts.values()) - min(counts.values()) <= 1
    ids = set(mixed.gpu_ids())
    assert "sn01-b01/gpu0" in ids and "sn01-b80/npu7" in ids and "sn01-b80/hccn7:1" in mixed.port_ids()
    topo = Topology.from_dict(mixed.to_dict())
    assert topo.node_vendor["sn01-b01"] == "nvidia" and topo.node_vendor["sn01-b40"] == "amd"
    assert topo.node_vendor["sn01-b80"] == "ascend"
    assert topo.pci_accelerator[("sn01-b80", "0000:18:00")] == "sn01-b80/npu0"
    with pytest.raises(ValueError):
        PRESETS["cloudmatrix384"](400)


def test_each_vendor_reports_a_fault_its_own_way():
    xid48 = "NVRM: Xid (PCI:0000:18:00): 48, pid=123, name=python3, An uncorrectable double bit error (DBE)"
    assert render_line(NVIDIA, xid48) == [xid48]
    amd = render_line(AMD, xid48)
    assert amd == ["amdgpu 0000:18:00.0: amdgpu: socket: 0, die: 0, 1 new uncorrectable hardware errors detected in "
                   "umc block"]
    assert render_line(ASCEND, xid48) == 0x80E18402  # a SeparateNPU code
    assert render_line(ASCEND, "NVRM: Xid (PCI:0000:18:00): 13, pid=1, Graphics Exception") == 0x8C204E00
    assert render_line(AMD, "nvidia 0000:18:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
                            "(Receiver ID)")[0].startswith("amdgpu 0000:18:00.0: AER:")
    assert render_line(AMD, "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.") is None


def mixed(faults, duration="3h"):
    return Scenario.from_dict({"name": "m", "seed": 4, "topology": {"preset": "scalex640-mixed", "accelerators": 72},
                               "duration": duration, "resolution": "30s", "profile": "full",
                               "jobs": {"nodes_per_job": [3, 3], "duration": ["12h", "12h"], "gap": ["1m", "1m"]},
                               "faults": faults})


def test_each_exporter_publishes_its_own_metrics():
    sim = Simulator(mixed([]), load_library(LIBRARY))
    batch = chunk_to_batch(sim, next(sim.chunks()))
    s = batch.samples.astype({"entity": str, "metric": str})
    by_kind = {k: set(g["metric"]) for k, g in s.groupby(s["entity"].str.split("/").str[1].str[:3])}
    assert "xid_last" in by_kind["gpu"] and "npu_error_code_0" in by_kind["npu"]
    assert "xid_last" not in by_kind["npu"] and "hccs_crc_lane1_total" in by_kind["npu"]
    amd_gpu = s[s["entity"].str.startswith("sn01-b04/")]
    assert "xgmi_ce_total" in set(amd_gpu["metric"]) and "nvlink_crc_flit_total" not in set(amd_gpu["metric"])
    assert "roce_rx_err_pkt_total" in by_kind["hcc"] and "symbol_error_total" not in by_kind["hcc"]
    power = s[(s["metric"] == "power_w")].groupby(s["entity"].str[:8])["value"].max()
    assert power["sn01-b04"] > power["sn01-b01"] * 1.3  # an MI300X draws more than an H100 under load


def test_faults_on_each_vendor_are_found_in_its_own_words(tmp_path):
    # onsets two hours in: a part's rising error counts are a flag once raswarden has a record of it before them
    sc = mixed([
        {"entity": "random", "vendor": "ascend", "fault": "gpu_off_bus", "template": "a", "onset": "2h",
         "failure": "3h40m"},
        {"entity": "random", "vendor": "amd", "fault": "hbm_degradation", "template": "a", "onset": "2h",
         "failure": "4h10m"},
    ], duration="4h30m")
    out = tmp_path / "t"
    simulate_to(Simulator(sc, load_library(LIBRARY)), out, fmt="parquet")
    labels = [json.loads(x) for x in (out / "labels.jsonl").read_text().splitlines()]
    npu = next(lb["entity"] for lb in labels if lb["fault"] == "gpu_off_bus")
    gpu = next(lb["entity"] for lb in labels if lb["fault"] == "hbm_degradation")
    assert "/npu" in npu and "/gpu" in gpu
    buf = io.StringIO()
    replay([out], findings_out=buf)
    found = [json.loads(x) for x in buf.getvalue().splitlines()]
    failed = {f["entity"]: " ".join(f["reasons"]) for f in found if f["state"] == "failed"}
    assert "Ascend fault code" in failed[npu]
    assert "amdgpu umc block" in failed[gpu]
    early = [f for f in found if f["entity"] == npu and f["state"] == "subhealthy"]
    assert early and "AER" in early[0]["reasons"][0]  # the kernel's AER counter: npu-exporter has no replays


def test_a_mixed_trace_in_each_exporters_own_format_replays_like_the_parquet_one(tmp_path):
    sc = mixed([{"entity": "random", "vendor": "ascend", "fault": "gpu_off_bus", "template": "a", "onset": "20m",
                 "failure": "1h30m"},
                {"entity": "random", "vendor": "amd", "fault": "hbm_degradation", "template": "a", "onset": "20m",
                 "failure": "1h40m"}], duration="2h")
    flags = {}
    for fmt in ("openmetrics", "parquet"):
        out = tmp_path / fmt
        writer = simulate_to(Simulator(sc, load_library(LIBRARY)), out, fmt=fmt)
        buf = io.StringIO()
        result = replay([out], findings_out=buf)
        assert result.rejects.total == 0
        flags[fmt] = {(f["entity"], f["state"]) for f in map(json.loads, buf.getvalue().splitlines())
                      if f["state"] == "failed"}
        if fmt == "openmetrics":
            files = {p.name for p in out.iterdir()}
            assert {"dcgm-exporter.om", "amd-device-metrics-exporter.om", "npu-exporter.om",
                    "node-exporter.om"} <= files
            text = (out / "amd-device-metrics-exporter.om").read_text()
            assert 'amd_gpu_clock{card_model="AMD Instinct MI300X"' in text
            assert 'clock_type="GPU_CLOCK_TYPE_SYSTEM",clock_index="0"' in text
            npu = (out / "npu-exporter.om").read_text()
            assert "npu_chip_info_link_status{" in npu and "npu_chip_info_error_code{" in npu
            assert writer.unpublished == ["aer_correctable_total (ascend)"]  # read from sysfs, not an exporter
    assert flags["openmetrics"] == flags["parquet"] and any("/npu" in e for e, _ in flags["parquet"])
    assert any(e.startswith("sn01-b0") and "/gpu" in e for e, _ in flags["parquet"])


def test_vendor_picks_only_that_vendors_hardware():
    sc = mixed([{"entity": "random", "vendor": "amd", "fault": "link_degradation", "onset": "10m"}
                for _ in range(5)])
    sim = Simulator(sc, load_library(LIBRARY))
    amd_nodes = {n for i, n in enumerate(sim.topo.nodes) if sim.node_vendor[i].name == "amd"}
    assert {p.inst.entity.split("/")[0] for p in sim.placed} <= amd_nodes
    assert np.all([p.inst.entity.split("/")[1].startswith("mlx5_") for p in sim.placed])


def test_gb200_reports_an_nvlink_error_as_nvlink_5_does():
    xid74 = ("NVRM: Xid (PCI:0018:01:00): 74, pid=7, name=python3, NVLink: fatal error detected on link 5(0x0, 0x0, "
             "0x10000, 0x0, 0x0, 0x0, 0x0)")
    # which of NVLink 5's lines a GPU prints is the GPU's (a hash of its id): the link going down, or its errors over
    # the driver's threshold; the same GPU the same line every time
    [down] = render_line(GB200, xid74, "nvl01-t01/gpu0")
    [ber] = render_line(GB200, xid74, "nvl01-t03/gpu2")
    assert render_line(GB200, xid74, "nvl01-t03/gpu2") == [ber]
    assert ber == ("NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 05 (0x00000226 0x00000001 "
                   "0x00000000 0x00000000 0x00000000 0x00000000)")
    assert down.startswith("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 05 (0x002001c6 ")
    sheet = load_decode_sheet()
    for line, unit, action, state in ((ber, "NETIR_BER_EVENT", "IGNORE", "suspect"),
                                      (down, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "RESET_GPU", "subhealthy")):
        ev = parse_kernel_message(line)
        decoded = decode_nvlink5(ev.code, ev.message, sheet)
        assert (ev.code, decoded.row.unit, decoded.action, decoded.state) == (149, unit, action, state)
    for other in ("NVRM: Xid (PCI:0018:01:00): 79, pid=0, GPU has fallen off the bus.",
                  "NVRM: Xid (PCI:0018:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot "
                  "Required)", "NVRM: GPU 0018:01:00.0: GPU has fallen off the bus."):
        assert render_line(GB200, other) == [other]


def gb200(faults, duration="3h", seed=4):
    return Scenario.from_dict({"name": "g", "seed": seed, "topology": {"preset": "nvl72", "accelerators": 72},
                               "duration": duration, "resolution": "30s", "profile": "full", "noise": "noisy",
                               "jobs": {"nodes_per_job": [3, 6], "duration": ["2h", "6h"], "gap": ["5m", "20m"]},
                               "faults": faults}, "g")


def test_a_gb200_exporter_publishes_nvlink_5_s_counters_in_place_of_the_dl_ones(tmp_path):
    sim = Simulator(gb200([]), load_library(LIBRARY))
    assert 1e-3 <= sim.recovery_share <= 1e-2
    out = tmp_path / "t"
    writer = simulate_to(sim, out, fmt="openmetrics")
    assert writer.unpublished == []
    text = (out / "dcgm-exporter.om").read_text()
    assert "DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS{" in text
    assert "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS{" in text
    assert "NVLINK_CRC_FLIT" not in text and "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL" not in text
    assert 'pci_bus_id="00000019:01:00.0",device="nvidia3",modelName="NVIDIA GB200"' in text
    assert 'DCGM_FI_DRIVER_VERSION="570.133.20"' in text
    sim = Simulator(gb200([]), load_library(LIBRARY))
    metrics = set(chunk_to_batch(sim, next(sim.chunks())).samples["metric"].astype(str))
    assert {"nvlink_effective_error_total", "nvlink_recovery_total"} <= metrics
    assert "nvlink_crc_flit_total" not in metrics


def test_an_h100_trace_is_the_same_with_gb200_in_the_simulator():
    # the GB200 draws come from streams of their own: an H100 rack's trace is the one it was
    sc = Scenario.from_dict({"name": "h", "seed": 4, "topology": {"preset": "scalex640", "accelerators": 64},
                             "duration": "1h", "resolution": "30s", "profile": "full", "noise": "noisy",
                             "faults": [{"entity": "random", "fault": "nvlink_errors", "template": "b",
                                         "onset": "10m", "failure": "50m"}]}, "h")
    sim = Simulator(sc, load_library(LIBRARY))
    assert sim.recovery_share == 0.0 and not len(sim.recovery_rows)
    metrics = set(chunk_to_batch(sim, next(sim.chunks())).samples["metric"].astype(str))
    assert "nvlink_crc_flit_total" in metrics and "nvlink_recovery_total" not in metrics


def test_an_nvlink_fault_on_gb200_is_found_by_nvlink_5_s_counters_before_it_fails(tmp_path):
    # a GPU whose NVLink 5 lines are BER events (NVIDIA: IGNORE): the fault is the counters' to find
    sc = gb200([{"entity": "nvl01-t03/gpu2", "fault": "nvlink_errors", "template": "a", "onset": "2h",
                 "failure": "6h"}], duration="6h30m")
    out = tmp_path / "t"
    simulate_to(Simulator(sc, load_library(LIBRARY)), out, fmt="parquet")
    label = next(json.loads(x) for x in (out / "labels.jsonl").read_text().splitlines()
                 if json.loads(x)["fault"] == "nvlink_errors")
    buf = io.StringIO()
    replay([out], findings_out=buf)
    found = [json.loads(x) for x in buf.getvalue().splitlines()]
    flagged = [f for f in found if f["state"] in ("subhealthy", "failed")]
    assert {f["entity"].split("/")[0] for f in flagged} == {label["entity"].split("/")[0]}  # no healthy part
    early = [f for f in flagged if f["entity"] == label["entity"] and f["state"] == "subhealthy"]
    assert early and early[0]["ts"] < label["failure"]
    said = " ".join(early[0]["reasons"])
    assert "NVLink recoveries" in said or "NVLink errors after FEC" in said, said
