"""Shards by topology (issue 27): the part of the cluster one raswarden watches and acts for.

A cluster too big for one management node is split by its topology: each ``[shards.NAME]`` names the supernodes,
racks or nodes it owns, and ``service.shard`` says which one an instance serves (any management node can run any
shard; the shard's lease says which does, and a standby takes over a shard whose holder stops renewing it; an
instance with ``service.shard = "*"`` is a pool member: it serves the first shard no live instance holds, and hands
it back when the shard's own instance returns and asks for it, daemon/service/service.py). A
shard's collectors keep only its nodes' telemetry, its pipeline restores only its incidents and states, its
playbooks act only on its incidents, each from a cursor of its own. What is the cluster's stays one: the
blast-radius budget (``Store.cluster_lock``), the circuit breaker and the journal (the store's), and the alerts (one
alert pipeline for the whole cluster, run by the instance that holds the lease ``alerts``: grouping, inhibition and
silences as the cluster sees them, nothing told twice), judged with the incidents that span shards: racks split
between shards (daemon/judgement/splitracks.py) and cooling loops (daemon/judgement/cooling.py), each recognised once.

Without ``[shards]`` one shard owns everything, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from daemon.judgement.incidents import Incident, new_incident
from daemon.store import Store
from daemon.store.leases import leases_named, shard_lease
from daemon.topology import Topology
from detectors.schema import State

ALERTS_LEASE = "alerts"  # the cluster's alert pipeline, when the cluster is sharded
POOL = "*"  # service.shard of a pool member: it serves whichever shard has no live holder


@dataclass(frozen=True)
class ShardSpec:
    """``[shards.NAME]``: what one shard owns."""

    name: str
    supernodes: frozenset[str] = frozenset()
    racks: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    #: PromQL label matchers that select this shard's series in the cluster's Prometheus (``supernode=~"sn0[1-4]"``):
    #: a PromQL collector without ``matchers`` of its own asks with these, a pool member too once it holds the shard
    matchers: str = ""


def cycle_phase(shards: dict[str, ShardSpec], shard: str, interval_s: float) -> float | None:
    """Where in each interval a shard's cycle runs (seconds past a multiple of ``interval_s`` on the wall clock): the
    shards, in the order of their names, spread evenly over the interval, so that they take turns at the cluster's
    Prometheus instead of all asking at once (as Prometheus spreads its own scrapes over the interval). None
    without shards, or for a pool member serving none yet: it runs from its start."""
    if shard not in shards:
        return None
    names = sorted(shards)
    return interval_s * names.index(shard) / len(names)


def plan_warnings(shards: dict[str, ShardSpec], topology: Topology) -> list[str]:
    """What in a shard plan the topology shows to be unwise (``check-config`` and the start say them): a node in no
    shard (no instance watches it). A rack or a cooling loop split between shards is fine: its incidents are judged
    for the cluster (daemon/judgement/splitracks.py, daemon/judgement/cooling.py)."""
    if not shards:
        return []
    owned = {n for spec in shards.values() for n in Ownership.of(spec, topology).nodes or ()}
    orphans = sorted(n for n in topology.node_rack if n not in owned)
    if not orphans:
        return []
    return [f"{len(orphans)} node(s) in no shard, watched by no instance: {', '.join(orphans[:5])}"
            + (" ..." if len(orphans) > 5 else "")]


def split_racks(shards: dict[str, ShardSpec], topology: Topology) -> dict[str, list[str]]:
    """Racks no one shard holds whole (shards by node lists), with the shards that hold some of their nodes."""
    holders: dict[str, set[str]] = {}
    whole: set[str] = set()
    for name, spec in shards.items():
        own = Ownership.of(spec, topology)
        whole |= own.racks
        for rack in own.racks | own.split_racks:
            holders.setdefault(rack, set()).add(name)
    return {rack: sorted(names) for rack, names in sorted(holders.items()) if rack not in whole}


@dataclass
class Ownership:
    """The nodes this instance's shard owns (every node when the cluster is not sharded)."""

    shard: str = "default"
    nodes: frozenset[str] | None = None  # None: all
    racks: frozenset[str] = field(default_factory=frozenset)  # racks whose every node is this shard's
    matchers: str = ""  # the shard's PromQL label matchers (ShardSpec.matchers)
    split_racks: frozenset[str] = field(default_factory=frozenset)  # racks with some nodes of this shard, not all

    @classmethod
    def of(cls, spec: ShardSpec | None, topology: Topology) -> Ownership:
        """The nodes ``spec`` names through ``topology`` (None: not sharded)."""
        if spec is None:
            return cls()
        nodes = {n for n, rack in topology.node_rack.items()
                 if rack in spec.racks or topology.rack_supernode.get(rack) in spec.supernodes}
        nodes |= spec.nodes
        touched = {r for n in nodes if (r := topology.node_rack.get(n)) is not None}
        split = frozenset(r for n, r in topology.node_rack.items() if r in touched and n not in nodes)
        return cls(spec.name, frozenset(nodes), frozenset(touched - split), spec.matchers, split)

    @property
    def sharded(self) -> bool:
        return self.nodes is not None

    def hosts(self, topology: Topology) -> frozenset[str] | None:
        """The names the shard's nodes go by in logs (their names and the topology's aliases); None: not sharded."""
        if self.nodes is None:
            return None
        return frozenset(self.nodes) | frozenset(a for a, node in topology.aliases.items() if node in self.nodes)

    def owns(self, node: str) -> bool:
        return self.nodes is None or node in self.nodes

    def owns_entity(self, entity: str) -> bool:
        """An incident's or a state's entity: a node and its parts by the node, a rack when the shard holds all of
        it (a rack split between shards, by node lists, is the cluster's: daemon/judgement/splitracks.py)."""
        return self.nodes is None or entity.split("/", 1)[0] in self.nodes or entity in self.racks

    def keep(self, batch):
        """The part of a batch that is this shard's: samples and events of its nodes (and their parts)."""
        if self.nodes is None:
            return batch
        from daemon.ingest.batch import Batch

        out = Batch()
        if len(batch.samples):
            mine = self._mine(batch.samples["entity"])
            out.samples = batch.samples if mine.all() else batch.samples[mine].reset_index(drop=True)
        if len(batch.events):
            mine = self._mine(batch.events["entity"])
            out.events = batch.events if mine.all() else batch.events[mine].reset_index(drop=True)
        return out

    def _mine(self, entities) -> np.ndarray:
        """Which rows of an entity column are this shard's (a categorical column is judged once per name)."""
        nodes = self.nodes or frozenset()
        if isinstance(entities.dtype, pd.CategoricalDtype):
            names = entities.cat.categories
            own = np.fromiter((str(n).split("/", 1)[0] in nodes for n in names), dtype=bool, count=len(names))
            codes = entities.cat.codes.to_numpy()
            return np.where(codes >= 0, own[np.maximum(codes, 0)], False)
        return np.fromiter((str(e).split("/", 1)[0] in nodes for e in entities), dtype=bool, count=len(entities))


class UnwatchedShards:
    """Shards no live instance holds: their part of the cluster is watched by nobody (a holder died and no standby
    took over, or none was ever started). Judged where the cluster's alerts run, from the shards' leases in the store:
    a shard without a live lease for ``grace_s`` (a standby's time to take it over) gets an incident of kind
    ``shard`` (category ``telemetry``) on ``shard:NAME``, which the alert pipeline tells like any other; it closes once
    an instance holds the shard again. ``unwatched`` is what the last pass found, for /metrics."""

    def __init__(self, shards: dict[str, ShardSpec], topology: Topology, grace_s: float):
        self.nodes = {name: len(Ownership.of(spec, topology).nodes or ()) for name, spec in shards.items()}
        self.grace_s = grace_s
        self.since: dict[str, float] = {}  # shard -> when this instance first found it without a live holder
        self.unwatched: list[str] = []

    def step(self, store: Store, now: float) -> list[Incident]:
        """One pass; returns the incidents opened or closed (written to the store)."""
        if not self.nodes:
            return []
        leases = leases_named(store, [shard_lease(n) for n in self.nodes])
        open_rows = {r.entity: r for r in store.incidents("open", kind="shard")}
        changed = []
        self.unwatched = []
        for name in sorted(self.nodes):
            lease = leases.get(shard_lease(name))
            entity = f"shard:{name}"
            if lease is not None and lease.expires_at > now:
                self.since.pop(name, None)
                row = open_rows.get(entity)
                if row is not None:
                    inc = Incident.from_row(row)
                    inc.closed_at = inc.updated_at = now
                    inc.close_reason = f"held by {lease.holder}"
                    changed.append(inc)
                continue
            self.unwatched.append(name)
            since = self.since.setdefault(name, now)
            if now - since < self.grace_s or entity in open_rows:
                continue
            was = (f"its last holder {lease.holder} stopped renewing its lease" if lease is not None
                   else "no instance has held it yet")
            inc = new_incident(entity, "shard", "telemetry", State.UNKNOWN, now)
            inc.evidence.append(f"shard {name} has no live instance: its {self.nodes[name]} node(s) are watched by "
                                f"nobody ({was}); start `raswarden run` with service.shard = \"{name}\", or a pool "
                                "member (service.shard = \"*\")")
            changed.append(inc)
        store.record_tick([], changed, now=now)
        return changed
