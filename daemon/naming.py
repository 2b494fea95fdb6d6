"""Source names to canonical names: metric tables per exporter and the entity of each series.

The tables are data (``daemon/names/*.csv``, documented in docs/names.md): one row per source metric
with its canonical metric, type, an entity template filled from the series' labels, and an optional
transform (``mask:0x60`` turns a bitmask into 0/1). Node ids follow ARCHITECTURE §3: the host name
the telemetry gives (``Hostname``, else the ``instance`` host), addresses only through the topology's
alias table; an unmapped address is reported, never invented into a node.
"""

from __future__ import annotations

import csv
import re
import string
import threading
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from daemon.rejects import RejectLog
from daemon.topology import Topology, normalize_pci

TABLES = ("dcgm_exporter.csv", "node_exporter.csv", "infiniband_exporter.csv")


@dataclass(frozen=True)
class NameRule:
    """How one source metric maps to a canonical metric and an entity."""

    source: str
    canonical: str
    type: str
    template: str
    fields: tuple[str, ...]
    mask: int | None = None


def load_rules(tables: tuple[str, ...] = TABLES) -> dict[str, NameRule]:
    """Load the packaged name tables into a dict keyed by source metric name."""
    rules: dict[str, NameRule] = {}
    for table in tables:
        text = resources.files("daemon.names").joinpath(table).read_text()
        for row in csv.DictReader(text.splitlines()):
            template = row["entity"]
            fields = tuple(f for _, f, _, _ in string.Formatter().parse(template) if f)
            transform = (row.get("transform") or "").strip()
            mask = int(transform.split(":", 1)[1], 0) if transform.startswith("mask:") else None
            rules[row["source_metric"]] = NameRule(
                row["source_metric"], row["canonical"], row["type"], template, fields, mask
            )
    return rules


_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE_RE = re.compile(r"\\[\\\"n]")


def parse_labels(text: str) -> dict[str, str]:
    """Parse the inside of ``{...}`` with Prometheus escaping (``\\\\``, ``\\"``, ``\\n``).

    Raises ValueError on anything malformed.
    """
    labels: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL_RE.match(text, pos)
        if not m:
            raise ValueError(f"malformed label set at character {pos}")
        value = m.group(2)
        if "\\" in value:
            value = _ESCAPE_RE.sub(lambda e: _ESCAPES[e.group(0)], value)
        labels[m.group(1)] = value
        pos = m.end()
        if m.group(3) == "" and pos < len(text):
            raise ValueError("trailing characters after label set")
    return labels


def split_series(key: str) -> tuple[str, dict[str, str]]:
    """Split ``name{labels}`` into the metric name and its labels."""
    brace = key.find("{")
    if brace == -1:
        return key, {}
    if not key.endswith("}"):
        raise ValueError("label set not closed")
    name = key[:brace]
    labels = parse_labels(key[brace + 1 : -1])
    if "__name__" in labels and not name:
        name = labels.pop("__name__")
    return name, labels


def host_of_instance(instance: str) -> str:
    """``host:port`` (or ``[v6]:port``) to the host part."""
    if instance.startswith("["):
        return instance[1 : instance.find("]")] if "]" in instance else instance
    if instance.count(":") == 1:
        return instance.split(":", 1)[0]
    return instance


def _intern(name: str, codes: dict[str, int], names: list[str]) -> int:
    code = codes.get(name)
    if code is None:
        code = codes[name] = len(names)
        names.append(name)
    return code


@dataclass
class SeriesMapper:
    """Maps series (metric name + labels) to interned (entity, canonical metric) codes.

    It also learns, from dcgm-exporter's ``pci_bus_id`` label, which accelerator sits at which
    PCI address on which node, for the kernel-log readers.
    """

    topology: Topology = field(default_factory=Topology)
    rejects: RejectLog = field(default_factory=RejectLog)
    rules: dict[str, NameRule] = field(default_factory=load_rules)
    entities: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    pci_accelerator: dict[tuple[str, str], str] = field(default_factory=dict)
    unmapped_metrics: Counter = field(default_factory=Counter)
    unmapped_hosts: Counter = field(default_factory=Counter)
    unlinked_switchports: Counter = field(default_factory=Counter)
    _linked: set[str] | None = None
    _entity_code: dict[str, int] = field(default_factory=dict)
    _metric_code: dict[str, int] = field(default_factory=dict)
    # series id -> (entity code, metric code, mask or -1)
    _series: list[tuple[int, int, int]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def _linked_switchports(self) -> set[str]:
        linked = self._linked
        if linked is None:
            linked = self._linked = set(self.topology.port_switchport.values())
        return linked

    def entity_code(self, entity: str) -> int:
        """Interned code of an entity id (codes only grow, so earlier frames stay valid)."""
        return _intern(entity, self._entity_code, self.entities)

    def metric_code(self, metric: str) -> int:
        """Interned code of a canonical metric name."""
        return _intern(metric, self._metric_code, self.metrics)

    def node_for(self, labels: dict[str, str]) -> str | None:
        """The node id named by a series' labels, or None (counted) when it cannot be told."""
        host = labels.get("Hostname") or labels.get("hostname")
        if not host and labels.get("instance"):
            host = host_of_instance(labels["instance"])
        if not host:
            return None
        node = self.topology.resolve_host(host)
        if node is None:
            self.unmapped_hosts[host] += 1
        return node

    def series_id(self, name: str, labels: dict[str, str], position: str, fmt: str) -> int:
        """Intern a series; returns its id, or -1 when it is skipped (unknown metric, no node)."""
        rule = self.rules.get(name)
        if rule is None:
            self.unmapped_metrics[name] += 1
            return -1
        values: dict[str, str] = {}
        if "node" in rule.fields:  # switch-side series name a switch, not a node
            node = self.node_for(labels)
            if node is None:
                host = labels.get("Hostname") or labels.get("instance") or ""
                why = f"address {host!r} has no alias in the topology" if host else "series names no host"
                self.rejects.reject(fmt, position, f"cannot name the node: {why}")
                return -1
            values["node"] = node
        for f in rule.fields:
            if f == "node":
                continue
            if f not in labels:
                self.rejects.reject(fmt, position, f"{name} lacks the '{f}' label")
                return -1
            values[f] = labels[f]
        entity = rule.template.format(**values)
        if "node" not in values and entity not in self._linked_switchports():
            self.unlinked_switchports[entity] += 1  # no node port at its other end: not a link we judge
            return -1
        if "pci_bus_id" in labels and "gpu" in rule.fields and "node" in values:
            pci = normalize_pci(labels["pci_bus_id"])
            if pci:
                self.pci_accelerator[(values["node"], pci)] = entity
        return self._add_series(entity, rule.canonical, -1 if rule.mask is None else rule.mask)

    def canonical_series(self, entity: str, metric: str) -> int:
        """Intern a series already named canonically (a collector that reads the hardware itself, e.g. sysfs)."""
        return self._add_series(entity, metric, -1)

    def _add_series(self, entity: str, metric: str, mask: int) -> int:
        """Append one series and return its id. Live collectors name new series from many threads at once
        (concurrent scrapes, collectors side by side): interning and the id are taken under one lock, or a
        sample could be filed under another thread's series."""
        with self._lock:
            self._series.append((self.entity_code(entity), self.metric_code(metric), mask))
            return len(self._series) - 1

    def series_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arrays (entity code, metric code, mask) indexed by series id."""
        if not self._series:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        table = np.asarray(self._series, dtype=np.int64)
        return table[:, 0], table[:, 1], table[:, 2]

    def accelerator_at(self, node: str, pci: str) -> str | None:
        """The accelerator at a PCI address on a node, from telemetry labels or the topology."""
        key = (node, pci)
        return self.pci_accelerator.get(key) or self.topology.pci_accelerator.get(key)
