"""Incidents: what operators and playbooks act on (docs/architecture.md §4).

An incident opens when an entity enters ``subhealthy`` or ``failed``; its fingerprint is entity +
category, so a second transition of the same kind updates it instead of opening another. It
carries the evidence and closes when the entity recovers (or an operator closes it). Nodes get an
incident of their own when their own evidence is bad, when two or more of their accelerators are
bad (escalation), or when no fabric port is left healthy; a node whose telemetry has been gone for
``telemetry_after_s`` gets a ``telemetry`` incident, never a hardware one.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass, field

from detectors.schema import State, entity_kind

log = logging.getLogger(__name__)


@dataclass
class Incident:
    """One open or closed incident."""

    id: str
    fingerprint: str
    entity: str
    kind: str
    category: str
    severity: State
    opened_at: float
    updated_at: float
    rack: str | None = None
    evidence: list[str] = field(default_factory=list)
    closed_at: float | None = None
    close_reason: str = ""
    parent: str | None = None  # the rack/cooling incident this one is grouped under
    failed_at: float | None = None  # when it first became failed

    def mark_failed(self, ts: float) -> None:
        """Note the first time the incident's severity is ``failed`` (a hard failure, as daemon/operations/foresight.py
        counts
        them)."""
        if self.failed_at is None and self.severity == State.FAILED:
            self.failed_at = ts

    @property
    def open(self) -> bool:
        return self.closed_at is None

    @classmethod
    def from_row(cls, row) -> Incident:
        """The incident as the store holds it (an ``IncidentRow``)."""
        return cls(row.id, row.fingerprint, row.entity, row.kind, row.category, State.parse(row.severity),
                   row.opened_at, row.updated_at, row.rack, list(row.evidence or []), row.closed_at,
                   row.close_reason, row.parent, getattr(row, "failed_at", None))


def incident_id(fingerprint: str, opened_at: float) -> str:
    """Stable id: the same trace gives the same ids on every replay."""
    digest = hashlib.sha1(f"{fingerprint}@{opened_at:.3f}".encode()).hexdigest()[:10]
    return f"inc-{digest}"


#: incident kinds on no node (a rack, a cooling loop, a supernode, a shard nobody watches): nothing to drain, no
#: jobs or parts to name
NOT_A_NODE = frozenset({"rack", "cooling", "supernode", "shard"})
#: kinds the cluster judges from the store (daemon/judgement/cooling.py, daemon/shards.py), never a shard's incident
#: book
CLUSTER_KINDS = frozenset({"cooling", "shard"})


def new_incident(entity: str, kind: str, category: str, state: State, now: float, rack: str | None = None) -> Incident:
    """A new incident of the cluster's own (a cooling loop's, a split rack's, an unwatched shard's:
    daemon/judgement/cooling.py,
    daemon/judgement/splitracks.py, daemon/shards.py), kept in the store rather than in a shard's book."""
    fingerprint = f"{entity}|{category}"
    return Incident(incident_id(fingerprint, now), fingerprint, entity, kind, category, state, now, now, rack)


@dataclass(frozen=True)
class RackRule:
    """When several nodes' incidents of one category in one rack are a rack problem (a cooling loop, a leaf switch,
    a power feed), not N node problems: at least ``nodes`` distinct nodes, and ``fraction`` of the rack's, with
    incidents opened within ``window_s`` of each other. Independent faults spread over time on a large rack stay
    node incidents. Applied by a shard's book to its racks and by :mod:`daemon.judgement.splitracks` to racks split
    between
    shards, so both judge alike."""

    nodes: int = 3
    fraction: float = 0.1
    window_s: float = 3600.0

    def group(self, members: list, rack_size: int) -> tuple[list, list[str]] | None:
        """The members (with ``entity`` and ``opened_at``; a node's or its parts' incidents) that make a rack
        problem and their nodes, or None when they do not."""
        latest = max(m.opened_at for m in members)
        members = [m for m in members if m.opened_at >= latest - self.window_s]
        nodes = sorted({m.entity.split("/", 1)[0] for m in members})
        if len(nodes) < max(self.nodes, math.ceil(self.fraction * rack_size)):
            return None
        return members, nodes

    @staticmethod
    def reason(rack: str, category: str, nodes: list[str]) -> str:
        return f"{len(nodes)} nodes of {rack} with {category} incidents: {', '.join(nodes[:8])}" + (
            " ..." if len(nodes) > 8 else "")


def groupable(kind: str, category: str, rack: str | None) -> bool:
    """Whether an incident may be a member of a rack incident: a node's or a part's, of hardware, placed in a rack."""
    return kind not in NOT_A_NODE and category != "telemetry" and rack is not None


def cluster_raise(inc: Incident, worst: State, reason: str, now: float, new: bool) -> bool:
    """Raise a cluster incident judged from the store (a cooling loop's, a split rack's; ``new`` when it was not in
    the store) to ``worst`` with ``reason``; False when that changes nothing (nothing to write)."""
    if not new and reason in inc.evidence and worst <= inc.severity:
        return False
    inc.severity = max(inc.severity, worst)
    inc.mark_failed(now)
    if reason not in inc.evidence:
        inc.evidence.append(reason)
    inc.updated_at = now
    return True


def cluster_close(rows, reason: str, now: float) -> list[Incident]:
    """The open cluster incidents in ``rows`` (store rows) closed for ``reason``."""
    out = []
    for row in rows:
        inc = Incident.from_row(row)
        inc.closed_at = inc.updated_at = now
        inc.close_reason = reason
        out.append(inc)
    return out


def cluster_record(store, changed: list[Incident], now: float, what: str) -> list[Incident]:
    """Write a pass's changed cluster incidents (``store.record_tick``) and log each as ``what`` (its entity)."""
    store.record_tick([], changed, now=now)
    for inc in changed:
        log.warning("%s %s: %s (%s)", what, inc.entity, "closed" if inc.closed_at else "incident open",
                    inc.evidence[-1] if inc.evidence else "")
    return changed


class IncidentBook:
    """Opens, updates and closes incidents from health transitions."""

    def __init__(self, rack_of=lambda node: None, telemetry_after_s: float = 900.0, rack_rule: RackRule = RackRule(),
                 rack_size=lambda rack: 0, groups_rack=lambda rack: True):
        self.rack_of = rack_of
        self.telemetry_after_s = telemetry_after_s
        self.rack_rule = rack_rule
        self.rack_size = rack_size
        # Racks this book groups: a shard's own (every rack unsharded). A rack split between shards is grouped for
        # the cluster (daemon/judgement/splitracks.py), whose open rack incidents come in as ``outside_parents``.
        self.groups_rack = groups_rack
        # (rack, category) -> the cluster's open rack incident there: its id and when it opened
        self.outside_parents: dict[tuple[str, str], tuple[str, float]] = {}
        self.open: dict[str, Incident] = {}
        self.closed: list[Incident] = []
        self.changed: list[Incident] = []

    def take_changed(self) -> list[Incident]:
        """The incidents changed since the last call, each once."""
        out, self.changed = list({inc.id: inc for inc in self.changed}.values()), []
        return out

    def _node(self, entity: str) -> str:
        return entity.split("/", 1)[0]

    def raise_(self, ts: float, entity: str, category: str, state: State, reasons: list[str]) -> Incident:
        """Open an incident (or update the open one with the same fingerprint)."""
        fingerprint = f"{entity}|{category}"
        inc = self.open.get(fingerprint)
        if inc is None:
            inc = Incident(
                incident_id(fingerprint, ts), fingerprint, entity, entity_kind(entity), category, state, ts, ts,
                self.rack_of(self._node(entity)), list(reasons),
            )
            self.open[fingerprint] = inc
        else:
            inc.severity = max(inc.severity, state)
            inc.updated_at = ts
            for r in reasons:
                if r not in inc.evidence:
                    inc.evidence.append(r)
        inc.mark_failed(ts)
        self.changed.append(inc)
        return inc

    def resolve(self, ts: float, entity: str, reason: str, category: str | None = None) -> list[Incident]:
        """Close an entity's open incidents (of one category, or all)."""
        done = []
        for fp, inc in list(self.open.items()):
            if inc.entity == entity and (category is None or inc.category == category):
                inc.closed_at = ts
                inc.updated_at = ts
                inc.close_reason = reason
                del self.open[fp]
                self.closed.append(inc)
                self.changed.append(inc)
                done.append(inc)
        return done

    def on_entity(self, ts: float, entity: str, new: State, category: str, reasons: list[str]) -> None:
        """React to a non-node entity's transition."""
        if new in (State.SUBHEALTHY, State.FAILED):
            self.raise_(ts, entity, category or "gpu_compute", new, reasons)
        elif new == State.HEALTHY:
            self.resolve(ts, entity, "recovered")

    def on_node(self, ts: float, node: str, new: State, category: str, reasons: list[str], escalate: bool) -> None:
        """React to a node's roll-up transition; only escalations open a node incident."""
        if new in (State.SUBHEALTHY, State.FAILED) and escalate:
            self.raise_(ts, node, category or "host", new, reasons)
        elif new in (State.HEALTHY, State.SUSPECT):
            self.resolve(ts, node, "recovered")

    def escalate(self, ts: float) -> None:
        """Group several nodes' incidents of one category in one rack under a single rack incident
        (:class:`RackRule`): the rack incident opens and the node incidents point to it (``parent``), so playbooks
        act on the rack, not on each node. The rack incident closes when too few nodes remain. A rack split between
        shards is not grouped here: its members point to the cluster's rack incident, if there is one."""
        groups: dict[tuple[str, str], list[Incident]] = {}
        for inc in self.open.values():
            if groupable(inc.kind, inc.category, inc.rack):
                groups.setdefault((inc.rack, inc.category), []).append(inc)
        grouped = set()
        for (rack, category), members in sorted(groups.items()):
            if not self.groups_rack(rack):
                # the cluster's rack incident groups what opened within the rule's window before it and since
                parent_id, opened_at = self.outside_parents.get((rack, category), (None, 0.0))
                for m in members:
                    want = parent_id if m.opened_at >= opened_at - self.rack_rule.window_s else None
                    if m.parent != want:
                        m.parent = want
                        self.changed.append(m)
                continue
            found = self.rack_rule.group(members, self.rack_size(rack))
            if found is None:
                continue
            members, nodes = found
            fingerprint = f"{rack}|{category}"
            grouped.add(fingerprint)
            worst = max(m.severity for m in members)
            reason = self.rack_rule.reason(rack, category, nodes)
            parent = self.open.get(fingerprint)
            if parent is None or reason not in parent.evidence:
                parent = self.raise_(ts, rack, category, worst, [reason])
                parent.kind, parent.rack = "rack", rack
            for m in members:
                if m.parent != parent.id:
                    m.parent = parent.id
                    self.changed.append(m)
        for fp, inc in list(self.open.items()):
            if inc.kind == "rack" and fp not in grouped:
                self.resolve(ts, inc.entity, "fewer nodes affected", inc.category)

    def on_stale(self, ts: float, node: str, stale_since: float | None, after_s: float | None = None) -> None:
        """Open or close a node's telemetry incident (after ``after_s`` without telemetry, by default
        ``telemetry_after_s``)."""
        fingerprint = f"{node}|telemetry"
        if stale_since is not None and ts - stale_since >= (after_s or self.telemetry_after_s):
            if fingerprint not in self.open:
                self.raise_(ts, node, "telemetry", State.UNKNOWN,
                            [f"no telemetry for {(ts - stale_since) / 60:.0f} min"])
        elif stale_since is None and fingerprint in self.open:
            self.resolve(ts, node, "telemetry back", "telemetry")
