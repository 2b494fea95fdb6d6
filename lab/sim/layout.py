"""Simulated topology: racks and supernodes → blades → accelerators and fabric ports → leaf switch ports.

Presets (``topology: {preset: ..., accelerators: N}`` in a scenario):

* ``scalex640``: one supernode of 640 accelerators in one rack (80 blades × 8), 4 × 400G ports per blade, a
  cooling loop per rack; ``accelerators`` scales it (up to 100,000: 640 per rack, a supernode per rack);
* ``scalex640-mixed``: the same rack built from three vendors' blades, a third each (NVIDIA H100, AMD
  MI300X, Ascend 910B) in runs of blades, 8 × 400G ports per blade (one per accelerator, rail-optimized;
  an Ascend NPU's port is its own RoCE interface);
* ``cloudmatrix384``: 384 Ascend NPUs in one supernode spread over 16 racks: 12 compute racks of 4 nodes × 8
  NPUs and 4 network racks of the unified-bus switches (no nodes), one NPU RoCE port each; cooling per
  rack pair;
* ``nvl72``: GB200 NVL72, 72 Blackwell GPUs in 18 compute trays of 4 per rack, one NVLink domain (a supernode per
  rack), 4 × 400G ports per tray; the GPUs at the PCI addresses a real tray's dcgm-exporter names (domains 8, 9,
  0x18 and 0x19, bus 1: NVIDIA/dcgm-exporter issue 581).

The result is written as ``topology.yaml`` and read back by :class:`daemon.topology.Topology`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from lab.sim.vendors import VENDORS, VendorProfile

GPU_PCI = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
GB200_PCI = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")
PORT_PCI = ("0c", "2c", "8c", "ac", "1c", "3c", "9c", "bc")
MODEL = VENDORS["nvidia"].model


def host_octets(node_index: int) -> str:
    """The last three octets of node ``node_index``'s address: ``0.0.1`` .. ``0.0.254``, ``0.1.1``, ... (never
    ``.0`` or ``.255`` and above in the last octet, so every index up to 254 * 65536 gets a valid address)."""
    return f"{node_index // (254 * 256) % 256}.{node_index // 254 % 256}.{node_index % 254 + 1}"


@dataclass(frozen=True)
class SimTopology:
    """Arrays describing every node, accelerator and port (index order is the entity order)."""

    nodes: tuple[str, ...]
    node_rack: np.ndarray  # rack index per node
    racks: tuple[str, ...]
    gpus_per_node: int
    ports_per_node: int
    supernode_of_rack: tuple[str, ...]
    cooling_of_rack: tuple[str, ...]
    node_vendor: tuple[str, ...] = ()  # vendor name per node (default: all NVIDIA)
    nodes_per_leaf: int = 80  # switch port numbering: a leaf's port per node of its rack
    gpu_pci_ids: tuple[str, ...] = ()  # each GPU index's PCI address on a node (default: bus GPU_PCI[g], domain 0)

    def vendor(self, node_index: int) -> VendorProfile:
        return VENDORS[self.node_vendor[node_index]] if self.node_vendor else VENDORS["nvidia"]

    @property
    def vendors(self) -> tuple[str, ...]:
        """The vendors present, in first-node order."""
        return tuple(dict.fromkeys(self.node_vendor)) if self.node_vendor else ("nvidia",)

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_gpus(self) -> int:
        return self.n_nodes * self.gpus_per_node

    @property
    def n_ports(self) -> int:
        return self.n_nodes * self.ports_per_node

    def gpu_ids(self) -> list[str]:
        return [f"{n}/{self.vendor(i).prefix}{g}" for i, n in enumerate(self.nodes) for g in range(self.gpus_per_node)]

    def port_ids(self) -> list[str]:
        return [f"{n}/{self.vendor(i).port_device.format(p=p)}:1" for i, n in enumerate(self.nodes)
                for p in range(self.ports_per_node)]

    def address(self, node_index: int) -> str:
        """The node's management address (what ``instance`` labels carry)."""
        return "10." + host_octets(node_index)

    def gpu_pci(self, g: int) -> str:
        if self.gpu_pci_ids:
            return self.gpu_pci_ids[g % len(self.gpu_pci_ids)]
        return f"00000000:{GPU_PCI[g % len(GPU_PCI)].upper()}:00.0"

    def port_pci(self, p: int) -> str:
        return f"0000:{PORT_PCI[p % len(PORT_PCI)]}:00.0"

    @staticmethod
    def netdev(p: int) -> str:
        return f"ibp{int(PORT_PCI[p % len(PORT_PCI)], 16)}s0"

    def to_dict(self, uuid_of=None) -> dict:
        """The topology file (see :mod:`daemon.topology`)."""
        racks = []
        for r, rack in enumerate(self.racks):
            nodes = []
            for i in np.flatnonzero(self.node_rack == r):
                name, vendor = self.nodes[i], self.vendor(int(i))
                accs = [{"index": g, "pci_bus_id": self.gpu_pci(g), "model": vendor.model}
                        | ({"kind": vendor.prefix} if vendor.prefix != "gpu" else {})
                        | ({"uuid": uuid_of(i, g)} if uuid_of else {}) for g in range(self.gpus_per_node)]
                ports = [{"device": vendor.port_device.format(p=p), "port": 1}
                         | ({"pci": self.port_pci(p), "netdev": self.netdev(p)} if vendor.name != "ascend" else {})
                         | {"switchport": f"{rack}-leaf{p + 1:02d}/{int(i) % self.nodes_per_leaf + 1}"}
                         for p in range(self.ports_per_node)]
                nodes.append({"name": name, "scheduler_name": name, "aliases": [self.address(int(i))],
                              "accelerators": accs, "ports": ports})
            racks.append({"name": rack, "supernode": self.supernode_of_rack[r], "cooling": self.cooling_of_rack[r],
                          "nodes": nodes})
        return {"racks": racks}

    def write(self, path: Path, uuid_of=None) -> None:
        path.write_text(yaml.safe_dump(self.to_dict(uuid_of), sort_keys=False, width=200))


def _racks(n: int, prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{r + 1:02d}" if n < 100 else f"{prefix}{r + 1:03d}" for r in range(n))


def scalex640(accelerators: int = 640, gpus_per_node: int = 8, ports_per_node: int = 4,
              nodes_per_rack: int = 80, vendors: tuple[str, ...] = ()) -> SimTopology:
    """The scaleX640 preset: 640 accelerators per rack-sized supernode, as many racks as needed.

    ``vendors`` (e.g. ``("nvidia", "amd", "ascend")``) splits each rack's blades into equal runs per vendor.
    """
    if accelerators % gpus_per_node:
        raise ValueError(f"accelerators ({accelerators}) must be a multiple of {gpus_per_node} per blade")
    if not 0 < accelerators <= 100_000:
        raise ValueError("accelerators must be between 1 and 100,000")
    n_nodes = accelerators // gpus_per_node
    n_racks = -(-n_nodes // nodes_per_rack)
    racks = _racks(n_racks, "r")
    nodes = []
    node_rack = np.empty(n_nodes, dtype=np.int64)
    node_vendor = []
    for i in range(n_nodes):
        r, b = divmod(i, nodes_per_rack)
        node_rack[i] = r
        sn = f"sn{r + 1:02d}" if n_racks < 100 else f"sn{r + 1:03d}"
        nodes.append(f"{sn}-b{b + 1:02d}")
        if vendors:
            in_rack = min(nodes_per_rack, n_nodes - r * nodes_per_rack)
            node_vendor.append(vendors[b * len(vendors) // in_rack])
    supernodes = tuple(n.split("-")[0] for n in (nodes[r * nodes_per_rack] for r in range(n_racks)))
    cooling = _racks(n_racks, "cdu")
    return SimTopology(tuple(nodes), node_rack, racks, gpus_per_node, ports_per_node, supernodes, cooling,
                       tuple(node_vendor), nodes_per_rack)


def scalex640_mixed(accelerators: int = 640) -> SimTopology:
    """scaleX640 with a third of each rack's blades from each vendor, 8 ports per blade."""
    return scalex640(accelerators, ports_per_node=8, vendors=("nvidia", "amd", "ascend"))


def cloudmatrix384(accelerators: int = 384) -> SimTopology:
    """CloudMatrix384: 384 Ascend NPUs of one supernode over 16 racks (12 with 4 nodes of 8 NPUs, 4 of
    unified-bus switches); several supernodes when ``accelerators`` asks for more."""
    per_node, per_rack, compute_racks = 8, 4, 12
    if accelerators % (per_node * per_rack * compute_racks):
        raise ValueError("cloudmatrix384 takes multiples of 384 accelerators")
    n_super = accelerators // 384
    nodes, node_rack, racks, supers, cooling = [], [], [], [], []
    for s in range(n_super):
        for r in range(16):
            racks.append(f"cm{s + 1:02d}-r{r + 1:02d}")
            supers.append(f"cm{s + 1:02d}")
            cooling.append(f"cm{s + 1:02d}-cdu{r // 2 + 1:02d}")
            if r >= compute_racks:
                continue  # unified-bus switch racks: no compute nodes
            for b in range(per_rack):
                nodes.append(f"cm{s + 1:02d}-n{r * per_rack + b + 1:02d}")
                node_rack.append(len(racks) - 1)
    return SimTopology(tuple(nodes), np.array(node_rack, dtype=np.int64), tuple(racks), per_node, per_node,
                       tuple(supers), tuple(cooling), ("ascend",) * len(nodes), per_rack)


def nvl72(accelerators: int = 72) -> SimTopology:
    """GB200 NVL72: 18 compute trays of 4 GB200 GPUs per rack, one NVLink domain (supernode) per rack."""
    if accelerators % 72:
        raise ValueError("nvl72 takes multiples of 72 accelerators")
    n_racks = accelerators // 72
    racks = _racks(n_racks, "nvl")
    nodes = [f"{rack}-t{t + 1:02d}" for rack in racks for t in range(18)]
    node_rack = np.repeat(np.arange(n_racks), 18)
    return SimTopology(tuple(nodes), node_rack, racks, 4, 4, racks, _racks(n_racks, "cdu"), ("gb200",) * len(nodes),
                       18, GB200_PCI)


PRESETS = {"scalex640": scalex640, "scalex640-mixed": scalex640_mixed, "cloudmatrix384": cloudmatrix384,
           "nvl72": nvl72}
