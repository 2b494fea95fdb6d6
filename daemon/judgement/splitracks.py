"""Rack incidents of racks split between shards: recognised once, for the whole cluster.

A shard's incident book groups its racks' node incidents into rack incidents (daemon/judgement/incidents.py). A rack
whose
nodes several shards hold (shards by node lists) would be judged by each shard on its part: a rack failing as a
whole told once per shard, or not at all when no part alone reaches the rule. So no shard's book groups such a rack;
this groups it, where the cluster's alerts run (one instance at a time, as the cooling loops), from the store where
every shard writes its node incidents: the same :class:`RackRule` over all of the rack's nodes' open incidents of one
category opens, updates and closes one rack incident. The shards' books then point their members to it
(``IncidentBook.outside_parents``, read each cycle: :func:`parents`), so playbooks act on the rack's incident, not on
each node, as within one shard; one cycle later than there. It keeps nothing in memory: a new holder goes on with
the same incident. The rack incident is the cluster's, as a cooling loop's is: the alert pipeline tells it, and no
shard's playbooks act on it (the built-in one for racks only notifies).
"""

from __future__ import annotations

from daemon.judgement.incidents import (Incident, RackRule, cluster_close, cluster_raise, cluster_record, groupable,
                                        new_incident)
from daemon.store import IncidentRow, Store
from daemon.topology import Topology
from detectors.schema import State


class SplitRacks:
    """Opens, updates and closes the rack incidents of the racks in ``racks`` (split between shards)."""

    def __init__(self, racks: dict[str, list[str]], topology: Topology, rule: RackRule | None = None):
        self.racks = racks  # rack -> the shards that hold some of its nodes (daemon.shards.split_racks)
        self.rule = rule or RackRule()
        self.size = {rack: 0 for rack in racks}
        for rack in topology.node_rack.values():
            if rack in self.size:
                self.size[rack] += 1

    def step(self, store: Store, now: float) -> list[Incident]:
        """One pass over the store; returns the rack incidents opened, updated or closed (written to the store)."""
        if not self.racks:
            return []
        changed: list[Incident] = []
        with store.cluster_lock("split-racks"):
            rows = store.open_incidents_in_racks(self.racks)
            groups: dict[tuple[str, str], list[IncidentRow]] = {}
            current: dict[str, IncidentRow] = {}
            doubles: list[IncidentRow] = []  # a rack's second open incident: each shard's, from before this judged
            for r in rows:
                if r.kind == "rack" and r.fingerprint == f"{r.entity}|{r.category}":
                    if r.fingerprint in current:
                        doubles.append(r)
                    else:
                        current[r.fingerprint] = r
                elif groupable(r.kind, r.category, r.rack):
                    groups.setdefault((r.rack, r.category), []).append(r)
            for (rack, category), members in sorted(groups.items()):
                found = self.rule.group(members, self.size[rack])
                if found is None:
                    continue
                members, nodes = found
                fingerprint = f"{rack}|{category}"
                worst = max(State.parse(m.severity) for m in members)
                reason = self.rule.reason(rack, category, nodes) + f" (rack split between shards " \
                                                                   f"{', '.join(self.racks[rack])})"
                row = current.pop(fingerprint, None)
                inc = Incident.from_row(row) if row else new_incident(rack, "rack", category, worst, now, rack=rack)
                if cluster_raise(inc, worst, reason, now, new=row is None):
                    changed.append(inc)
            changed += cluster_close(current.values(), "fewer nodes affected", now)  # racks no longer in trouble
            changed += cluster_close(doubles, "the rack's incident is judged for the cluster, once", now)
            return cluster_record(store, changed, now, "split rack")


def parents(store: Store, racks: frozenset[str]) -> dict[tuple[str, str], tuple[str, float]]:
    """The open rack incidents of ``racks`` (a shard's split racks) by (rack, category), with when each opened: what
    its book's members of those racks point to (those opened within the rule's window before it, or since)."""
    if not racks:
        return {}
    return {(r.entity, r.category): (r.id, r.opened_at) for r in store.open_incidents_in_racks(racks, kind="rack")}
