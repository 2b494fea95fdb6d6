"""How simulated series are named and labelled, as dcgm-exporter and node_exporter publish them.

One place for the trace writer and the live exporters: the name tables read backwards (canonical metric ->
source metric), the label sets, and the throttle-reasons bitmask written back from its 0/1 flag.
"""

from __future__ import annotations

import csv
from importlib import resources

import numpy as np

from daemon.sim.topology import MODEL

DRIVER = "550.90.07"



def reverse_names(table: str) -> dict[str, tuple[str, int | None]]:
    """canonical metric -> (source metric, mask) from a name table (the first row of a canonical wins)."""
    text = resources.files("daemon.names").joinpath(table).read_text()
    out: dict[str, tuple[str, int | None]] = {}
    for row in csv.DictReader(text.splitlines()):
        transform = row.get("transform") or ""
        mask = int(transform.split(":", 1)[1], 0) if transform.startswith("mask:") else None
        out.setdefault(row["canonical"], (row["source_metric"], mask))
    return out


def dcgm_labels(sim, gpu_row: int, scraped: bool) -> str:
    """dcgm-exporter's label set of one GPU; ``scraped`` adds what Prometheus attaches (instance, job)."""
    topo = sim.topo
    n, g = divmod(gpu_row, topo.gpus_per_node)
    labels = (f'gpu="{g}",UUID="GPU-{sim.uuids[gpu_row]}",pci_bus_id="{topo.gpu_pci(g)}",device="nvidia{g}",'
              f'modelName="{MODEL}",Hostname="{topo.nodes[n]}",DCGM_FI_DRIVER_VERSION="{DRIVER}"')
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
