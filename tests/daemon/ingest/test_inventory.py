"""``raswarden init``'s inventory: what each exporter's labels say is there, read from real HTTP servers."""

from __future__ import annotations

from daemon.ingest.inventory import discover
from daemon.topology import Topology
from tests.conftest import REAL, ROOT

EXPORTERS = ROOT / "fixtures" / "exporters"
K8S_POD_LINE = (REAL / "quoted" / "dcgm-exporter-k8s-hostname.prom").read_text().splitlines()[1] + "\n"
NVIDIA_GPU_EXPORTER = REAL / "nvidia_gpu_exporter" / "linux-x86_64__nvidia-h200__590.48.01__load.metrics"
DCGM = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pci_bus_id="00000000:3B:00.0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="sn01-b01"} 41\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",pci_bus_id="00000000:5D:00.0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="sn01-b01"} 44\n')


def test_every_exporters_accelerators_are_found(http_server):  # noqa: F811
    """dcgm-exporter, AMD device-metrics-exporter, Ascend npu-exporter (their fixtures' label sets) and
    nvidia_gpu_exporter (a real scrape of it) each name
    their node's accelerators with the identity an operator finds a part by; the document is a valid topology."""
    targets = []
    for n, body in enumerate((DCGM, (EXPORTERS / "amd-device-metrics-exporter.prom").read_text(),
                              (EXPORTERS / "npu-exporter.prom").read_text(), NVIDIA_GPU_EXPORTER.read_text(),
                              K8S_POD_LINE)):
        address, pages = http_server(f"127.0.0.{n + 1}")  # three nodes: targets on one address are one
        pages.set("/metrics", body)
        targets.append(address)
    inv = discover(targets)
    assert not inv.unreadable, inv.unreadable
    doc = inv.topology()
    nodes = {n["name"]: n for rack in doc["racks"] for n in rack["nodes"]}
    # npu-exporter and nvidia_gpu_exporter name no host, nor does a dcgm-exporter whose Hostname is its Kubernetes
    # pod's name (real line, NVIDIA/dcgm-exporter PR 129): their addresses
    assert set(nodes) == {"sn01-b01", "sn02-b01", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
    assert nodes["127.0.0.5"]["accelerators"][0]["uuid"] == "GPU-4c226d4d-8129-a7cf-fecd-daa9018b4b48"
    assert nodes["sn01-b01"]["accelerators"][1] == {"index": 1, "uuid": "GPU-b", "pci_bus_id": "00000000:5D:00.0",
                                                    "model": "NVIDIA H100 80GB HBM3"}
    assert nodes["sn02-b01"]["accelerators"] == [
        {"index": 0, "serial": "PCB050123", "model": "AMD Instinct MI300X"},
        {"index": 1, "serial": "PCB051123", "model": "AMD Instinct MI300X"}]
    npus = nodes["127.0.0.3"]["accelerators"]
    assert [(a["kind"], a["index"], a["pci_bus_id"], a["model"]) for a in npus] == [
        ("npu", 0, "0000:c1:00.0", "Ascend910B3"), ("npu", 1, "0000:c2:00.0", "Ascend910B3")]
    # nvidia_gpu_exporter's real H200 scrape: the GPU as its info series gives it (uuid and serial zeroed upstream)
    assert nodes["127.0.0.4"]["accelerators"] == [{"index": 0, "uuid": "00000000-0000-0000-0000-000000000000",
                                                   "serial": "0000000000000", "pci_bus_id": "00000000:83:00.0",
                                                   "model": "NVIDIA H200"}]
    topo = Topology.from_dict(doc)
    assert topo.accelerator_model["127.0.0.3/npu1"] == "Ascend910B3"
    assert topo.accelerator_ids["sn02-b01/gpu0"] == {"serial": "PCB050123"}
