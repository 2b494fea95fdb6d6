"""Cooling-loop incidents: racks of one cooling loop in thermal trouble at once are one facility problem (a CDU, a
pump, the loop's inlet), told once for the whole cluster, also when the loop's racks are watched by different shards.

Each shard's incident book groups its nodes' incidents into rack incidents (daemon/judgement/incidents.py); a loop's
racks may
belong to several shards, so no shard sees the whole loop. This runs where the cluster's alerts run (the holder of
the shard, or of the alert lease in a sharded cluster: one instance at a time) and judges from the store, where every
shard writes its rack incidents: at least ``loop_racks`` racks of one loop (``cooling`` in the topology's racks) with
open thermal or cooling incidents opened within ``window_s`` of each other open one incident of kind ``cooling`` on
the loop; it lasts while that many racks of the loop have open ones, and closes when fewer remain. It keeps nothing
in memory, so a new holder goes on with the same incident.
The racks' incidents stay their shards' (the loop incident names them); the built-in playbook for it only notifies.
"""

from __future__ import annotations

from daemon.judgement.incidents import Incident, cluster_close, cluster_raise, cluster_record, new_incident
from daemon.store import IncidentRow, Store
from daemon.topology import Topology
from detectors.schema import State

#: rack incident categories that a cooling loop explains
LOOP_CATEGORIES = frozenset({"cooling", "gpu_thermal"})
CATEGORY = "cooling"  # the loop incident's


class CoolingLoops:
    """Opens, updates and closes the cluster's cooling-loop incidents from the racks' open incidents in the store."""

    def __init__(self, topology: Topology, loop_racks: int = 2, window_s: float = 3600.0):
        self.loop_of = dict(topology.rack_cooling)
        self.loop_racks = loop_racks
        self.window_s = window_s

    def step(self, store: Store, now: float) -> list[Incident]:
        """One pass over the store; returns the loop incidents opened, updated or closed (written to the store)."""
        if not self.loop_of:
            return []
        with store.cluster_lock("cooling-loops"):
            rows = store.incidents("open")
            racks: dict[str, list[IncidentRow]] = {}
            for r in rows:
                if r.kind == "rack" and r.category in LOOP_CATEGORIES and r.entity in self.loop_of:
                    racks.setdefault(self.loop_of[r.entity], []).append(r)
            current = {r.entity: r for r in rows if r.kind == CATEGORY and r.fingerprint == f"{r.entity}|{CATEGORY}"}
            changed = []
            for loop, members in sorted(racks.items()):
                row = current.get(loop)
                if row is None:  # to open, the racks' trouble started together; once open, it lasts while they do
                    latest = max(m.opened_at for m in members)
                    members = [m for m in members if m.opened_at >= latest - self.window_s]
                names = sorted({m.entity for m in members})
                if len(names) < self.loop_racks:
                    continue
                worst = max(State.parse(m.severity) for m in members)
                reason = f"{len(names)} racks of cooling loop {loop} with thermal incidents: {', '.join(names)}"
                current.pop(loop, None)
                inc = Incident.from_row(row) if row else new_incident(loop, CATEGORY, CATEGORY, worst, now)
                if cluster_raise(inc, worst, reason, now, new=row is None):
                    changed.append(inc)
            changed += cluster_close(current.values(), "fewer racks affected", now)  # loops no longer in trouble
            return cluster_record(store, changed, now, "cooling loop")
