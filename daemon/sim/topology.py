"""Simulated topology: racks and supernodes → blades → accelerators and fabric ports → leaf switch ports.

Preset ``scalex640``: one supernode of 640 accelerators in one rack (80 blades × 8), 4 × 400G ports per
blade, a cooling loop per rack; ``accelerators`` scales it (up to 100,000: 640 per rack, a supernode
per rack). The result is written as ``topology.yaml`` and read back by :class:`daemon.topology.Topology`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

GPU_PCI = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
PORT_PCI = ("0c", "2c", "8c", "ac")
MODEL = "NVIDIA H100 80GB HBM3"


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
        return [f"{n}/gpu{g}" for n in self.nodes for g in range(self.gpus_per_node)]

    def port_ids(self) -> list[str]:
        return [f"{n}/mlx5_{p}:1" for n in self.nodes for p in range(self.ports_per_node)]

    def address(self, node_index: int) -> str:
        """The node's management address (what ``instance`` labels carry)."""
        return "10." + host_octets(node_index)

    def gpu_pci(self, g: int) -> str:
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
                name = self.nodes[i]
                accs = [{"index": g, "pci_bus_id": self.gpu_pci(g), "model": MODEL}
                        | ({"uuid": uuid_of(i, g)} if uuid_of else {}) for g in range(self.gpus_per_node)]
                ports = [{"device": f"mlx5_{p}", "port": 1, "pci": self.port_pci(p), "netdev": self.netdev(p),
                          "switchport": f"{rack}-leaf{p + 1:02d}/{int(i) % 80 + 1}"}
                         for p in range(self.ports_per_node)]
                nodes.append({"name": name, "scheduler_name": name, "aliases": [self.address(int(i))],
                              "accelerators": accs, "ports": ports})
            racks.append({"name": rack, "supernode": self.supernode_of_rack[r], "cooling": self.cooling_of_rack[r],
                          "nodes": nodes})
        return {"racks": racks}

    def write(self, path: Path, uuid_of=None) -> None:
        path.write_text(yaml.safe_dump(self.to_dict(uuid_of), sort_keys=False, width=200))


def scalex640(accelerators: int = 640, gpus_per_node: int = 8, ports_per_node: int = 4,
              nodes_per_rack: int = 80) -> SimTopology:
    """The scaleX640 preset: 640 accelerators per rack-sized supernode, as many racks as needed."""
    if accelerators % gpus_per_node:
        raise ValueError(f"accelerators ({accelerators}) must be a multiple of {gpus_per_node} per blade")
    if not 0 < accelerators <= 100_000:
        raise ValueError("accelerators must be between 1 and 100,000")
    n_nodes = accelerators // gpus_per_node
    n_racks = -(-n_nodes // nodes_per_rack)
    racks = tuple(f"r{r + 1:02d}" if n_racks < 100 else f"r{r + 1:03d}" for r in range(n_racks))
    nodes = []
    node_rack = np.empty(n_nodes, dtype=np.int64)
    for i in range(n_nodes):
        r, b = divmod(i, nodes_per_rack)
        node_rack[i] = r
        sn = f"sn{r + 1:02d}" if n_racks < 100 else f"sn{r + 1:03d}"
        nodes.append(f"{sn}-b{b + 1:02d}")
    supernodes = tuple(n.split("-")[0] for n in (nodes[r * nodes_per_rack] for r in range(n_racks)))
    cooling = tuple(f"cdu{r + 1:02d}" if n_racks < 100 else f"cdu{r + 1:03d}" for r in range(n_racks))
    return SimTopology(tuple(nodes), node_rack, racks, gpus_per_node, ports_per_node, supernodes, cooling)


PRESETS = {"scalex640": scalex640}
