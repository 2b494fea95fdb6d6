"""What the exporters say is there: nodes, their accelerators and fabric ports, for ``raswarden init``.

One scrape of each target (a ``host:port`` list or Prometheus file_sd files) is read for the labels that name
parts (:data:`ACCELERATOR_LABELS`): dcgm-exporter's ``gpu``, ``UUID``, ``pci_bus_id``, ``modelName`` and
``Hostname``; AMD device-metrics-exporter's ``gpu_id``, ``serial_number``, ``card_model`` and ``hostname``; Ascend
npu-exporter's ``id``, ``vdie_id``, ``pcie_bus_info`` and ``model_name`` on its ``npu_*`` series; nvidia_gpu_exporter's
``index``, ``uuid``, ``serial``, ``pci_bus_id`` and ``name`` on ``nvidia_smi_gpu_info``; node_exporter's
``node_infiniband_*{device, port}`` and ``node_uname_info{nodename}``. Targets on one address are one node; its
name is the exporter's own (``Hostname``, ``nodename``), else the address. The result is a topology.yaml document
(docs/replay.md) with every address as an alias, which an operator then sorts into racks: nodes are grouped by
the part of their name before the last ``-`` (``sn01-b07`` in ``sn01``), a guess the file says is one.
"""

from __future__ import annotations

import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from daemon.ingest.naming import EXPORTER_POD, host_of_instance


@dataclass(frozen=True)
class AcceleratorLabels:
    """How one exporter names an accelerator: the labels of its index and identity, and the series they are on."""

    kind: str  # the entity prefix (topology ``kind``)
    index: str
    identity: tuple[str, ...]  # at least one present: the series describes an accelerator
    uuid: str = ""
    serial: str = ""
    pci: str = ""
    model: str = ""
    host: str = ""
    prefix: str = ""  # the series' name starts so (npu-exporter's ``id`` is too common a label to go by alone)


ACCELERATOR_LABELS = (
    AcceleratorLabels("gpu", "gpu", ("UUID", "pci_bus_id"), uuid="UUID", pci="pci_bus_id", model="modelName",
                      host="Hostname"),
    # dcgm-exporter's 1.x names with --use-old-namespace: dcgm_* with a lowercase uuid
    AcceleratorLabels("gpu", "gpu", ("uuid",), uuid="uuid", model="modelName", host="Hostname", prefix="dcgm_"),
    AcceleratorLabels("gpu", "gpu_id", ("card_model", "serial_number"), serial="serial_number", model="card_model",
                      host="hostname"),
    AcceleratorLabels("npu", "id", ("model_name", "pcie_bus_info"), uuid="vdie_id", pci="pcie_bus_info",
                      model="model_name", prefix="npu_"),
    # nvidia_gpu_exporter: only its info series names the GPU's index (the others carry the uuid alone)
    AcceleratorLabels("gpu", "index", ("uuid", "pci_bus_id"), uuid="uuid", serial="serial", pci="pci_bus_id",
                      model="name", prefix="nvidia_smi_gpu_info"),
)


@dataclass
class Node:
    """One node as its exporters describe it."""

    name: str
    aliases: set[str] = field(default_factory=set)
    # (kind, index) -> uuid, serial, pci_bus_id, model
    accelerators: dict[tuple[str, int], dict[str, str]] = field(default_factory=dict)
    ports: set[tuple[str, int]] = field(default_factory=set)  # (device, port)


@dataclass
class Inventory:
    """The nodes found and the targets that could not be read (target -> why)."""

    nodes: dict[str, Node] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)

    def topology(self) -> dict:
        """A topology.yaml document: racks by name prefix, nodes with aliases, accelerators and ports."""
        racks: dict[str, list[Node]] = {}
        for node in sorted(self.nodes.values(), key=lambda n: n.name):
            racks.setdefault(node.name.rsplit("-", 1)[0] if "-" in node.name else "r01", []).append(node)
        doc = {"racks": []}
        for rack, nodes in racks.items():
            entries = []
            for n in nodes:
                entry: dict = {"name": n.name, "aliases": sorted(n.aliases)}
                if n.accelerators:
                    entry["accelerators"] = [{"index": i, **({"kind": kind} if kind != "gpu" else {}),
                                              **{k: v for k, v in n.accelerators[(kind, i)].items() if v}}
                                             for kind, i in sorted(n.accelerators)]
                if n.ports:
                    entry["ports"] = [{"device": d, "port": p} for d, p in sorted(n.ports)]
                entries.append(entry)
            doc["racks"].append({"name": rack, "nodes": entries})
        return doc


def _scrape(target: str, timeout_s: float) -> str:
    url = target if "://" in target else f"http://{target}/metrics"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "raswarden-init"}),
                                timeout=timeout_s) as r:
        return r.read().decode("utf-8", "replace")


def _read(text: str, address: str, inv: Inventory, names: dict[str, str]) -> None:
    """Fold one target's exposition into the node of ``address``."""
    found: dict[str, str] = {}
    accelerators: dict[tuple[str, int], dict[str, str]] = {}
    ports: set[tuple[str, int]] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "node_uname_info" and labels.get("nodename"):
                found["name"] = labels["nodename"]
            for way in ACCELERATOR_LABELS:
                if way.index not in labels or not sample.name.startswith(way.prefix) or \
                        not any(k in labels for k in way.identity):
                    continue
                if way.host and labels.get(way.host) and not EXPORTER_POD.fullmatch(labels[way.host]):
                    found["name"] = labels[way.host]  # (a pod's name is no host: the address names the node)
                try:
                    index = int(labels[way.index])
                except ValueError:
                    break
                accelerators.setdefault((way.kind, index), {
                    "uuid": labels.get(way.uuid, "") if way.uuid else "",
                    "serial": labels.get(way.serial, "") if way.serial else "",
                    "pci_bus_id": labels.get(way.pci, "") if way.pci else "",
                    "model": labels.get(way.model, "") if way.model else ""})
                break
            if sample.name.startswith("node_infiniband_") and labels.get("device") and labels.get("port"):
                try:
                    ports.add((labels["device"], int(labels["port"])))
                except ValueError:
                    continue
    if found.get("name"):
        names[address] = found["name"]
    node = inv.nodes.setdefault(address, Node(address))
    node.aliases.add(address)
    node.accelerators.update(accelerators)
    node.ports |= ports


def discover(targets: list[str], timeout_s: float = 5.0, concurrency: int = 32) -> Inventory:
    """Scrape every target once and describe what is there (targets that cannot be read are listed, not fatal)."""
    inv = Inventory()
    names: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        texts = dict(zip(targets, pool.map(lambda t: _try(t, timeout_s), targets)))
    for target, (text, error) in texts.items():
        if error is not None:
            inv.unreadable[target] = error
            continue
        try:
            _read(text, host_of_instance(target.split("://", 1)[-1].split("/", 1)[0]), inv, names)
        except ValueError as exc:  # not an exposition
            inv.unreadable[target] = f"not Prometheus text: {exc}"
    # one node per address, named as its exporters name it
    merged: dict[str, Node] = {}
    for address, node in inv.nodes.items():
        name = names.get(address, address)
        into = merged.setdefault(name, Node(name))
        into.aliases |= node.aliases
        into.accelerators.update(node.accelerators)
        into.ports |= node.ports
    inv.nodes = merged
    return inv


def _try(target: str, timeout_s: float) -> tuple[str, str | None]:
    try:
        return _scrape(target, timeout_s), None
    except (OSError, ValueError) as exc:
        return "", str(getattr(exc, "reason", exc))
