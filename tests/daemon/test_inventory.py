"""``raswarden init``'s inventory: what each exporter's labels say is there, read from real HTTP servers."""

from __future__ import annotations

from daemon.inventory import discover
from daemon.topology import Topology
from tests.conftest import ROOT
from tests.daemon.collectors.conftest import http_server  # noqa: F401  (fixture: real HTTP servers)

EXPORTERS = ROOT / "fixtures" / "exporters"
DCGM = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pci_bus_id="00000000:3B:00.0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="sn01-b01"} 41\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",pci_bus_id="00000000:5D:00.0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="sn01-b01"} 44\n')


def test_every_exporters_accelerators_are_found(http_server):  # noqa: F811
    """dcgm-exporter, AMD device-metrics-exporter and Ascend npu-exporter (their fixtures' label sets) each name
    their node's accelerators with the identity an operator finds a part by; the document is a valid topology."""
    targets = []
    for n, body in enumerate((DCGM, (EXPORTERS / "amd-device-metrics-exporter.prom").read_text(),
                              (EXPORTERS / "npu-exporter.prom").read_text())):
        address, pages = http_server(f"127.0.0.{n + 1}")  # three nodes: targets on one address are one
        pages.set("/metrics", body)
        targets.append(address)
    inv = discover(targets)
    assert not inv.unreadable, inv.unreadable
    doc = inv.topology()
    nodes = {n["name"]: n for rack in doc["racks"] for n in rack["nodes"]}
    assert set(nodes) == {"sn01-b01", "sn02-b01", "127.0.0.3"}  # npu-exporter names no host: its address
    assert nodes["sn01-b01"]["accelerators"][1] == {"index": 1, "uuid": "GPU-b", "pci_bus_id": "00000000:5D:00.0",
                                                    "model": "NVIDIA H100 80GB HBM3"}
    assert nodes["sn02-b01"]["accelerators"] == [
        {"index": 0, "serial": "PCB050123", "model": "AMD Instinct MI300X"},
        {"index": 1, "serial": "PCB051123", "model": "AMD Instinct MI300X"}]
    npus = nodes["127.0.0.3"]["accelerators"]
    assert [(a["kind"], a["index"], a["pci_bus_id"], a["model"]) for a in npus] == [
        ("npu", 0, "0000:c1:00.0", "Ascend910B3"), ("npu", 1, "0000:c2:00.0", "Ascend910B3")]
    topo = Topology.from_dict(doc)
    assert topo.accelerator_model["127.0.0.3/npu1"] == "Ascend910B3"
    assert topo.accelerator_ids["sn02-b01/gpu0"] == {"serial": "PCB050123"}
