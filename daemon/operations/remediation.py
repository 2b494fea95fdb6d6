"""Remediation as the daemon and ``raswarden playbook run`` drive it: incidents from the store become
playbook actions, and the engine advances them against the configured scheduler.

Open sub-healthy, failed and telemetry incidents get the first matching playbook; an incident grouped
under a rack or cooling incident gets none of its own (no node drains for a facility problem); when an
incident raswarden drained a node for closes, the node gets the ``healthy`` playbook (resume after a
clean period). Incidents are read from a persisted cursor, like the alert pipeline's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

from daemon.config import Config, RepairsConfig
from daemon.operations.repairs import RepairBook
from daemon.shards import Ownership, ShardSpec
from daemon.store.journal import StoreJournal
from daemon.operations.reboots import Rebooter
from daemon.operations.resets import Resetter
from daemon.operations.validation import Validator
from daemon.store import IncidentRow, Store
from daemon.topology import Topology
from playbooks.engine import OPEN, Engine, IncidentRef
from playbooks.guards import Guards
from playbooks.model import load
from playbooks.scheduler import ClusterState, Scheduler, SchedulerError

CURSOR = "playbooks"
_SEVERITY = {"suspect": 1, "subhealthy": 2, "unknown": 2, "failed": 3}  # which open incident tells a node's state
log = logging.getLogger("raswarden.remediation")


def scheduler_from_config(cfg: Config) -> Scheduler | None:
    """The scheduler ``[scheduler]`` names (None: ``type = "none"``); a mixed cluster's parts own the nodes the
    topology gives them (``scheduler:`` on a rack or node, by the scheduler's name of the node)."""
    sc = cfg.scheduler
    if sc.get("type") == "mixed":
        from playbooks.mixed import MixedScheduler

        topology = Topology.configured(cfg.service.topology)
        owners = {topology.scheduler_name.get(n, n): part for n, part in topology.node_scheduler.items()}
        return MixedScheduler({part: _one_scheduler(sc[part]) for part in ("slurm", "kubernetes")}, owners)
    return _one_scheduler(sc)


def _one_scheduler(sc: dict) -> Scheduler | None:
    if sc.get("type") == "slurm":
        from playbooks.slurm import OptIn, SlurmScheduler

        return SlurmScheduler(sc.get("slurm_conf"), OptIn(sc["checkpoint_comment"], sc["checkpoint_name"],
                                                          tuple(sc["checkpoint_partitions"])), sc["timeout_s"])
    if sc.get("type") == "kubernetes":
        from playbooks.kubernetes import KubernetesScheduler

        policies = dict(sc["namespace_policies"])
        default = policies.pop("*")
        return KubernetesScheduler.from_kubeconfig(sc["kubeconfig"] or None, policies=policies,
                                                   default_policy=default,
                                                   eviction_deadline_s=sc["eviction_deadline_s"],
                                                   timeout_s=sc["timeout_s"],
                                                   validation_namespace=sc["validation_namespace"],
                                                   validation_image=sc["validation_image"],
                                                   reboot_command=sc["reboot_command"])
    return None


def incident_ref(row: IncidentRow, labels: dict[str, str] | None = None,
                 scheduler_names: dict[str, str] | None = None) -> IncidentRef:
    """The engine's view of an incident row; ``scheduler_names`` (topology ``scheduler_name``) maps the node."""
    node = row.entity.split("/", 1)[0]
    return IncidentRef(id=row.id, entity=row.entity, kind=row.kind, state=row.severity, category=row.category,
                       rack=row.rack, labels=labels or {}, opened_at=row.opened_at, closed_at=row.closed_at,
                       scheduler_node=(scheduler_names or {}).get(node))


class NoScheduler:
    """``[scheduler] type = "none"``: raswarden decides and records (dry run), and acts on nothing."""

    def snapshot(self) -> ClusterState:
        return ClusterState(time.time())


@dataclass(frozen=True)
class RemediationConfig:
    """What remediation reads of the config: the guards, the repair settings, the operators' playbook directories,
    and, for a caller that hands over no topology or ownership, the topology's file and the shard's spec."""

    guards: Guards
    repairs: RepairsConfig
    playbook_dirs: tuple[str, ...] = ()
    topology_path: str = ""
    shard: ShardSpec | None = None

    @classmethod
    def of(cls, cfg: Config) -> RemediationConfig:
        return cls(cfg.guards, cfg.repairs, tuple(cfg.playbook_dirs), cfg.service.topology,
                   cfg.shards.get(cfg.service.shard))


class Remediation:
    """Incidents → actions → steps."""

    @classmethod
    def from_config(cls, cfg: Config, store: Store, scheduler: Scheduler | None, **kw) -> Remediation:
        """Remediation with its slice of ``cfg`` (:class:`RemediationConfig`); ``kw`` as for the constructor."""
        return cls(RemediationConfig.of(cfg), store, scheduler, **kw)

    def __init__(self, cfg: RemediationConfig, store: Store, scheduler: Scheduler | None, clock=time.time,
                 act_on: tuple[str, ...] = ("subhealthy", "failed", "unknown"), topology: Topology | None = None,
                 repair_orders: bool = True, ownership: Ownership | None = None):
        """``topology``: the service's (read once for all its parts); without it, the config's file is read.
        ``repair_orders``: open repair orders and validate repaired nodes (off: drained nodes return through the
        recovery playbook alone, as the closed loop's world still has them do). ``ownership``: the shard's part of
        the cluster (daemon/shards.py; default: the config's shard); incidents of other shards are theirs."""
        guards = cfg.guards
        if scheduler is None:  # nothing to act on: decide and record (the caller's config is left as it is)
            scheduler = NoScheduler()
            if guards.mode == "act":
                guards = dataclasses.replace(guards, mode="dry-run")
        self.guards = guards
        self.store = store
        self.journal = StoreJournal(store)
        # Nodes the scheduler knows by another name than the telemetry's (topology.yaml scheduler_name).
        topology = topology if topology is not None else Topology.configured(cfg.topology_path)
        self.ownership = ownership or Ownership.of(cfg.shard, topology)
        self.cursor = f"{CURSOR}:{self.ownership.shard}" if self.ownership.sharded else CURSOR
        self.scheduler_names: dict[str, str] = dict(topology.scheduler_name)
        self.repairs = RepairBook(store, topology, clock=clock)
        self.validator = Validator(self.repairs, scheduler, cfg.repairs, clock=clock,
                                   scheduler_names=self.scheduler_names, guards=guards,
                                   breaker=self.journal.breaker, owns=self.ownership.owns)
        self.resetter = Resetter(self.repairs, scheduler, cfg.repairs, topology,
                                 scheduler_names=self.scheduler_names, guards=guards, breaker=self.journal.breaker,
                                 owns=self.ownership.owns)
        self.rebooter = Rebooter(self.repairs, scheduler, cfg.repairs, scheduler_names=self.scheduler_names,
                                 guards=guards, breaker=self.journal.breaker, owns=self.ownership.owns, clock=clock)
        self.clock = clock
        self.act_on = act_on
        # Incidents already planned at the cursor's time: the cursor is inclusive (an incident updated at that
        # very time by a later transaction is not missed), so these come back and are passed over.
        self._seen_at_cursor: set[tuple] = set()
        # Incidents whose new severity came while an action of theirs was still open (the engine plans one
        # action at a time per incident): planned once that action has ended.
        self._deferred: dict[str, IncidentRef] = {}
        racks = self._racks()
        self.engine = Engine(scheduler, self.journal, load(list(cfg.playbook_dirs)), guards, clock=clock,
                             rack_of=racks.get, owns=self.ownership.owns_entity)
        self.validator.rack_of = racks.get
        self._defer_unplanned()
        self._repairs_checked = not repair_orders
        self.repair_orders = repair_orders
        self.settled = False  # see step

    def _defer_unplanned(self) -> None:
        """After a restart: open incidents whose present severity has no action yet (it came while another
        action of theirs was open) are deferred again, not forgotten."""
        rows = [r for r in self.store.incidents("open") if self.ownership.owns_entity(r.entity)]
        attrs = self.store.entity_attrs(r.entity for r in rows)
        for row in rows:
            if row.parent is None and row.severity in self.act_on:
                ref = incident_ref(row, _labels(attrs, row.entity), self.scheduler_names)
                if self._waits_for_open_action(ref):
                    self._deferred[row.id] = ref

    def _racks(self) -> dict[str, str | None]:
        """Rack of each node, by its own and by its scheduler name (the engine sees the latter)."""
        racks = self.store.node_racks()
        racks.update({sched: racks.get(node) for node, sched in self.scheduler_names.items()})
        return racks

    def sync(self, state: ClusterState | None = None) -> int:
        """Plan actions for incidents changed since the cursor; returns how many were planned."""
        planned = 0
        now = self.clock()
        cursor = self.store.incident_cursor(self.cursor)
        since = cursor if cursor is not None else float("-inf")
        rows = [r for r in self.store.incidents_updated_since(since)
                if not (r.updated_at == since and _version(r) in self._seen_at_cursor)
                and self.ownership.owns_entity(r.entity)]
        if not rows:  # the usual tick: read nothing else
            return self._planned_deferred() if self._deferred else 0
        attrs = self.store.entity_attrs(r.entity for r in rows)
        recent = self.store.incidents_opened_since(now - self.engine.guards.breaker_window_s)
        nodes = self.store.count_nodes()
        self.engine.observe(recent, nodes, stale_nodes=sum(1 for r in rows if r.category == "telemetry"
                                                           and r.closed_at is None and r.kind == "node"))
        state = state or self.engine.scheduler.snapshot()
        for row in rows:
            labels = _labels(attrs, row.entity)
            if row.closed_at is None:
                if row.parent is None and row.severity in self.act_on:
                    ref = incident_ref(row, labels, self.scheduler_names)
                    self._deferred.pop(row.id, None)
                    if self.engine.submit(ref, state) is not None:
                        planned += 1
                    elif self._waits_for_open_action(ref):
                        self._deferred[row.id] = ref
                else:
                    self._deferred.pop(row.id, None)
            elif self._drained_for(row.id) and not self.repairs.active_on(row.entity.split("/", 1)[0]):
                # (a node with repair orders under way returns through its validation, not after a clean period)
                node = row.entity.split("/", 1)[0]
                ref = IncidentRef(id=f"{row.id}-recovered", entity=node, kind="node",
                                  state="healthy", category=row.category, rack=row.rack, labels=labels,
                                  opened_at=row.opened_at, closed_at=row.closed_at,
                                  scheduler_node=self.scheduler_names.get(node))
                planned += self.engine.submit(ref, state) is not None
        planned += self._planned_deferred(state)
        self._tell_health(rows)
        last = max(r.updated_at for r in rows)
        self.store.save_incident_cursor(self.cursor, last)
        self._seen_at_cursor = {_version(r) for r in rows if r.updated_at == last} | (
            self._seen_at_cursor if last == since else set())
        return planned

    def _tell_health(self, rows: list[IncidentRow]) -> None:
        """Where the scheduler shows raswarden's view of a node (Kubernetes: a node condition), tell it for the nodes
        whose incidents changed: the worst open incident's state and what it is, or healthy (best effort)."""
        tell = getattr(self.engine.scheduler, "tell_health", None)
        if tell is None:
            return
        nodes = {r.entity.split("/", 1)[0] for r in rows}
        worst: dict[str, IncidentRow] = {}
        for r in self.store.incidents(status="open"):
            node = r.entity.split("/", 1)[0]
            if node in nodes and (node not in worst or _SEVERITY.get(r.severity, 0) > _SEVERITY.get(
                    worst[node].severity, 0)):
                worst[node] = r
        for node in sorted(nodes):
            top = worst.get(node)
            try:
                tell(self.scheduler_names.get(node, node), top.severity if top else "healthy",
                     f"{top.category} on {top.entity} ({top.id})" if top else "no open incident")
            except SchedulerError as exc:
                log.warning("node %s: raswarden's view not told to the scheduler: %s", node, exc)

    def _waits_for_open_action(self, ref: IncidentRef) -> bool:
        earlier = self.journal.actions_for(ref.id)
        return any(a.status in OPEN for a in earlier) and not any(a.incident.state == ref.state for a in earlier)

    def _planned_deferred(self, state: ClusterState | None = None) -> int:
        """Plan the deferred incidents whose open action has ended; how many were planned."""
        planned = 0
        for incident_id, ref in list(self._deferred.items()):
            if self._waits_for_open_action(ref):
                continue
            del self._deferred[incident_id]
            state = state or self.engine.scheduler.snapshot()
            planned += self.engine.submit(ref, state) is not None
        return planned

    def _drained_for(self, incident_id: str) -> bool:
        return any(st.type == "drain" and st.status == "done" for a in self.journal.actions()
                   if a.incident.id == incident_id for st in a.steps)

    def step(self) -> dict[str, int]:
        """One pass: plan, advance every open action, open repair orders for nodes drained for hardware (on the
        first pass for every action in the journal: a drain done just before a restart still gets its orders).

        Afterwards :attr:`settled` says whether the pass left nothing that time alone moves on (no open action, no
        incident waiting for one to end, no validation running, no idle checks on a schedule): until new input
        (an incident, an order changed by someone else) another pass would do nothing. A caller that knows every
        writer, as the closed loop does, may skip passes then; the daemon does not (the API and the command line
        change orders)."""
        planned = self.sync()
        touched = self.engine.run()
        settled = not touched and not self._deferred
        if not self.repair_orders:
            self.settled = settled
            return {"planned": planned, "advanced": len(touched)}
        drained = touched if self._repairs_checked else [*self.journal.actions(), *touched]
        self._repairs_checked = True
        opened = self.repairs.open_for_actions(drained)
        rebooted = self.rebooter.step()  # first: a node rebooted for an order is never reset for it after
        reset = self.resetter.step()  # before validation: a reset that passed is validated in the same pass
        validated = self.validator.step()
        self.settled = settled and not validated.get("validations_running") and not reset["resets_running"] and \
            not rebooted["reboots_running"] and not self.validator.cfg.idle_check_every_s
        return {"planned": planned, "advanced": len(touched), "repair_orders": len(opened),
                **rebooted, **reset, **validated}


def _version(row: IncidentRow) -> tuple:
    """What makes one state of an incident: planning it again changes nothing."""
    return row.id, row.severity, row.closed_at, row.updated_at


def _labels(attrs: dict[str, dict | None], entity: str) -> dict[str, str]:
    """An entity's labels (its attributes as strings) for playbook matching."""
    return {k: str(v) for k, v in (attrs.get(entity) or {}).items()}
