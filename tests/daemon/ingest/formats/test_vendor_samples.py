"""The recorded samples of the other vendors' formats (fixtures/exporters/) through the readers and name tables."""

from pathlib import Path

import pandas as pd
import pytest

from daemon.ingest.formats import OpenMetricsReader, ReadContext, sniff
from daemon.ingest.naming import SeriesMapper
from daemon.topology import Topology
from tests.daemon.ingest.formats.conftest import read_all

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "exporters"


def last(samples, entity: str, metric: str) -> float:
    rows = samples[(samples["entity"] == entity) & (samples["metric"] == metric)]
    assert len(rows), f"no {metric} for {entity}"
    return float(rows["value"].iloc[-1])


def test_amd_device_metrics_exporter_scrapes(ctx):
    b = read_all(OpenMetricsReader(), FIXTURES / "amd-device-metrics-exporter.prom", ctx)
    s = b.samples
    assert ctx.rejects.total == 0
    assert last(s, "sn02-b01/gpu1", "gpu_temp_c") == 71 and last(s, "sn02-b01/gpu1", "hbm_temp_c") == 58
    assert last(s, "sn02-b01/gpu1", "ecc_sbe_total") == 229 and last(s, "sn02-b01/gpu1", "pcie_replay_total") == 19
    # gpu_clock carries several clocks: the first XCD's system clock and the memory clock are kept.
    assert last(s, "sn02-b01/gpu1", "sm_clock_mhz") == 1420 and last(s, "sn02-b01/gpu0", "mem_clock_mhz") == 1300
    assert len(s[(s["entity"] == "sn02-b01/gpu0") & (s["metric"] == "sm_clock_mhz")]) == 2  # not one per XCD
    assert last(s, "sn02-b01/gpu0", "energy_mj_total") == pytest.approx(8.1252e10)  # µJ to mJ
    assert ctx.mapper.unmapped_metrics["amd_gpu_clock"] == 4  # the second XCD and the video clock, per scrape
    assert ctx.mapper.accelerator_model["sn02-b01/gpu0"] == "AMD Instinct MI300X"


def test_amd_names_without_the_configurable_prefix(tmp_path, ctx):
    text = (FIXTURES / "amd-device-metrics-exporter.prom").read_text().replace("amd_gpu_", "gpu_")
    p = tmp_path / "bare.prom"
    p.write_text(text)
    s = read_all(OpenMetricsReader(), p, ctx).samples
    assert last(s, "sn02-b01/gpu1", "gpu_temp_c") == 71


def test_npu_exporter_scrapes_and_its_failure_values(ctx):
    s = read_all(OpenMetricsReader(), FIXTURES / "npu-exporter.prom", ctx).samples
    assert ctx.rejects.total == 0
    assert last(s, "sn03-b01/npu1", "ecc_sbe_total") == 9 and last(s, "sn03-b01/npu1", "accelerator_health") == 0
    assert last(s, "sn03-b01/npu1", "npu_error_code_0") == 0x80E18402
    # -1 (a temperature read that failed) and 0xFFFFFFFF (an unreadable HCCS lane) are dropped, not samples.
    temps = s[(s["entity"] == "sn03-b01/npu1") & (s["metric"] == "gpu_temp_c")]
    assert list(temps["value"]) == [61.0]
    assert not len(s[(s["entity"] == "sn03-b01/npu1") & (s["metric"] == "hccs_crc_lane1_total")])
    # The NPU's own RoCE port: link status 1/0 read as an InfiniBand state (4 ACTIVE, 1 DOWN).
    assert last(s, "sn03-b01/hccn0:1", "port_state") == 4 and last(s, "sn03-b01/hccn1:1", "port_state") == 1
    assert last(s, "sn03-b01/hccn1:1", "rcv_errors_total") == 40
    assert ctx.mapper.accelerator_at("sn03-b01", "0000:c2:00") == "sn03-b01/npu1"


def test_npu_exporter_malformed_lines_are_rejected_by_position(ctx):
    s = read_all(OpenMetricsReader(), FIXTURES / "npu-exporter-malformed.prom", ctx).samples
    messages = ctx.rejects.messages
    lines = sorted(int(m.split(":", 2)[1]) for m in messages)
    assert lines == [3, 4, 5, 6, 7, 9], messages
    assert any("NaN" in m for m in messages) and any("lacks the 'id' label" in m for m in messages)
    assert any("no alias" in m for m in messages)
    assert sorted(s["metric"]) == ["accelerator_health", "gpu_temp_c"]


def test_amdgpu_kernel_log_events_land_on_their_gpus():
    topo = Topology.from_dict({"racks": [{"name": "r02", "nodes": [{"name": "sn02-b01", "accelerators": [
        {"index": 0, "pci_bus_id": "0000:05:00.0"}, {"index": 1, "pci_bus_id": "0000:26:00.0"}]}]}]})
    ctx = ReadContext(mapper=SeriesMapper(topology=topo))
    path = FIXTURES / "sn02-b01.dmesg"
    ev = read_all(sniff(path), path, ctx).events
    assert ctx.rejects.total == 0
    assert list(ev["kind"].unique()) == ["amdgpu"] and set(ev["entity"]) == {"sn02-b01"}
    assert list(ev["severity"]) == ["corrected", "corrected", "deferred", "uncorrected", "fatal", "info",
                                    "application", "application"]  # the OOM kill is no event
    assert list(ev["message"][-2:]) == ["ring gfx_0.0.0 timeout", "gfxhub page fault"]
    assert list(ev["code"][:4]) == [3, 2, 1, 1]  # the "in total" line repeats a count: no event
    assert set(ev["pci"]) == {"0000:05:00", "0000:26:00"}


def test_amd_smi_and_npu_smi_snapshots(ctx):
    path = FIXTURES / "smi-snapshots.jsonl"
    reader = sniff(path)
    assert type(reader).__name__ == "SmiReader"
    s = read_all(reader, path, ctx).samples
    assert last(s, "sn02-b01/gpu1", "ecc_sbe_total") == 229 and last(s, "sn02-b01/gpu1", "gpu_temp_c") == 71
    assert last(s, "sn02-b01/gpu0", "energy_mj_total") == pytest.approx(8.1252e10)  # J to mJ
    assert not len(s[s["metric"] == "gpu_edge_temp_c"])  # "N/A": not supported there, not an error
    assert last(s, "sn03-b01/npu1", "accelerator_health") == 0 and last(s, "sn03-b01/npu0", "power_w") == 301.5
    assert last(s, "sn03-b01/npu1", "gpu_temp_c") == 61  # "NA" in the second snapshot: skipped
    assert ctx.mapper.accelerator_at("sn03-b01", "0000:c2:00") == "sn03-b01/npu1"
    # rocm-smi (ROCm 6's "card:N" keys, a value in a one-element list, the clock as "(1420Mhz)"), 5 s later.
    rocm = s[s["ts"] == s["ts"].max()]
    assert last(rocm, "sn02-b01/gpu1", "sm_clock_mhz") == 1420 and last(rocm, "sn02-b01/gpu1", "gpu_temp_c") == 71
    assert last(rocm, "sn02-b01/gpu0", "fb_used_mib") == 183265 and "gpu_edge_temp_c" not in set(rocm["metric"])
    lines = sorted({int(m.split(":", 2)[1].split(" ")[0]) for m in ctx.rejects.messages})
    assert lines == [6, 7, 8, 9, 10, 11], ctx.rejects.messages
    assert any("gpu_data[0].power.socket_power: not a number" in m for m in ctx.rejects.messages)


def test_an_ethernet_rdma_ports_ethtool_counters_are_its_link_counters(ctx):
    """A RoCE fabric's link health is in mlx5's ethtool ``*_phy`` counters (Linux's mlx5 counters.rst), which
    node_exporter's ethtool collector serves under its own names: a netdev the topology lists is its port
    (``ibp12s0`` is ``mlx5_0:1``), named apart from the InfiniBand counters its RDMA device may show too; a netdev
    the topology does not list among the node's ports is no fabric port (a management NIC: passed over, counted);
    without ports listed by netdev, a netdev is the port ``<netdev>:1``."""
    from detectors.contract import TickInput
    from detectors.counters import CounterTracker
    from detectors.rules import RuleDetector
    from detectors.schema import State, events_frame

    s = read_all(OpenMetricsReader(), FIXTURES / "node-exporter-ethtool-roce.prom", ctx).samples
    got = {(e, m, t): v for e, m, t, v in zip(s["entity"], s["metric"], s["ts"], s["value"])}
    assert got[("sn01-b01/mlx5_0:1", "link_down_events_total", 1772409630.0)] == 2
    assert {e for e, _, _ in got} == {"sn01-b01/mlx5_0:1"} and ctx.mapper.not_fabric_netdevs[("sn01-b01",
                                                                                                 "ens3np0")] == 3
    assert "rx_corrected_bits" not in " ".join(s["metric"])  # pre-FEC bits count on healthy links: not read
    bare = ReadContext(mapper=SeriesMapper(topology=Topology.from_dict({"aliases": {"10.0.1.11": "gpu-node-3"}})))
    alone = read_all(OpenMetricsReader(), FIXTURES / "node-exporter-ethtool-roce.prom", bare).samples
    got = {(e, m, t): v for e, m, t, v in zip(alone["entity"], alone["metric"], alone["ts"], alone["value"])}
    assert got[("gpu-node-3/ens3np0:1", "pcs_symbol_error_total", 1772409660.0)] == 390
    assert got[("gpu-node-3/ens3np0:1", "crc_errors_total", 1772409630.0)] == 5
    counters = CounterTracker()
    first, second = s[s["ts"] == 1772409630.0], s[s["ts"] == 1772409660.0]
    counters.update(first)
    inc = counters.update(second)
    out = RuleDetector().fit().update(TickInput(1772409660.0, events_frame([]), inc, pd.DataFrame()))
    assert [(e.entity, e.level, e.hard, e.reasons) for e in out] == [
        ("sn01-b01/mlx5_0:1", State.FAILED, True, ["link_down_events_phy +1"])]
