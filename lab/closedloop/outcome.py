"""A closed-loop run scored: what raswarden did to each node, drains true and false, actions ahead of the
failures, every fault's outcome, and the GPU-hours."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from detectors.schema import node_of
from lab.closedloop.world import Faults
from lab.sim.cluster import SimScheduler
from lab.sim.simulator import Simulator
from playbooks.guards import incident_in_reason

VALIDATION_DRAIN = "raswarden: validation failed"  # daemon/operations/validation.py's reason

@dataclass
class LoopResult:
    """One policy on one scenario and seed."""

    scenario: str
    seed: int
    policy: str
    node_days: float
    gpu_hours: dict[str, float]
    drains_true: int
    drains_false: int
    faults: int
    hard_faults: int
    acted_before_failure: int
    symptom_to_action_s: list[float]
    wall_s: float
    ticks: int
    # per fault class: [hard faults acted on before failure, hard faults]
    acted_by_class: dict[str, list[int]] = field(default_factory=dict)
    failed: int = 0  # hard faults whose failure happened (the others were repaired after a drain ahead of it)
    # per fault: what happened to it and what it cost (see :func:`fault_outcomes`)
    fault_outcomes: list[dict] = field(default_factory=list)
    # per false drain: the node, when, why and the last fault it had (see :func:`false_drain_details`)
    false_drains: list[dict] = field(default_factory=list)
    # the repair loop, when the technician works from repair orders or botches repairs (:func:`repair_figures`)
    repairs: dict = field(default_factory=dict)
    # node-hours beside the GPU-hours: capacity out of service (drained, down, validating), broken hardware in service
    node_hours: dict = field(default_factory=dict)
    # the periodic checkpoints: how the jobs chose their interval, how many, and the intervals they came after
    checkpoints: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> LoopResult:
        """A result as :meth:`as_dict` wrote it (fields that older results lack take their defaults)."""
        return cls(d["scenario"], d["seed"], d["policy"], d["node_days"], d["gpu_hours"], d["drains_true"],
                   d["drains_false"], d["faults"], d["hard_faults"], d["acted_before_failure"],
                   d.get("symptom_to_action_s", []), d["wall_s"], d["ticks"], d.get("acted_by_class", {}),
                   d.get("failed", 0), d.get("fault_outcomes", []), d.get("false_drains", []),
                   d.get("repairs", {}), d.get("node_hours", {}), d.get("checkpoints", {}))

    @property
    def false_drains_per_1000_node_days(self) -> float:
        return 1000.0 * self.drains_false / self.node_days if self.node_days else 0.0

    def as_dict(self) -> dict:
        s2a = self.symptom_to_action_s
        return {"scenario": self.scenario, "seed": self.seed, "policy": self.policy,
                "node_days": round(self.node_days, 3), "gpu_hours": {k: round(v, 2) for k, v in self.gpu_hours.items()},
                "drains_true": self.drains_true, "drains_false": self.drains_false,
                "false_drains_per_1000_node_days": round(self.false_drains_per_1000_node_days, 3),
                "faults": self.faults, "hard_faults": self.hard_faults,
                "acted_before_failure": self.acted_before_failure,
                "symptom_to_action_median_s": statistics.median(s2a) if s2a else None,
                "symptom_to_action_s": [round(x, 1) for x in s2a],
                "acted_by_class": self.acted_by_class, "failed": self.failed, "fault_outcomes": self.fault_outcomes,
                "false_drains": self.false_drains, "repairs": self.repairs,
                "node_hours": {k: round(v, 2) for k, v in self.node_hours.items()}, "checkpoints": self.checkpoints,
                "wall_s": round(self.wall_s, 1),
                "ticks": self.ticks}


def score_actions(faults: list[dict], actions: dict[str, list[float]], drains: dict[str, list[float]]
                  ) -> tuple[list[float], int, dict[str, list[int]]]:
    """Per labelled fault: the time from its onset to raswarden's first action on its node (a checkpoint
    signal to a job there, or a drain), and whether raswarden drained the node between onset and failure.

    Returns (symptom-to-action seconds, hard faults acted on before failure, per class [acted, hard faults]).
    Only actions from a fault's onset on count: a node can carry an earlier one (a checkpoint of a job that
    spans it, asked for because of another node) that has nothing to do with this fault; and a checkpoint
    alone leaves the job on the faulty hardware, so "acted on before failure" needs the drain.
    """
    s2a: list[float] = []
    before = 0
    by_class: dict[str, list[int]] = {}
    for lb in faults:
        node, onset, failure = node_of(lb["entity"]), lb["onset"], lb["failure"]
        acted = [t for t in actions.get(node, []) if t >= onset]
        if acted:
            s2a.append(min(acted) - onset)
        if failure is not None:
            counts = by_class.setdefault(lb["fault"], [0, 0])
            counts[1] += 1
            if any(onset <= t < failure for t in drains.get(node, [])):
                before += 1
                counts[0] += 1
    return s2a, before, by_class


def fault_outcomes(insts: list, at_failure: dict[int, dict], repaired_early: set[int],
                   actions: dict[str, list[float]], drains: dict[str, list[float]], start: float) -> list[dict]:
    """What happened to each fault (benign ones left out), to read a seed by: its class, entity, onset and
    drawn failure (hours from the scenario's start), raswarden's first action on its node and first drain
    from its onset to its repair (hours after onset), whether it was repaired ahead of its failure, and, if it failed:
    whether its node was drained then or already out for another fault's repair, the job on the node (its
    GPUs; whether it opted in to checkpoint signals, since a job that did not is left running on a drained
    node) and the work the failure cost (``lost_gpu_h``, the job's hang included)."""
    out = []
    for i, inst in enumerate(insts):
        node = node_of(inst.entity)
        # from its onset until its repair: a later action on the node is for another fault
        end = inst.until if inst.until is not None else float("inf")
        acted = [t for t in actions.get(node, []) if inst.onset <= t <= end]
        drained = [t for t in drains.get(node, []) if inst.onset <= t <= end]
        row = {"fault": inst.template.fault, "template": inst.template.template, "entity": inst.entity,
               "onset_h": round((inst.onset - start) / 3600, 3),
               "failure_h": round((inst.failure - start) / 3600, 3) if inst.template.fails else None,
               "first_action_h": round((min(acted) - inst.onset) / 3600, 3) if acted else None,
               "first_drain_h": round((min(drained) - inst.onset) / 3600, 3) if drained else None,
               "repaired_early": i in repaired_early, "failed": i in at_failure}
        if i in at_failure:
            row |= {k: (round(v, 2) if isinstance(v, float) else v) for k, v in at_failure[i].items()}
        out.append(row)
    return out


def false_drain_details(false: list[tuple[str, float, str]], insts: list, incidents: dict[str, object],
                        start: float) -> list[dict]:
    """Each false drain (node, time, drain reason), to read it without running the seed again: when (hours
    from the scenario's start), the reason, the incident the reason names (its entity, category, severity and
    first evidence, if the store still had it) and the last fault on the node before the drain (its class,
    entity and hours from its repair to the drain); either is left out when there is none."""
    out = []
    for node, ts, reason in false:
        row: dict = {"node": node, "at_h": round((ts - start) / 3600, 3), "reason": reason}
        inc = incidents.get(incident_in_reason(reason) or "")
        if inc is not None:
            row["incident"] = {"id": inc.id, "entity": inc.entity, "category": inc.category,
                               "severity": inc.severity, "evidence": [str(e)[:200] for e in inc.evidence[:3]]}
        before = [i for i in insts if node_of(i.entity) == node and i.onset <= ts]
        if before:
            last = max(before, key=lambda i: i.onset)
            row["last_fault"] = {"fault": last.template.fault, "entity": last.entity,
                                 "repaired_h_before": (round((ts - last.until) / 3600, 3)
                                                       if last.until is not None else None)}
        out.append(row)
    return out


def carries_fault(present: list[tuple[str, float, float | None]], node: str, ts: float) -> bool:
    """Whether ``node`` carries a fault at ``ts``: one of ``present`` (node, onset, repaired at or None)
    from its onset until its repair. A drain then is true; any other, on a node that is healthy (or whose
    fault was already repaired), is false."""
    return any(n == node and onset <= ts and (until is None or ts <= until) for n, onset, until in present)


def repair_figures(orders: list, technician, sched: SimScheduler, end: float) -> dict:
    """The repair loop's figures: orders, closed ones, the median time from an order to its node back in service
    after validation (MTTR), validations that caught a botched repair (validating -> open), repairs botched,
    botched repairs returned to service without a validation, and node-hours under repair orders."""
    closed = [o.closed_at - o.opened_at for o in orders if o.closed_at is not None]
    caught = sum(1 for o in orders for h in o.history if h.get("from") == "validating" and h.get("to") == "open")
    held_h = sum(((o.closed_at or end) - o.opened_at) / 3600.0 for o in orders)
    return {"orders": len(orders), "closed": len(closed),
            "mttr_h": round(statistics.median(closed) / 3600.0, 2) if closed else None,
            "validation_catches": caught, "botched": technician.botched_repairs,
            "returned_broken": technician.returned_broken, "order_hours": round(held_h, 1),
            "validations": len(sched.validation_jobs)}


def checkpoint_figures(intervals: list[float]) -> dict:
    """The periodic checkpoints: how many, and the intervals (hours) they came after: median, 10th and 90th
    percentiles."""
    if not intervals:
        return {"periodic": 0}
    q = statistics.quantiles(intervals, n=10) if len(intervals) > 1 else [intervals[0]] * 9
    return {"periodic": len(intervals), "median_interval_h": round(statistics.median(intervals) / 3600.0, 3),
            "p10_interval_h": round(q[0] / 3600.0, 3), "p90_interval_h": round(q[-1] / 3600.0, 3)}


class Actions:
    """What raswarden did to each node, read from the scheduler's log: checkpoint signals to a job on it and drains
    of it (node -> times)."""

    def __init__(self) -> None:
        self.actions: dict[str, list[float]] = {}
        self.drains: dict[str, list[float]] = {}
        self._seen = 0

    def read(self, sched: SimScheduler) -> None:
        for ts, what, detail in sched.log[self._seen:]:
            if what == "drain":
                node, _, reason = detail.partition(" ")
                if reason.startswith(VALIDATION_DRAIN):
                    continue  # the repair failed its validation: not an action on a fault
                self.actions.setdefault(node, []).append(ts)
                self.drains.setdefault(node, []).append(ts)
            elif what == "signal":
                for node in sched.jobs[detail.split(" ", 1)[0]].nodes:
                    self.actions.setdefault(node, []).append(ts)
        self._seen = len(sched.log)


def score(sim: Simulator, policy: str, sched: SimScheduler, world: Faults, did: Actions, faults: list[dict],
            incidents: dict[str, object], ticks: int, wall_s: float) -> LoopResult:
    """The run scored: drains true and false, actions ahead of the failures, every fault's outcome, GPU-hours."""
    sc = sim.scenario
    present = [(node_of(inst.entity), inst.onset, inst.until) for inst in world.open]
    drained = [(node, ts, reason) for ts, what, detail in sched.log if what == "drain"
               for node, _, reason in [detail.partition(" ")]
               if not reason.startswith(VALIDATION_DRAIN)]  # a repair that failed its validation: not a detection
    false = [d for d in drained if not carries_fault(present, d[0], d[1])]
    true_drains = len(drained) - len(false)
    s2a, before, by_class = score_actions(faults, did.actions, did.drains)
    outcomes = fault_outcomes(world.open, world.at_failure, world.repaired_early, did.actions, did.drains, sc.start)
    acct = sched.gpu_hours
    gpu_hours = {"productive": acct.productive, "allocated": acct.allocated,
                 "lost_to_failures": acct.lost_to_failures, "checkpoints": acct.checkpoints,
                 "checkpoints_requested": acct.checkpoints_requested,
                 "periodic_checkpoints": acct.periodic_checkpoints,
                 "restarts": acct.restarts, "idle_drained": acct.idle_drained, "slowed": acct.slowed,
                 "net_loss": acct.net_loss,
                 "net_loss_with_periodic_checkpoints": acct.net_loss_with_periodic_checkpoints,
                 "effective_training_ratio": acct.effective_training_ratio}
    node_hours = {"out_of_service": acct.out_of_service_node_h, "broken_in_service": acct.broken_in_service_node_h}
    return LoopResult(sc.name, sc.seed, policy, sim.topo.n_nodes * sc.duration / 86400.0, gpu_hours,
                      true_drains, len(false), len(faults),
                      len(world.failures), before, s2a, wall_s, ticks, by_class, world.failed, outcomes,
                      false_drain_details(false, world.open, incidents, sc.start), node_hours=node_hours,
                      checkpoints=checkpoint_figures(sched.periodic_intervals))
