"""The optional topology file: racks, supernodes, cooling loops, nodes, their devices and aliases.

Format (``topology.yaml``)::

    racks:
      - name: r01
        supernode: sn01            # optional
        cooling: cdu01             # optional
        scheduler: slurm           # optional: which scheduler runs its nodes (slurm | kubernetes), [scheduler] mixed
        nodes:
          - name: sn01-b01
            scheduler_name: node1  # optional, the name Slurm knows
            scheduler: kubernetes  # optional: this node's scheduler, over its rack's
            aliases: [10.1.0.11, "127.0.0.11"]
            accelerators:
              - {index: 0, pci_bus_id: "00000000:3B:00.0", uuid: GPU-..., serial: "1652222014738",
                 model: NVIDIA H100 80GB HBM3}     # serial optional
            ports:
              - {device: mlx5_0, port: 1, pci: "0000:0c:00.0", netdev: ibp12s0, switchport: leaf01/1}

Without a topology, nodes and their devices are inferred from telemetry labels (docs/architecture.md §3).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from daemon.timetext import parse_zone


# Accelerator id prefixes (docs/architecture.md §3): GPUs (NVIDIA, AMD), Ascend NPUs, Hygon DCUs named as their
# tools do.
ACCELERATOR_PREFIXES = ("gpu", "npu", "dcu", "xpu")
SCHEDULERS = ("slurm", "kubernetes")  # what a rack's or node's ``scheduler`` may name


class TopologyError(ValueError):
    """The topology file is malformed; the message names the path inside the file."""


def normalize_pci(address: str) -> str | None:
    """Canonical PCI id ``dddd:bb:dd`` (domain, bus, device; lower case, no function).

    Accepts dcgm-exporter's ``00000000:3B:00.0``, the kernel's ``0000:3b:00.0`` and the Xid form
    ``0000:3b:00``. Returns None for anything else.
    """
    text = address.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return None
    domain, bus, devfn = parts
    device = devfn.split(".", 1)[0]
    try:
        d, b, v = int(domain, 16), int(bus, 16), int(device, 16)
    except ValueError:
        return None
    if d > 0xFFFFFFFF or b > 0xFF or v > 0x1F:
        return None
    return f"{d & 0xFFFF:04x}:{b:02x}:{v:02x}"


def normalize_pci_function(address: str) -> str | None:
    """Canonical PCI id with its function, ``dddd:bb:dd.f``, when the address names one; else as
    :func:`normalize_pci`. The two ports of a dual-port NIC differ only in the function (``0000:41:00.0`` and
    ``.1``), so fabric ports are told apart by it; accelerators (and the Xid lines, which print no function) use
    the short form."""
    short = normalize_pci(address)
    if short is None:
        return None
    text = address.strip().lower()
    _, dot, function = text.rpartition(".")
    if dot and function.isdigit() and int(function) <= 7 and ":" in text:
        return f"{short}.{int(function)}"
    return short


def vendor_of(kind: str, model: str) -> str | None:
    """The vendor of an accelerator by its id kind and model name (None when neither tells)."""
    lowered = model.lower()
    if kind == "npu" or lowered.startswith("ascend"):
        return "ascend"
    if "hygon" in lowered or kind == "dcu":
        return "hygon"
    if lowered.startswith("amd") or "instinct" in lowered:
        return "amd"
    if lowered.startswith("nvidia") or lowered.startswith(("h100", "h200", "a100", "b200", "gb200")):
        return "nvidia"
    return None


def is_address(host: str) -> bool:
    """True when ``host`` is an IP address rather than a host name."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _pci(value: object, where: str) -> str:
    pci = normalize_pci(str(value))
    if pci is None:
        raise TopologyError(f"{where}: not a PCI address: {value!r}")
    return pci


@dataclass
class Topology:
    """Nodes and their place in racks, supernodes and cooling loops, with lookup tables."""

    node_rack: dict[str, str] = field(default_factory=dict)
    rack_supernode: dict[str, str] = field(default_factory=dict)
    rack_cooling: dict[str, str] = field(default_factory=dict)
    scheduler_name: dict[str, str] = field(default_factory=dict)
    node_scheduler: dict[str, str] = field(default_factory=dict)  # node -> slurm | kubernetes (a mixed cluster)
    aliases: dict[str, str] = field(default_factory=dict)
    pci_accelerator: dict[tuple[str, str], str] = field(default_factory=dict)
    pci_port: dict[tuple[str, str], str] = field(default_factory=dict)
    netdev_port: dict[tuple[str, str], str] = field(default_factory=dict)
    netdev_nodes: set[str] = field(default_factory=set)  # nodes whose ports the file lists by netdev
    port_switchport: dict[str, str] = field(default_factory=dict)
    node_vendor: dict[str, str] = field(default_factory=dict)  # from the accelerators' model or kind
    accelerator_model: dict[str, str] = field(default_factory=dict)
    # What an operator needs to find a part (alerts, the incident page): accelerator -> uuid, serial, PCI bus id as
    # written; port -> PCI address and netdev.
    accelerator_ids: dict[str, dict[str, str]] = field(default_factory=dict)
    port_ids: dict[str, dict[str, str]] = field(default_factory=dict)
    _ambiguous_pci: set[tuple[str, str]] = field(default_factory=set, repr=False)
    #: the zone the hosts' logs stamp their times in where a line names none (syslog, dmesg -T): None for UTC
    timezone: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        """Read and validate a topology file."""
        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise TopologyError(f"{path}: not valid YAML: {exc}") from exc
        return cls.from_dict(doc or {}, source=str(path))

    @classmethod
    def configured(cls, path: str | Path | None, key: str = "service.topology") -> Topology:
        """The topology a config names at ``key`` (an empty one when it names none); a file that cannot be read is
        a :class:`TopologyError` naming the key."""
        if not path:
            return cls()
        try:
            return cls.load(path)
        except OSError as exc:
            raise TopologyError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None

    @classmethod
    def from_dict(cls, doc: dict, source: str = "topology") -> Topology:
        topo = cls()
        if not isinstance(doc, dict):
            raise TopologyError(f"{source}: the top level must be a mapping")
        for alias, node in (doc.get("aliases") or {}).items():
            topo.aliases[str(alias)] = str(node)
        if doc.get("timezone") is not None:
            try:
                parse_zone(str(doc["timezone"]))
            except ValueError as exc:
                raise TopologyError(f"{source}: timezone: {exc}") from None
            topo.timezone = str(doc["timezone"])
        for r, rack in enumerate(doc.get("racks") or []):
            where = f"{source}: racks[{r}]"
            if not isinstance(rack, dict) or "name" not in rack:
                raise TopologyError(f"{where}: each rack needs a name")
            rack_name = str(rack["name"])
            if rack.get("supernode"):
                topo.rack_supernode[rack_name] = str(rack["supernode"])
            if rack.get("cooling"):
                topo.rack_cooling[rack_name] = str(rack["cooling"])
            for n, node in enumerate(rack.get("nodes") or []):
                topo._add_node(rack_name, node, f"{where}.nodes[{n}]", rack.get("scheduler"))
        return topo

    def _add_node(self, rack: str, node: dict | str, where: str, rack_scheduler: str | None = None) -> None:
        if isinstance(node, str):
            node = {"name": node}
        if not isinstance(node, dict) or "name" not in node:
            raise TopologyError(f"{where}: each node needs a name")
        name = str(node["name"])
        self.node_rack[name] = rack
        scheduler = node.get("scheduler") or rack_scheduler
        if scheduler:
            if scheduler not in SCHEDULERS:
                raise TopologyError(f"{where}.scheduler: {scheduler!r} is not one of {', '.join(SCHEDULERS)}")
            self.node_scheduler[name] = str(scheduler)
        if node.get("scheduler_name"):
            self.scheduler_name[name] = str(node["scheduler_name"])
        for alias in node.get("aliases") or []:
            self.aliases[str(alias)] = name
        for a, acc in enumerate(node.get("accelerators") or []):
            if not isinstance(acc, dict) or "index" not in acc:
                raise TopologyError(f"{where}.accelerators[{a}]: needs an index")
            prefix = str(acc.get("kind", "gpu"))
            if prefix not in ACCELERATOR_PREFIXES:
                raise TopologyError(f"{where}.accelerators[{a}].kind: {prefix!r} is not one of "
                                    f"{', '.join(ACCELERATOR_PREFIXES)}")
            entity = f"{name}/{prefix}{int(acc['index'])}"
            if acc.get("model"):
                self.accelerator_model[entity] = str(acc["model"])
            vendor = vendor_of(prefix, str(acc.get("model", "")))
            if vendor:
                self.node_vendor.setdefault(name, vendor)
            if acc.get("pci_bus_id"):
                self.pci_accelerator[(name, _pci(acc["pci_bus_id"], f"{where}.accelerators[{a}].pci_bus_id"))] = entity
            ids = {k: str(acc[k]) for k in ("uuid", "serial", "pci_bus_id") if acc.get(k)}
            if ids:
                self.accelerator_ids[entity] = ids
        for p, port in enumerate(node.get("ports") or []):
            if not isinstance(port, dict) or "device" not in port:
                raise TopologyError(f"{where}.ports[{p}]: needs a device")
            entity = f"{name}/{port['device']}:{port.get('port', 1)}"
            if port.get("pci"):
                where_pci = f"{where}.ports[{p}].pci"
                short = _pci(port["pci"], where_pci)
                full = normalize_pci_function(str(port["pci"])) or short
                self.pci_port[(name, full)] = entity
                # The short form (no function) names the port only while no other port of the node shares it.
                taken = self.pci_port.get((name, short))
                if taken is None and (name, short) not in self._ambiguous_pci:
                    self.pci_port[(name, short)] = entity
                elif taken is not None and taken != entity:
                    del self.pci_port[(name, short)]
                    self._ambiguous_pci.add((name, short))
            if port.get("netdev"):
                self.netdev_port[(name, str(port["netdev"]))] = entity
                self.netdev_nodes.add(name)
            if port.get("switchport"):
                self.port_switchport[entity] = str(port["switchport"])
            ids = {k: str(port[k]) for k in ("pci", "netdev") if port.get(k)}
            if ids:
                self.port_ids[entity] = ids

    def port_at(self, node: str, pci: str) -> str | None:
        """The fabric port at a PCI address (with its function where the line gives one) on a node."""
        port = self.pci_port.get((node, pci))
        if port is None and "." in pci:
            port = self.pci_port.get((node, pci.rsplit(".", 1)[0]))
        return port

    def place(self, entity: str) -> list[tuple[str, str]]:
        """Where an entity is and what identifies it, as (what, value) pairs in the order a technician looks:
        supernode, rack, cooling loop, node (and its scheduler name), then the part (slot, model, serial, UUID, PCI
        bus id; a port's device, netdev, PCI address and the switch port at its far end). Only what is known."""
        node, _, local = entity.partition("/")
        rack = self.node_rack.get(node)
        if rack is None and not local:  # a rack's or a cooling loop's own incident (looked up only then)
            loops = sorted(r for r, c in self.rack_cooling.items() if c == entity)
            if loops:
                return [("cooling", entity), ("racks", ", ".join(loops))]
            if entity in self.rack_supernode or entity in self.rack_cooling or entity in self.node_rack.values():
                rack = entity
        out: list[tuple[str, str]] = []
        if rack:
            if self.rack_supernode.get(rack):
                out.append(("supernode", self.rack_supernode[rack]))
            out.append(("rack", rack))
            if self.rack_cooling.get(rack):
                out.append(("cooling", self.rack_cooling[rack]))
        if node and node != rack:
            out.append(("node", node + (f" (Slurm: {self.scheduler_name[node]})" if node in self.scheduler_name
                                        else "")))
        if local.startswith(ACCELERATOR_PREFIXES):
            out.append(("slot", local))
            if entity in self.accelerator_model:
                out.append(("model", self.accelerator_model[entity]))
            ids = self.accelerator_ids.get(entity, {})
            out += [(label, ids[key]) for key, label in (("serial", "serial"), ("uuid", "UUID"),
                                                         ("pci_bus_id", "PCI")) if key in ids]
        elif local:
            ids = self.port_ids.get(entity, {})
            out.append(("port", local))
            out += [(label, ids[key]) for key, label in (("netdev", "netdev"), ("pci", "PCI")) if key in ids]
            if entity in self.port_switchport:
                out.append(("far end", self.port_switchport[entity]))
        return out

    def rack_of(self, node: str) -> str | None:
        """Rack of a node, or None when the topology does not place it."""
        return self.node_rack.get(node)

    def resolve_host(self, host: str) -> str | None:
        """Node name for a host name or address; None for an address without an alias."""
        if host in self.aliases:
            return self.aliases[host]
        if is_address(host):
            return None
        return host
