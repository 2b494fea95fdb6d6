"""Source names to canonical names: metric tables per exporter and the entity of each series.

The tables are data (``daemon/ingest/names/*.csv``, documented in docs/names.md): one row per source metric
with its canonical metric, type, an entity template filled from the series' labels, an optional label
match (``clock_type=GPU_CLOCK_TYPE_SYSTEM``: one source metric carries several canonical ones, told apart
by a label) and an optional value transform (:class:`Transform`). Node ids follow docs/architecture.md §3: the
host name the telemetry gives (``Hostname``/``hostname``, else the ``instance`` host), addresses only
through the topology's alias table; an unmapped address is reported, never invented into a node.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import string
import threading
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from daemon import metrics
from daemon.ingest.rejects import RejectLog
from daemon.topology import Topology, normalize_pci
from detectors.schema import entity_kind

# Each table with the prefix its exporter lets operators change or drop: AMD's device-metrics-exporter
# names its fields bare (``gpu_clock``) and adds ``CommonConfig.MetricsFieldPrefix`` (``amd_`` in its
# packaged config), so both spellings are read.
TABLES: tuple[tuple[str, str], ...] = (
    ("dcgm_exporter.csv", ""), ("dcgm_exporter_1x.csv", ""), ("node_exporter.csv", ""), ("infiniband_exporter.csv", ""),
    ("amd_device_metrics_exporter.csv", "amd_"), ("npu_exporter.csv", ""), ("nvidia_gpu_exporter.csv", ""),
    ("ipmi_exporter.csv", ""),
)
# DCGM's blank values (dcgm_structs.h): DCGM_FP64_BLANK is 2^47 and DCGM_INT64_BLANK 0x7ffffffffffffff0, each with
# NOT_FOUND, NOT_SUPPORTED and NOT_PERMISSIONED just above; dcgm-exporter prints them as values
# (``DCGM_FI_DEV_MEMORY_TEMP{...} 9223372036854775794`` on a GPU whose memory has no sensor). A gauge at or above
# 2^47 (no reading of a GPU comes near) or a counter at or above the int64 blank is no reading.
BLANKS: dict[str, dict[str, float]] = {table: {"gauge": 2.0**47, "counter": 9.2e18}
                                       for table in ("dcgm_exporter.csv", "dcgm_exporter_1x.csv")}
# Tables whose exporter writes NaN for a reading it does not have: ipmi_exporter exports every sensor's state and
# value "even if the value is NaN" (its docs/metrics.md), NaN the state of a sensor FreeIPMI reads as N/A (a
# discrete sensor without a severity, a reading the BMC did not take). Such a NaN is no bad input: it is counted as
# not read (the replay summary, raswarden_samples_not_read_total), not rejected line by line.
NAN_MEANS_NA = frozenset({"ipmi_exporter.csv"})
# Labels that name an accelerator's model (dcgm-exporter, AMD device-metrics-exporter, Ascend npu-exporter):
# peer groups never mix models.
MODEL_LABELS = ("modelName", "card_model", "model_name")
# Labels that name the accelerator itself, not its slot (dcgm-exporter, AMD device-metrics-exporter,
# npu-exporter; dcgm-exporter's --use-old-namespace writes ``uuid``): a new value in a slot is a replaced part
# (daemon/judgement/pipeline.py).
IDENTITY_LABELS = ("UUID", "serial_number", "vdie_id", "uuid")
# Labels that give an accelerator's PCI address (dcgm-exporter, npu-exporter), for kernel lines that name it.
PCI_LABELS = ("pci_bus_id", "pcie_bus_info")
# Labels a Prometheus relabeling puts the node's name in (``__meta_kubernetes_pod_node_name`` to ``node``, as
# Deckhouse's and others' PodMonitors for dcgm-exporter do; ``kubernetes_node`` in Prometheus' own example config).
NODE_LABELS = ("node", "kubernetes_node")
# A DaemonSet pod's name: its set's name and five of Kubernetes' random characters (apimachinery rand.String's
# alphabet). dcgm-exporter in Kubernetes without NODE_NAME (before its PR 129, or a chart that does not set it) and
# without host networking reports its pod's name as ``Hostname`` (``nvidia-dcgm-exporter-cwbcm``, NVIDIA/dcgm-exporter
# PR 129; ``dcgm-exporter-6ldbb``, issue 188): no host, and a new "node" at every restart of the pod.
EXPORTER_POD = re.compile(r"[a-z0-9-]*(dcgm|gpu|nvidia|device-metrics|npu)[a-z0-9-]*-exporter-"
                          r"[bcdfghjklmnpqrstvwxz2456789]{5}")


def host_label(labels: dict[str, str]) -> str | None:
    """The host an exporter names itself (``Hostname``, ``hostname``), unless it is its Kubernetes pod's name (then a
    ``hostname`` a relabeling set beside it, as NVIDIA/dcgm-exporter issue 529's ServiceMonitor does, names it)."""
    return next((h for h in (labels.get("Hostname"), labels.get("hostname")) if h and not EXPORTER_POD.fullmatch(h)),
                None)


@dataclass(frozen=True)
class InfoJoin:
    """An exporter whose series name an accelerator by an identity label only (``uuid``), its slot given once, on an
    info series: the labels the info series gives, joined to every series carrying the same key on the same node.

    ``labels`` maps the info series' label names to the names the tables and :data:`MODEL_LABELS`,
    :data:`IDENTITY_LABELS` and :data:`PCI_LABELS` read."""

    info_metric: str
    key: str
    labels: tuple[tuple[str, str], ...]


# utkuozdemir/nvidia_gpu_exporter: every nvidia_smi_* series carries only ``uuid``; ``nvidia_smi_gpu_info`` carries
# the uuid with the GPU's index, PCI address and product name (docs/METRICS.md: "MIG series join with all per-GPU
# series" on uuid). Its scrape lists the families alphabetically, so clocks and ECC come before the info line.
JOINS: tuple[InfoJoin, ...] = (
    InfoJoin("nvidia_smi_gpu_info", "uuid", (("index", "index"), ("pci_bus_id", "pci_bus_id"), ("name", "modelName"),
                                             ("uuid", "UUID"))),
)
_INFO = {j.info_metric: j for j in JOINS}
NOT_JOINED = "the GPU's info series (nvidia_smi_gpu_info) not read before these samples were"


@dataclass(frozen=True)
class Transform:
    """A value transform from a name table's ``transform`` column.

    ``mask:0x60`` turns a bitmask into 0/1 (any of the bits set); ``scale:0.001`` multiplies (µJ to mJ);
    ``map:1=4,0=1`` looks values up and makes any other value NaN (a vendor's failure value, such as
    npu-exporter's -1 for a read that failed); ``invalid:4294967295`` makes the listed failure values NaN and
    keeps the rest; ``nonzero`` turns a share or count into 0/1; ``range:-40,150`` makes a value outside the
    range NaN (a GPU cannot read 345 °C: dcgm-exporter 3.3.5 was seen to report such values, NVIDIA/dcgm-exporter
    issue 312); ``ber`` decodes NVML's packed bit error rate (``NVML_NVLINK_ERROR_COUNTER_BER_GET``: the mantissa in
    bits 8-11, the exponent in bits 0-7, the rate the mantissa times ten to the minus exponent; NVLink 5's effective
    and symbol BER, DCGM fields 1215 and 1217). ``blank`` (set from :data:`BLANKS`, not written in a table) makes an
    exporter's blank value NaN before the transform proper; ``na`` (set from :data:`NAN_MEANS_NA`) says a NaN is the
    exporter's "no reading", which the readers pass on to be counted as not read instead of rejecting it.
    """

    text: str
    kind: str
    mask: int = 0
    factor: float = 1.0
    keys: tuple[float, ...] = ()
    values: tuple[float, ...] = ()
    blank: float = math.inf
    na: bool = False

    def with_na(self) -> Transform:
        """This transform, taking NaN as the exporter's "no reading" (:data:`NAN_MEANS_NA`)."""
        return dataclasses.replace(self, text=f"{self.text}|na", na=True)

    def with_blank(self, blank: float) -> Transform:
        """This transform, with values at or above ``blank`` dropped first."""
        return dataclasses.replace(self, text=f"{self.text}|blank>={blank:g}", blank=blank)

    @property
    def why(self) -> str:
        """What a value this transform drops was, for the replay summary."""
        if self.kind == "range":
            return f"outside {self.keys[0]:g}..{self.keys[1]:g}"
        if self.kind in ("map", "invalid"):
            return "the exporter's failure value"
        if self.kind == "ber":
            return "not a packed bit error rate (NVML's BER)"
        return "not a reading"

    @classmethod
    def parse(cls, text: str) -> Transform | None:
        """The transform a table cell names (None for an empty cell); ValueError when it is malformed."""
        text = text.strip()
        if not text:
            return None
        kind, _, arg = text.partition(":")
        if kind == "mask":
            return cls(text, kind, mask=int(arg, 0))
        if kind == "scale":
            return cls(text, kind, factor=float(arg))
        if kind == "map":
            pairs = [p.split("=", 1) for p in arg.split(",")]
            if not pairs or any(len(p) != 2 for p in pairs):
                raise ValueError(f"transform {text!r}: map wants key=value pairs")
            return cls(text, kind, keys=tuple(float(k) for k, _ in pairs), values=tuple(float(v) for _, v in pairs))
        if kind == "invalid":
            return cls(text, kind, keys=tuple(float(k) for k in arg.split(",")))
        if kind == "nonzero" and not arg:
            return cls(text, kind)
        if kind == "range":
            lo, _, hi = arg.partition(",")
            return cls(text, kind, keys=(float(lo), float(hi)))
        if kind in ("none", "ber") and not arg:  # none: only a blank (see with_blank)
            return cls(text, kind)
        raise ValueError(f"unknown transform {text!r}")

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The transformed values (a new array; NaN where a ``map`` has no entry)."""
        x = np.asarray(x, dtype=np.float64)
        if self.blank < math.inf:
            x = np.where(x >= self.blank, np.nan, x)
        if self.kind == "none":
            return x
        if self.kind == "range":
            return np.where((x >= self.keys[0]) & (x <= self.keys[1]), x, np.nan)
        if self.kind == "mask":
            ok = np.isfinite(x)
            out = np.full(len(x), np.nan)
            out[ok] = ((x[ok].astype(np.int64) & self.mask) != 0).astype(np.float64)
            return out
        if self.kind == "scale":
            return x * self.factor
        if self.kind == "nonzero":
            return np.where(np.isfinite(x), (x != 0).astype(np.float64), np.nan)
        if self.kind == "ber":
            ok = np.isfinite(x) & (x >= 0) & (x == np.floor(x)) & (x < 2**63)
            packed = np.where(ok, x, 0).astype(np.int64)
            decoded = ((packed >> 8) & 0xF) * np.power(10.0, -(packed & 0xFF).astype(np.float64))
            return np.where(ok, decoded, np.nan)
        if self.kind == "invalid":
            return np.where(np.isin(x, self.keys), np.nan, x)
        keys, values = np.asarray(self.keys), np.asarray(self.values)
        hit = x[:, None] == keys[None, :]
        return np.where(hit.any(axis=1), values[hit.argmax(axis=1)], np.nan)


@dataclass(frozen=True)
class NameRule:
    """How one source metric (with the labels in ``match``) maps to a canonical metric and an entity."""

    source: str
    canonical: str
    type: str
    template: str
    fields: tuple[str, ...]
    match: tuple[tuple[str, str], ...] = ()
    transform: Transform | None = None

    @property
    def mask(self) -> int | None:
        """The bitmask of a ``mask:`` transform (None otherwise)."""
        return self.transform.mask if self.transform is not None and self.transform.kind == "mask" else None

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match)


def _match(cell: str) -> tuple[tuple[str, str], ...]:
    pairs = [p.split("=", 1) for p in cell.split(";") if p.strip()]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"match {cell!r}: want label=value pairs separated by ';'")
    return tuple((k.strip(), v.strip()) for k, v in pairs)


def load_rules(tables: tuple[tuple[str, str], ...] = TABLES) -> dict[str, tuple[NameRule, ...]]:
    """Load the packaged name tables: source metric name -> its rules, in table order.

    A table's prefix (see :data:`TABLES`) makes each of its names readable without it too.
    """
    rules: dict[str, list[NameRule]] = {}
    for table, prefix in tables:
        text = resources.files("daemon.ingest.names").joinpath(table).read_text()
        blanks = BLANKS.get(table, {})
        for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
            template = row["entity"]
            fields = tuple(f for _, f, _, _ in string.Formatter().parse(template) if f)
            transform = Transform.parse(row.get("transform") or "")
            blank = blanks.get(row["type"])
            if blank is not None:
                transform = (transform or Transform.parse("none")).with_blank(blank)
            if table in NAN_MEANS_NA:
                transform = (transform or Transform.parse("none")).with_na()
            rule = NameRule(row["source_metric"], row["canonical"], row["type"], template, fields,
                            _match(row.get("match") or ""), transform)
            names = [rule.source]
            if prefix and rule.source.startswith(prefix):
                names.append(rule.source[len(prefix):])
            for name in names:
                rules.setdefault(name, []).append(rule)
    return {name: tuple(rs) for name, rs in rules.items()}


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
    rules: dict[str, tuple[NameRule, ...]] = field(default_factory=load_rules)
    entities: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    pci_accelerator: dict[tuple[str, str], str] = field(default_factory=dict)
    accelerator_model: dict[str, str] = field(default_factory=dict)  # entity -> model, from MODEL_LABELS
    # (entity, identity, first sample time) of each identity a series brought, for the pipeline to compare with
    # the store; series of a new identity wait in _identity_series until a frame dates them
    identities_seen: list[tuple[str, str, float]] = field(default_factory=list)
    _identity: dict[str, str] = field(default_factory=dict)
    _identity_series: dict[int, tuple[str, str]] = field(default_factory=dict)
    transforms: list[Transform] = field(default_factory=list)
    unmapped_metrics: Counter = field(default_factory=Counter)
    unmapped_hosts: Counter = field(default_factory=Counter)
    unlinked_switchports: Counter = field(default_factory=Counter)
    #: netdevs whose series were passed over: the topology lists its node's fabric ports by netdev, and not them
    not_fabric_netdevs: Counter = field(default_factory=Counter)
    values_not_read: Counter = field(default_factory=Counter)  # values a transform dropped, by why
    _linked: set[str] | None = None
    _entity_code: dict[str, int] = field(default_factory=dict)
    _metric_code: dict[str, int] = field(default_factory=dict)
    # series id -> (entity code, metric code, index into transforms or -1)
    _series: list[tuple[int, int, int]] = field(default_factory=list)
    _transform_index: dict[str, int] = field(default_factory=dict)
    # (node, key value) -> the labels an info series gave (InfoJoin); series waiting for one: their ids, by the same
    _joined: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    _waiting: dict[tuple[str, str], list[tuple[int, NameRule, dict[str, str], str, str]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        for entity, model in self.topology.accelerator_model.items():  # the telemetry's own labels win later
            self.accelerator_model.setdefault(entity, model)

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
        """The node id named by a series' labels, or None (counted) when it cannot be told.

        The candidates, in order: the exporter's own host label (not a pod's name, :data:`EXPORTER_POD`), a node
        label a relabeling set (:data:`NODE_LABELS`), the host of ``exported_instance`` (the series' own ``instance``,
        renamed by a Prometheus scraping a Pushgateway or a federation without ``honor_labels``), of ``instance``.
        The first the topology knows as a node (or alias of one) wins; when it knows none of them, the first that
        names a host at all (an address needs an alias)."""
        candidates = [h for h in (host_label(labels), *(labels.get(k) for k in NODE_LABELS),
                                  *(host_of_instance(labels[k]) for k in ("exported_instance", "instance")
                                    if labels.get(k))) if h]
        if not candidates:
            return None
        resolved = [self.topology.resolve_host(h) for h in candidates]
        node = next((n for n in resolved if n is not None and n in self.topology.node_rack), None) \
            or next((n for n in resolved if n is not None), None)
        if node is None:
            self.unmapped_hosts[candidates[0]] += 1
        return node

    def series_id(self, name: str, labels: dict[str, str], position: str, fmt: str) -> int:
        """Intern a series; returns its id, or -1 when it is skipped (unknown metric, no node, an info series).

        A series that names its accelerator by a join key only (:data:`JOINS`) whose info series has not been read
        yet gets an id whose entity is -1 in :meth:`series_table` until it has; samples framed before are dropped
        and counted (:data:`NOT_JOINED`)."""
        join = _INFO.get(name)
        if join is not None:
            self._learn_info(join, labels, position, fmt)
            return -1
        candidates = self.rules.get(name)
        rule = next((r for r in candidates if r.matches(labels)), None) if candidates else None
        if rule is None:
            self.unmapped_metrics[name] += 1
            return -1
        join = next((j for j in JOINS if j.key in labels and any(f not in labels for f in rule.fields if f != "node")),
                    None)
        if join is not None:
            node = self.node_for(labels)
            joined = self._joined.get((node, labels[join.key])) if node is not None else None
            if joined is not None:
                labels = {**joined, **labels}
            elif node is not None:
                canonical = self._canonical(rule, labels, position, fmt)
                if canonical is None:
                    return -1
                sid = self._add_series(None, canonical, self._transform_code(rule.transform))
                with self._lock:
                    self._waiting.setdefault((node, labels[join.key]), []).append((sid, rule, labels, position, fmt))
                return sid
        return self._name_series(rule, name, labels, position, fmt)

    def _learn_info(self, join: InfoJoin, labels: dict[str, str], position: str, fmt: str) -> None:
        """Remember what an info series says of the accelerator its key names, and name the series waiting for it."""
        node = self.node_for(labels)
        key = labels.get(join.key)
        if node is None or not key:
            self.rejects.reject(fmt, position, f"{join.info_metric} names no node or no {join.key}")
            return
        joined = {to: labels[frm] for frm, to in join.labels if labels.get(frm)}
        with self._lock:
            self._joined[(node, key)] = joined
            waiting = self._waiting.pop((node, key), [])
        for sid, rule, series_labels, series_position, series_fmt in waiting:
            self._name_series(rule, rule.source, {**joined, **series_labels}, series_position, series_fmt, sid)

    def _name_series(self, rule: NameRule, name: str, labels: dict[str, str], position: str, fmt: str,
                     sid: int | None = None) -> int:
        """Name a series by its rule: its id (``sid`` when it waited for a join), or -1 when it cannot be named."""
        values: dict[str, str] = {}
        if "node" in rule.fields:  # switch-side series name a switch, not a node
            node = self.node_for(labels)
            if node is None:
                host = host_label(labels) or labels.get("instance") or ""
                why = f"address {host!r} has no alias in the topology" if host else (
                    "series names no host (a label such as 'instance' or 'Hostname'; a scrape saved without timestamps "
                    "takes its host from its file's name, '<host>.prom')")
                pod = labels.get("Hostname") or labels.get("hostname") or ""
                if pod and not host_label(labels):
                    why += (f" (its Hostname {pod!r} is the exporter's Kubernetes pod: set the exporter's NODE_NAME, "
                            "or relabel the pod's node name into 'node' or 'instance')")
                self.rejects.reject(fmt, position, f"cannot name the node: {why}")
                return -1
            values["node"] = node
        for f in rule.fields:
            if f == "node":
                continue
            if f == "netdev_port":
                if not labels.get("device"):
                    self.rejects.reject(fmt, position, f"{name} lacks the 'device' label")
                    return -1
                port = self._port_of_netdev(values["node"], labels["device"])
                if port is None:
                    self.not_fabric_netdevs[(values["node"], labels["device"])] += 1
                    return -1
                values[f] = port
                continue
            if f not in labels:
                self.rejects.reject(fmt, position, f"{name} lacks the '{f}' label")
                return -1
            values[f] = "_".join(labels[f].split()) or labels[f]  # (an id has no spaces: a BMC's "Inlet Temp")
        entity = rule.template.format(**values)
        if "node" not in values and entity not in self._linked_switchports():
            self.unlinked_switchports[entity] += 1  # no node port at its other end: not a link we judge
            return -1
        identity = None
        if "node" in values and entity_kind(entity) == "accelerator":
            identity = self._learn_accelerator(values["node"], entity, labels)
        if sid is None:
            canonical = self._canonical(rule, labels, position, fmt)
            if canonical is None:
                return -1
            sid = self._add_series(entity, canonical, self._transform_code(rule.transform))
        else:
            with self._lock:
                self._series[sid] = (self.entity_code(entity), *self._series[sid][1:])
        if identity is not None:
            with self._lock:
                self._identity_series[sid] = (entity, identity)
        return sid

    def _learn_accelerator(self, node: str, entity: str, labels: dict[str, str]) -> str | None:
        """Remember an accelerator's PCI address (for kernel lines) and model (for peer groups) from its labels;
        its identity (UUID, serial) when this is the first series naming it (else None)."""
        pci_text = next((labels[k] for k in PCI_LABELS if labels.get(k)), None)
        pci = normalize_pci(pci_text) if pci_text else None
        if pci:
            self.pci_accelerator[(node, pci)] = entity
        model = next((labels[k] for k in MODEL_LABELS if labels.get(k)), None)
        if model and self.accelerator_model.get(entity) != model:
            self.accelerator_model[entity] = model
        identity = next((labels[k] for k in IDENTITY_LABELS if labels.get(k)), None)
        if identity and self._identity.get(entity) != identity:
            self._identity[entity] = identity
            return identity
        return None

    def stamp_identities(self, sid: np.ndarray, ts: np.ndarray) -> None:
        """Date each new identity by the first sample of its series (a reader's frame of series ids and times):
        a recorded trace is mapped ahead of its ticks, and a part is replaced when its data says so."""
        if not self._identity_series:
            return
        present = set(np.unique(sid).tolist())
        with self._lock:
            for k in [k for k in self._identity_series if k in present]:
                entity, identity = self._identity_series.pop(k)
                self.identities_seen.append((entity, identity, float(ts[sid == k].min())))

    def take_identities(self, now: float) -> list[tuple[str, str, float]]:
        """The (accelerator, identity, first sample time) dated up to ``now``, in time order; later ones wait."""
        with self._lock:
            ripe = sorted((x for x in self.identities_seen if x[2] <= now), key=lambda x: x[2])
            self.identities_seen = [x for x in self.identities_seen if x[2] > now]
        return ripe

    def _transform_code(self, transform: Transform | None) -> int:
        if transform is None:
            return -1
        with self._lock:
            code = self._transform_index.get(transform.text)
            if code is None:
                code = self._transform_index[transform.text] = len(self.transforms)
                self.transforms.append(transform)
            return code

    def transform_values(self, transform_of: np.ndarray, value: np.ndarray, source: str) -> np.ndarray:
        """Values with each series' transform applied (``transform_of``: the transform index per value).

        A value a ``map`` transform does not list (the exporter's failure value) becomes NaN and is counted;
        callers drop NaN values.
        """
        if not len(value) or not (transform_of >= 0).any():
            return value
        value = np.array(value, dtype=np.float64)
        for code in np.unique(transform_of[transform_of >= 0]):
            sel = transform_of == code
            transform = self.transforms[int(code)]
            part = value[sel]
            if transform.na:
                na = int(np.isnan(part).sum())
                if na:
                    self.values_not_read["the exporter's N/A (no reading)"] += na
            blanks = int((part >= transform.blank).sum())
            if blanks:
                self.values_not_read["the exporter's blank (field not supported or not read yet)"] += blanks
            nan_before = int(np.isnan(part).sum()) + blanks
            part = transform.apply(part)
            dropped = int(np.isnan(part).sum()) - nan_before
            if dropped > 0:
                self.values_not_read[transform.why] += dropped
            value[sel] = part
        unread = int(np.isnan(value).sum())
        if unread:
            metrics.SAMPLES_NOT_READ.labels(source).inc(unread)
        return value

    def canonical_series(self, entity: str, metric: str) -> int:
        """Intern a series already named canonically (a collector that reads the hardware itself, e.g. sysfs)."""
        return self._add_series(entity, metric, -1)

    def _add_series(self, entity: str | None, metric: str, transform: int) -> int:
        """Append one series and return its id (``entity`` None: not known yet, -1 in the table). Live collectors
        name new series from many threads at once (concurrent scrapes, collectors side by side): interning and the
        id are taken under one lock, or a sample could be filed under another thread's series."""
        with self._lock:
            code = -1 if entity is None else self.entity_code(entity)
            self._series.append((code, self.metric_code(metric), transform))
            return len(self._series) - 1

    def series_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arrays (entity code, metric code, transform index or -1) indexed by series id."""
        if not self._series:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        table = np.asarray(self._series, dtype=np.int64)
        return table[:, 0], table[:, 1], table[:, 2]

    def _canonical(self, rule: NameRule, labels: dict[str, str], position: str, fmt: str) -> str | None:
        """The rule's canonical metric; one that names a label (``xid_count_{xid}``: a count per Xid code) takes the
        series' value of it, a whole number (None, rejected, when the series lacks it)."""
        if "{" not in rule.canonical:
            return rule.canonical
        values = {}
        for f in (f for _, f, _, _ in string.Formatter().parse(rule.canonical) if f):
            text = labels.get(f, "")
            if not text.isdigit():
                self.rejects.reject(fmt, position, f"{rule.source}: its '{f}' label is no code: {text!r}")
                return None
            values[f] = str(int(text))
        return rule.canonical.format(**values)

    def _port_of_netdev(self, node: str, netdev: str) -> str | None:
        """The fabric port (its part after the node) a netdev's series name (node_exporter's ethtool collector): the
        topology's port with that netdev; where the topology lists none of the node's ports by netdev, ``<netdev>:1``
        (an Ethernet RDMA netdev is one port). None for a netdev the topology does not list among ports it lists by
        netdev: a management or storage NIC, as a kernel line on it is (docs/rules.md)."""
        port = self.topology.netdev_port.get((node, netdev))
        if port is not None:
            return port.split("/", 1)[1]
        return None if node in self.topology.netdev_nodes else f"{netdev}:1"

    def accelerator_at(self, node: str, pci: str) -> str | None:
        """The accelerator at a PCI address on a node, from telemetry labels or the topology."""
        key = (node, pci)
        return self.pci_accelerator.get(key) or self.topology.pci_accelerator.get(key)


def reads_nan(mapper: SeriesMapper, sid: np.ndarray) -> np.ndarray:
    """Per series id (-1: none), whether a NaN value of it is its exporter's "no reading" (:data:`NAN_MEANS_NA`), to
    be passed on and counted as not read (:meth:`SeriesMapper.transform_values`), not rejected as bad input."""
    sid = np.asarray(sid, dtype=np.int64)
    na_codes = {i for i, t in enumerate(mapper.transforms) if t.na}
    if not na_codes or not len(sid):
        return np.zeros(len(sid), dtype=bool)
    series = mapper._series  # (each id looked up alone: no copy of the whole table for a NaN or two)
    return np.fromiter((0 <= s < len(series) and series[s][2] in na_codes for s in sid.tolist()), dtype=bool,
                       count=len(sid))
