"""The closed loop (``raswarden simulate SCENARIO --closed-loop``): simulated hardware, raswarden's detectors
and playbooks, and a simulated Slurm, with every GPU-hour accounted, under one of three policies:

* ``none``: no raswarden. A hard fault kills the job on its node; the node stays schedulable (Slurm does not
  see a GPU off the bus), so jobs placed on it crash, until an operator drains it ``operator_response_s``
  after the failure.
* ``reactive``: raswarden acts on ``failed`` incidents only: drain and requeue right after the failure. Only
  the rules run (they alone say ``failed``).
* ``full``: every built-in playbook on every incident (checkpoint, drain and requeue ahead of the failure),
  with the learned detectors when a model is given.

The loop is closed both ways: playbooks act on the simulated scheduler, and the simulator's workload follows
the scheduler (a GPU is busy while a job runs on it, idle on a drained node and while a job restarts), so
the detectors see what a drain does. A hard fault breaks its node at the labelled failure time (the job on it
hangs for ``hang_s``, the collective timeout, then dies) and is repaired ``repair_s`` after the node is taken
out of service for it, when the fault's effects stop, and the technician returns it to service (resumes it,
whoever drained it; the same under every policy). A node raswarden drains (and its job has left) while it
carries a fault that has not failed yet goes to repair right then: the part is replaced and the failure never
happens. Time under repair is not counted as idle (the node is out for ``repair_s`` whoever takes it
out, so only when differs); time drained on working hardware is: that is what a false drain costs. A fabric
port that fails kills the job on its node (its collectives fail) but leaves the node usable on its other
rails. The same operator acts under every policy (a
node raswarden already drained needs nothing from them). A job runs at the pace of its slowest GPU: a
fail-slow GPU (or a throttling one) holds back the whole synchronous job, and the time is accounted as
*slowed*; left alone, a fail-slow GPU recovers (or is found by someone) at the end of its labelled window,
and a drain sends it to repair like any other fault.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from daemon.config import Config
from daemon.naming import SeriesMapper
from daemon.pipeline import Pipeline, PipelineConfig
from daemon.rejects import RejectLog
from daemon.remediation import Remediation
from lab.sim.simulator import Simulator, chunk_to_batch
from lab.sim.scheduler import SimJob, SimScheduler
from daemon.store import Store
from daemon.timeorder import tick_index
from daemon.topology import Topology
from playbooks.guards import Guards, incident_in_reason

POLICIES = ("none", "reactive", "full")
# What the figures mean; results of another version do not mix (2: a slow GPU holds back its job; 3: actions are
# scored per fault from its onset, and "acted on before failure" needs the drain; 4: the net loss leaves out the
# periodic checkpoints, reported beside it; 5: a drain is true only while its node carries the fault, and the
# technician returns a repaired node to service under every policy).
ACCOUNTING_VERSION = 5
OPERATOR = "operator"


@dataclass
class LoopOptions:
    """What the loop assumes about the site (stated in every report)."""

    interval_s: float = 30.0
    repair_s: float = 24 * 3600.0  # out of service to repaired hardware
    hang_s: float = 600.0  # a job hangs this long on a dead GPU before it dies (PyTorch's NCCL timeout default)
    operator_response_s: float = 2 * 3600.0  # failure to an operator's drain, without raswarden
    checkpoint_interval_s: float = 3600.0
    checkpoint_cost_s: float = 120.0
    restart_cost_s: float = 600.0  # requeue, reschedule, load the checkpoint, warm up
    opt_in_share: float = 0.9  # jobs that checkpoint on raswarden's signal
    # Budgets for one 80-blade supernode under a dense fault scenario (a hundred times the fleet's rate): failed
    # nodes are not repaired within a 14 h scenario, and every unavailable node counts against the budget.
    guards: Guards = field(default_factory=lambda: Guards(max_drained_nodes=16, max_cluster_fraction=0.2,
                                                          max_rack_fraction=0.25, breaker_incidents=40))


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

    @classmethod
    def from_dict(cls, d: dict) -> LoopResult:
        """A result as :meth:`as_dict` wrote it (fields that older results lack take their defaults)."""
        return cls(d["scenario"], d["seed"], d["policy"], d["node_days"], d["gpu_hours"], d["drains_true"],
                   d["drains_false"], d["faults"], d["hard_faults"], d["acted_before_failure"],
                   d.get("symptom_to_action_s", []), d["wall_s"], d["ticks"], d.get("acted_by_class", {}),
                   d.get("failed", 0), d.get("fault_outcomes", []), d.get("false_drains", []))

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
                "false_drains": self.false_drains, "wall_s": round(self.wall_s, 1), "ticks": self.ticks}


def plan_jobs(sim: Simulator, opts: LoopOptions) -> list[SimJob]:
    """A backlog that keeps the machine full for the whole scenario: training jobs of the scenario's sizes and
    lengths (work to do), submitted at the start and scheduled first-fit in order."""
    sc, mix = sim.scenario, sim.scenario.jobs
    rng = np.random.default_rng(sc.seed + 7)
    jobs, node_s, want = [], 0.0, 1.5 * sim.topo.n_nodes * sc.duration
    while node_s < want:
        n = int(rng.integers(mix.nodes_per_job[0], min(mix.nodes_per_job[1], sim.topo.n_nodes) + 1))
        work = float(rng.uniform(*mix.duration))
        jobs.append(SimJob(f"{len(jobs) + 1:05d}", n, work, opt_in=bool(rng.random() < opts.opt_in_share),
                           checkpoint_interval_s=opts.checkpoint_interval_s, checkpoint_cost_s=opts.checkpoint_cost_s,
                           restart_cost_s=opts.restart_cost_s))
        node_s += n * work
    return jobs


def _node_of(entity: str) -> str:
    return entity.split("/", 1)[0]


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
        node, onset, failure = _node_of(lb["entity"]), lb["onset"], lb["failure"]
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


def _return_repaired(sched: SimScheduler, under_repair: set[str], now: float,
                     pipeline: Pipeline | None) -> None:
    """The technician who repaired a node returns it to service (resumes it, whoever drained it) and tells
    raswarden its parts are new: the same under every policy. Nodes drained on working hardware are not
    theirs; raswarden's own playbooks (or nobody) resume those."""
    for n in sched.nodes.values():
        if n.drained and max(n.broken_until, n.down_until) > now:
            under_repair.add(n.name)
    for name in sorted(under_repair):
        n = sched.nodes[name]
        if max(n.broken_until, n.down_until) <= now:
            under_repair.discard(name)
            if n.drained:
                n.drained, n.reason, n.reason_set_by = False, "", ""
                sched.log.append((now, "returned", name))
            if pipeline is not None:
                pipeline.forget(name)


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
        node = _node_of(inst.entity)
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
        before = [i for i in insts if _node_of(i.entity) == node and i.onset <= ts]
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


class _Faults:
    """The world's hard faults as the loop plays them: each fails at its labelled time (the job on its node hangs,
    then dies; the node breaks until repaired, and an operator drains it), unless raswarden took its node out
    first, in which case the part is replaced and the failure never happens."""

    def __init__(self, sim: Simulator, opts: LoopOptions):
        self.opts = opts
        for p in sim.placed:
            if p.inst.template.fails and not p.inst.template.benign:
                p.inst.until = p.inst.failure + opts.repair_s
            elif not p.inst.template.benign:  # a fail-slow GPU left alone recovers (or is found) at its window's end
                p.inst.until = p.inst.failure
        # Faults not yet failed nor repaired; a node raswarden drains and empties while it carries one goes to
        # repair (a fault with no failure, fail-slow, too). Repaired ones never fail.
        self.open = [p.inst for p in sim.placed if not p.inst.template.benign]
        self.failures = sorted(((inst.failure, _node_of(inst.entity), inst.template.target == "port", i)
                                for i, inst in enumerate(self.open) if inst.template.fails), key=lambda f: f[:3])
        self.repaired_early: set[int] = set()  # the ``open`` indices of the failures that never happen
        self.pending = list(range(len(self.open)))  # neither failed nor repaired yet
        self.at_failure: dict[int, dict] = {}  # ``open`` index -> the node and its job when the failure happened
        self.operator_due: list[tuple[float, str]] = []  # (when, node) an operator drains a broken node
        self.failed = 0
        self._next = 0
        self.per_node = sim.topo.gpus_per_node

    def fail_until(self, sched: SimScheduler, now: float) -> None:
        """The failures due by ``now``: the node's job is lost (a port's) or its node breaks (anything else)."""
        while self._next < len(self.failures) and self.failures[self._next][0] <= now:
            t, node, port, which = self.failures[self._next]
            self._next += 1
            if which in self.repaired_early:
                continue
            self.failed += 1
            sched.step(t)
            lost_before, n = sched.gpu_hours.lost_to_failures, sched.nodes[node]
            job = sched.jobs.get(n.job) if n.job else None
            self.at_failure[which] = {"drained": n.drained, "under_repair": max(n.broken_until, n.down_until) > t,
                                      "job": job.id if job else None,
                                      "job_gpus": job.n_nodes * self.per_node if job else 0,
                                      "job_opted_in": job.opt_in if job else None}
            if port:
                sched.interrupt(node)
            else:
                sched.break_node(node, t + self.opts.repair_s, self.opts.hang_s)
                self.operator_due.append((t + self.opts.operator_response_s, node))
            self.at_failure[which]["lost_gpu_h"] = sched.gpu_hours.lost_to_failures - lost_before

    def operators_until(self, sched: SimScheduler, now: float) -> None:
        """Operators drain the broken nodes they have got round to (those nobody drained yet)."""
        for when, node in [x for x in self.operator_due if x[0] <= now]:
            self.operator_due.remove((when, node))
            if sched.broken(node) and not sched.nodes[node].drained:
                sched.step(when)
                sched.operator_drain(node, "hardware failure", OPERATOR)

    def repair_ahead(self, sched: SimScheduler, now: float) -> None:
        """A node raswarden drained and emptied while it carries a fault not yet failed goes to repair now."""
        for which in list(self.pending):
            inst = self.open[which]
            node = _node_of(inst.entity)
            if inst.template.fails and inst.failure <= now:  # it failed first
                self.pending.remove(which)
                continue
            n = sched.nodes[node]
            if (inst.onset <= now and n.drained and n.reason.startswith("raswarden:") and n.job is None
                    and not sched.broken(node)):
                self.pending.remove(which)
                self.repaired_early.add(which)
                sched.repair(node, now + self.opts.repair_s)
                inst.until = now + self.opts.repair_s


class _Actions:
    """What raswarden did to each node, read from the scheduler's log: checkpoint signals to a job on it and drains
    of it (node -> times)."""

    def __init__(self) -> None:
        self.actions: dict[str, list[float]] = {}
        self.drains: dict[str, list[float]] = {}
        self._seen = 0

    def read(self, sched: SimScheduler) -> None:
        for ts, what, detail in sched.log[self._seen:]:
            if what == "drain":
                node = detail.split(" ", 1)[0]
                self.actions.setdefault(node, []).append(ts)
                self.drains.setdefault(node, []).append(ts)
            elif what == "signal":
                for node in sched.jobs[detail.split(" ", 1)[0]].nodes:
                    self.actions.setdefault(node, []).append(ts)
        self._seen = len(sched.log)


def _follow_the_scheduler(sim: Simulator, sched: SimScheduler) -> None:
    """The simulator's workload follows the scheduler: a node's GPUs are busy while a job runs on it (not while it
    restarts), idle otherwise."""
    per_node = sim.topo.gpus_per_node

    def workload(ts: np.ndarray) -> np.ndarray:
        busy = np.zeros(sim.topo.n_gpus, dtype=bool)
        for node in sched.nodes.values():
            job = sched.jobs.get(node.job) if node.job else None
            if job is not None and not (job.busy_s > 0 and job.busy_kind == "restart"):
                i = sim.node_index[node.name]
                busy[i * per_node:(i + 1) * per_node] = True
        return np.repeat(busy[:, None], len(ts), axis=1)

    sim.workload = workload


def _raswarden(sim: Simulator, policy: str, opts: LoopOptions, model, work: Path) -> tuple[Store, Pipeline]:
    """The store and pipeline of a policy that runs raswarden, on the simulated fleet's topology."""
    topo_path = work / "topology.yaml"
    per_node = sim.topo.gpus_per_node
    sim.topo.write(topo_path, uuid_of=lambda n, g: f"GPU-{sim.uuids[n * per_node + g]}")
    db = work / f"loop-{policy}.db"
    db.unlink(missing_ok=True)
    store = Store(f"sqlite:///{db}")
    pipeline = Pipeline(SeriesMapper(topology=Topology.load(topo_path), rejects=RejectLog()),
                        # Reactive is drain-on-failure: it acts on `failed` alone, which only the rules
                        # say, so only they run (a fraction of the full policy's time: docs/benchmarks.md).
                        PipelineConfig(interval_s=opts.interval_s, model=model if policy == "full" else None,
                                       rules_only=policy == "reactive"),
                        store)
    return store, pipeline


def run(sim: Simulator, policy: str, opts: LoopOptions | None = None, model=None,
        workdir: Path | None = None, playbook_dirs: list[str] | None = None) -> LoopResult:
    """Run one policy over the simulator's scenario (the simulator is consumed)."""
    import time

    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
    opts = opts or LoopOptions()
    started = time.perf_counter()
    sc = sim.scenario
    faults = [lb for lb in sim.labels() if not lb["fault"].startswith("benign_")]
    world = _Faults(sim, opts)
    sched = SimScheduler(list(sim.topo.nodes), sim.topo.gpus_per_node)
    for job in plan_jobs(sim, opts):
        sched.submit(job)
    sched.step(sc.start)
    per_node = sim.topo.gpus_per_node
    _follow_the_scheduler(sim, sched)
    tmp = tempfile.TemporaryDirectory(prefix="raswarden-loop-") if workdir is None else None
    work = Path(tmp.name) if tmp else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    store = pipeline = remediation = None
    if policy != "none":
        store, pipeline = _raswarden(sim, policy, opts, model, work)
    under_repair: set[str] = set()  # drained nodes out of service for a repair
    did = _Actions()
    ticks = 0
    steps = max(1, int(round(opts.interval_s / sc.resolution)))
    clock = [sc.start]
    try:
        speeds = np.ones(len(sim.topo.nodes))
        for chunk in sim.chunks(chunk_steps=steps):
            now = float(chunk.ts[-1])
            if chunk.gpu_speed is not None:  # the pace of each node's slowest GPU over this interval
                pace = chunk.gpu_speed.mean(axis=1).reshape(len(sim.topo.nodes), per_node).min(axis=1)
                for i in np.flatnonzero(pace != speeds):
                    sched.nodes[sim.topo.nodes[i]].speed = float(pace[i])
                speeds = pace
            world.fail_until(sched, now)
            world.operators_until(sched, now)
            _return_repaired(sched, under_repair, now, pipeline)
            sched.step(now)
            clock[0] = now
            if pipeline is not None:
                tick_now = float(tick_index(np.array([now]), opts.interval_s)[0] * opts.interval_s)
                pipeline.tick(tick_now, chunk_to_batch(sim, chunk))
                if remediation is None:
                    cfg = Config(playbook_dirs=list(playbook_dirs or []), guards=opts.guards)
                    remediation = Remediation(cfg, store, sched, clock=lambda: clock[0],
                                              act_on=("failed",) if policy == "reactive" else
                                              ("subhealthy", "failed", "unknown"))
                remediation.step()
            did.read(sched)
            world.repair_ahead(sched, now)
            ticks += 1
        incidents = {row.id: row for row in store.incidents()} if store is not None else {}
    finally:
        if store is not None:
            store.close()
        if tmp is not None:
            tmp.cleanup()
    return _result(sim, policy, sched, world, did, faults, incidents, ticks, time.perf_counter() - started)


def _result(sim: Simulator, policy: str, sched: SimScheduler, world: _Faults, did: _Actions, faults: list[dict],
            incidents: dict[str, object], ticks: int, wall_s: float) -> LoopResult:
    """The run scored: drains true and false, actions ahead of the failures, every fault's outcome, GPU-hours."""
    sc = sim.scenario
    present = [(_node_of(inst.entity), inst.onset, inst.until) for inst in world.open]
    drained = [(node, ts, reason) for ts, what, detail in sched.log if what == "drain"
               for node, _, reason in [detail.partition(" ")]]
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
    return LoopResult(sc.name, sc.seed, policy, sim.topo.n_nodes * sc.duration / 86400.0, gpu_hours,
                      true_drains, len(false), len(faults),
                      len(world.failures), before, s2a, wall_s, ticks, by_class, world.failed, outcomes,
                      false_drain_details(false, world.open, incidents, sc.start))
