"""How simulated series are named and labelled, as each vendor's exporter publishes them.

One place for the trace writer and the live exporters: the name tables read backwards (canonical metric ->
source metric, with the labels a table matches on and the inverse of its value transform), the label sets
of dcgm-exporter, AMD's device-metrics-exporter, npu-exporter and node_exporter, and the throttle-reasons
bitmask written back from its 0/1 flag.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

import numpy as np

from daemon.ingest.naming import Transform
from lab.sim.vendors import VENDORS

# Where each vendor's accelerator and port series are published: (file, name table, label set).
EXPORTER_FILES = {("nvidia", True): ("dcgm-exporter.om", "dcgm_exporter.csv", "dcgm"),
                  ("amd", True): ("amd-device-metrics-exporter.om", "amd_device_metrics_exporter.csv", "amd"),
                  ("ascend", True): ("npu-exporter.om", "npu_exporter.csv", "npu"),
                  ("nvidia", False): ("node-exporter.om", "node_exporter.csv", "node"),
                  ("amd", False): ("node-exporter.om", "node_exporter.csv", "node"),
                  ("ascend", False): ("npu-exporter.om", "npu_exporter.csv", "npu-port"),
                  ("gb200", True): ("dcgm-exporter.om", "dcgm_exporter.csv", "dcgm"),
                  ("gb200", False): ("node-exporter.om", "node_exporter.csv", "node")}


@dataclass(frozen=True)
class SourceName:
    """How one canonical metric is published: the source metric, labels its table matches on, its transform."""

    name: str
    extra: str  # ',clock_type="GPU_CLOCK_TYPE_SYSTEM",clock_index="0"' or ""
    transform: Transform | None

    def values(self, canonical: np.ndarray) -> np.ndarray:
        """Canonical values back into the exporter's own (NaN where the exporter would publish nothing)."""
        t = self.transform
        if t is None or t.kind in ("invalid", "nonzero", "range", "none"):
            return canonical
        if t.kind == "mask":
            return to_source(canonical, t.mask)
        if t.kind == "scale":
            return canonical / t.factor
        inverse = {v: k for k, v in reversed(list(zip(t.keys, t.values)))}
        out = np.full(canonical.shape, np.nan)
        for v, k in inverse.items():
            out[canonical == v] = k
        return out


def source_names(table: str, prefer: tuple[tuple[str, str], ...] = ()) -> dict[str, SourceName]:
    """canonical metric -> how it is published, from a name table: the first row of a canonical wins, but where
    ``prefer`` names the field a canonical is published as (a vendor profile's ``sources``: another generation's
    field comes first in the table)."""
    text = resources.files("daemon.ingest.names").joinpath(table).read_text()
    out: dict[str, SourceName] = {}
    preferred = dict(prefer)
    seen: set[str] = set()
    for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        extra = "".join(f',{k}="{v}"' for k, v in (p.split("=", 1) for p in (row.get("match") or "").split(";") if p))
        name = SourceName(row["source_metric"], extra, Transform.parse(row.get("transform") or ""))
        seen.add(row["canonical"])
        if preferred.get(row["canonical"]) == row["source_metric"]:
            out[row["canonical"]] = name
        elif row["canonical"] not in preferred:
            out.setdefault(row["canonical"], name)
    if missing := (set(preferred) & seen) - set(out):
        raise ValueError(f"{table}: no row publishes {', '.join(sorted(missing))} as the profile says")
    return out


@dataclass(frozen=True)
class Family:
    """One published metric family of one vendor's exporter: its file, the engine array and rows behind it,
    each row's series prefix (``name{labels} ``) and how values are written."""

    path: str
    port: int  # the live exporter's TCP port
    metric: str  # engine array
    is_gpu: bool
    rows: np.ndarray  # accelerator or port rows, ascending
    prefixes: np.ndarray
    source: SourceName


EXPORTER_PORTS = {"dcgm-exporter.om": 9400, "amd-device-metrics-exporter.om": 5000, "npu-exporter.om": 8082,
                  "node-exporter.om": 9100}


def published_families(sim, families: list[tuple], scraped: bool) -> tuple[list[Family], list[str]]:
    """The families of ``emission(sim, profile)`` as each vendor's exporter publishes them, and the canonical
    metrics no exporter names (left out)."""
    names: dict[tuple[str, str], dict[str, SourceName]] = {}
    gpu_vendor = [v.name for v in sim.gpu_vendor]
    port_vendor = [sim.node_vendor[int(n)].name for n in sim.port_node]
    out, unpublished = [], []
    for out_metric, m, is_gpu, rows in families:
        idx = np.arange(sim.topo.n_gpus if is_gpu else sim.topo.n_ports) if rows is None else np.asarray(rows)
        if not len(idx):
            continue
        vendor = (gpu_vendor if is_gpu else port_vendor)[int(idx[0])]
        path, table, kind = EXPORTER_FILES[(vendor, is_gpu)]
        if (table, vendor) not in names:
            names[(table, vendor)] = source_names(table, VENDORS[vendor].sources)
        source = names[(table, vendor)].get(out_metric)
        if source is None:
            unpublished.append(f"{out_metric} ({vendor})")
            continue
        prefixes = np.array([f"{source.name}{{{labels_of(sim, kind, int(i), scraped)}{source.extra}}} " for i in idx],
                            dtype=object)
        out.append(Family(path, EXPORTER_PORTS[path], m, is_gpu, idx, prefixes, source))
    return out, unpublished


def reverse_names(table: str) -> dict[str, tuple[str, int | None]]:
    """canonical metric -> (source metric, mask) from a name table (the first row of a canonical wins)."""
    return {c: (n.name, n.transform.mask if n.transform is not None and n.transform.kind == "mask" else None)
            for c, n in source_names(table).items()}


def labels_of(sim, kind: str, row: int, scraped: bool) -> str:
    """The label set of an accelerator or port row as its exporter publishes it (see :data:`EXPORTER_FILES`)."""
    return {"dcgm": dcgm_labels, "amd": amd_labels, "npu": npu_labels, "node": port_labels,
            "npu-port": npu_port_labels}[kind](sim, row, scraped)


def amd_labels(sim, gpu_row: int, scraped: bool) -> str:
    """AMD device-metrics-exporter's mandatory labels of one GPU (pkg/amdgpu/gpuagent)."""
    topo = sim.topo
    n, g = divmod(gpu_row, topo.gpus_per_node)
    labels = (f'card_model="{topo.vendor(n).model}",gpu_compute_partition_type="spx",gpu_id="{g}",'
              f'gpu_memory_partition_type="nps1",gpu_partition_id="0",hostname="{topo.nodes[n]}",'
              f'serial_number="{sim.uuids[gpu_row][:12].upper()}"')
    return labels + (f',instance="{topo.address(n)}:5000",job="amd"' if scraped else "")


def npu_labels(sim, gpu_row: int, scraped: bool) -> str:
    """npu-exporter's card labels of one NPU; it names no host (Prometheus' instance does)."""
    topo = sim.topo
    n, g = divmod(gpu_row, topo.gpus_per_node)
    labels = (f'container_name="",id="{g}",model_name="{topo.vendor(n).model}",namespace="",'
              f'pcie_bus_info="{topo.gpu_pci(g)[4:]}",pod_name="",vdie_id=""')
    return labels + (f',instance="{topo.address(n)}:8082",job="npu"' if scraped else "")


def npu_port_labels(sim, port_row: int, scraped: bool) -> str:
    """An NPU's own RoCE port is reported on its NPU's series (its id is the port's index)."""
    n, p = divmod(port_row, sim.topo.ports_per_node)
    return npu_labels(sim, n * sim.topo.gpus_per_node + p % sim.topo.gpus_per_node, scraped)


def dcgm_labels(sim, gpu_row: int, scraped: bool) -> str:
    """dcgm-exporter's label set of one GPU; ``scraped`` adds what Prometheus attaches (instance, job)."""
    topo = sim.topo
    n, g = divmod(gpu_row, topo.gpus_per_node)
    vendor = topo.vendor(n)
    labels = (f'gpu="{g}",UUID="GPU-{sim.uuids[gpu_row]}",pci_bus_id="{topo.gpu_pci(g)}",device="nvidia{g}",'
              f'modelName="{vendor.model}",Hostname="{topo.nodes[n]}",DCGM_FI_DRIVER_VERSION="{vendor.driver}"')
    return labels + (f',instance="{topo.address(n)}:9400",job="dcgm"' if scraped else "")


def port_labels(sim, port_row: int, scraped: bool) -> str:
    """node_exporter's InfiniBand label set of one port."""
    topo = sim.topo
    n, p = divmod(port_row, topo.ports_per_node)
    if scraped:
        return f'device="mlx5_{p}",instance="{topo.address(n)}:9100",job="node",port="1"'
    return f'device="mlx5_{p}",port="1"'


def to_source(values: np.ndarray, mask: int | None) -> np.ndarray:
    """Values as the exporter publishes them: a 0/1 flag back into one bit of its bitmask (NaN kept)."""
    if mask is None:
        return values
    return np.where(np.isnan(values), np.nan, np.where(values > 0, float(mask & -mask), 0.0))
