"""The world the loop plays: a backlog of jobs, hard faults that fail at their labelled time unless their node
was taken out first, operators who drain broken nodes, technicians who return repaired ones, and a workload that
follows the scheduler."""

from __future__ import annotations

import math

import numpy as np

from daemon.operations.advice import daly_interval
from daemon.judgement.pipeline import Pipeline
from detectors.schema import node_of
from lab.closedloop.options import LoopOptions
from lab.sim.arrivals import DEFAULT_MIX
from lab.sim.cluster import SimJob, SimScheduler
from lab.sim.simulator import Simulator

OPERATOR = "operator"
TECHNICIAN = "technician"


def plan_jobs(sim: Simulator, opts: LoopOptions) -> list[SimJob]:
    """A backlog that keeps the machine full for the whole scenario: training jobs of the scenario's sizes and
    lengths (work to do), submitted at the start and scheduled first-fit in order."""
    sc, mix = sim.scenario, sim.scenario.jobs
    rng = np.random.default_rng(sc.seed + 7)
    jobs, node_s, want = [], 0.0, 1.5 * sim.topo.n_nodes * sc.duration
    per_node_s = realized_failure_rate(sim) if opts.checkpoint_policy == "oracle" else expected_failure_rate(sim)
    while node_s < want:
        n = int(rng.integers(mix.nodes_per_job[0], min(mix.nodes_per_job[1], sim.topo.n_nodes) + 1))
        work = float(rng.uniform(*mix.duration))
        opt_in = bool(rng.random() < opts.opt_in_share)
        interval = opts.checkpoint_interval_s
        if opts.checkpoint_policy != "fixed":  # the best fixed interval for its size, knowing the fleet's rate
            interval = daly_interval(opts.checkpoint_cost_s, 1.0 / (n * per_node_s) if per_node_s else math.inf)
            interval = min(interval, sc.duration)
        jobs.append(SimJob(f"{len(jobs) + 1:05d}", n, work, opt_in=opt_in, checkpoint_interval_s=interval,
                           checkpoint_cost_s=opts.checkpoint_cost_s, restart_cost_s=opts.restart_cost_s,
                           # what a job declares beside its opt-in (daemon/operations/advice.py reads it)
                           comment=f"raswarden:checkpoint cost={opts.checkpoint_cost_s:g} "
                                   f"restart={opts.restart_cost_s:g}" if opt_in else ""))
        node_s += n * work
    return jobs


def realized_failure_rate(sim: Simulator) -> float:
    """The seed's own hard faults a node-second (checkpoint policy ``oracle``)."""
    hard = sum(1 for p in sim.placed if p.inst.template.fails and not p.inst.template.benign)
    return hard / (sim.topo.n_nodes * sim.scenario.duration)


def expected_failure_rate(sim: Simulator) -> float:
    """The scenario's long-run hard faults a node-second (checkpoint policy ``daly``): its listed ones, and what its
    ``sample`` section draws on average (its faults a node-year, times the share of its class mix whose templates
    fail)."""
    sc = sim.scenario
    listed = sum(_failing_share(sim, f.fault, f.template) for f in sc.faults if not f.fault.startswith("benign_"))
    rate = listed / (sim.topo.n_nodes * sc.duration)
    if sc.sample is not None:
        mix = sc.sample.mix or DEFAULT_MIX
        share = sum(w * _failing_share(sim, c) for c, w in mix.items()) / sum(mix.values())
        rate += sc.sample.faults_per_node_year / (365.0 * 86400.0) * share
    return rate


def _failing_share(sim: Simulator, fault: str, template: str | None = None) -> float:
    """Whether a fault class's ``template`` fails, or (None) the share of its templates that fail (one is drawn at
    random for each sampled fault)."""
    fails = [t.fails for key, t in sim.library.items()
             if key.split("/")[0] == fault and (template is None or key.split("/")[1] == template)]
    return sum(fails) / len(fails) if fails else 0.0


def follow_advice(jobs: list[SimJob], advisor) -> None:
    """The opted-in jobs read raswarden's advice (``advisor.last``: job -> advice) at each checkpoint and start, and
    whenever it is made again (as a training loop polls its advice file: the loop calls ``read_interval``)."""
    def read(job: SimJob) -> float | None:
        advice = advisor.last.get(job.id)
        return advice.interval_s if advice is not None else None

    for job in jobs:
        if job.opt_in:
            job.follow = read


def return_repaired(sched: SimScheduler, under_repair: set[str], now: float,
                     pipeline: Pipeline | None, technician: Technician | None = None,
                     skip=lambda node: False) -> None:
    """The technician who repaired a node returns it to service (resumes it, whoever drained it) and tells
    raswarden its parts are new: the same under every policy. Nodes drained on working hardware are not
    theirs; raswarden's own playbooks (or nobody) resume those, and nodes with repair orders (``skip``) return
    through raswarden's validation. A bad repair (``technician``) returns a node still broken."""
    for n in sched.nodes.values():
        if n.drained and max(n.broken_until, n.down_until) > now:
            under_repair.add(n.name)
    for name in sorted(under_repair):
        n = sched.nodes[name]
        if skip(name):  # under repair orders: the technician's work and raswarden's validation return it, and told
            under_repair.discard(name)  # raswarden which parts are new (Technician.work): its other parts keep theirs
            continue
        if max(n.broken_until, n.down_until) <= now:
            under_repair.discard(name)
            if n.drained:
                n.drained, n.reason, n.reason_set_by = False, "", ""
                sched.log.append((now, "returned", name))
                if technician is not None and technician.botched(name):
                    technician.back_broken(sched, name, now)
            if pipeline is not None:
                pipeline.forget(name)


class Technician:
    """The site's technicians, with the share of repairs that do not fix the fault (LoopOptions.bad_repair_share).

    With repair orders (:meth:`work`): an open order is taken ``technician_s`` after it opened (or reopened after a
    failed validation), and done (the part reseated or replaced) once the node's repair is over; raswarden's
    validation then returns the node or sends it back. Without (``return_repaired``): a repaired node goes back
    to service at once, a botched one still broken (:meth:`back_broken`)."""

    def __init__(self, opts: LoopOptions, faults: Faults, seed: int):
        self.opts = opts
        self.faults = faults
        self.rng = np.random.default_rng(seed + 11)
        self.botched_repairs = 0
        self.returned_broken = 0
        self._queue: list | None = None  # the orders to work on, as last read (raswarden's playbook passes change them)
        self._ordered: set[str] | None = None  # the nodes with orders under way, as last read

    def queue_changed(self) -> None:
        """A playbook pass of raswarden's changed something: the orders may have changed (the next pass reads them
        again)."""
        self._queue = self._ordered = None

    def ordered(self, book) -> set[str]:
        """The nodes with repair orders under way (they return through raswarden's validation, not at once), read
        again after a change, as the queue is."""
        if self._ordered is None:
            self._ordered = {o.node for o in book.orders()}
        return self._ordered

    def botched(self, node: str) -> bool:
        """Whether this repair of ``node`` leaves its fault in place (drawn once per repair)."""
        bad = bool(self.rng.random() < self.opts.bad_repair_share)
        self.botched_repairs += bad
        return bad

    def back_broken(self, sched: SimScheduler, node: str, now: float) -> None:
        """A botched repair returned to service: every job placed on the node crashes until an operator drains it
        again and it is repaired again."""
        self.returned_broken += 1
        sched.break_node(node, now + self.opts.repair_s, self.opts.hang_s)
        self.faults.operator_due.append((now + self.opts.operator_response_s, node))

    def work(self, book, sched: SimScheduler, now: float, pipeline: Pipeline | None,
             scheduler_name=lambda node: node) -> bool:
        """One pass over raswarden's repair queue (daemon/operations/repairs.py ``RepairBook``); whether it changed an
        order.
        Between raswarden's passes only the technician changes the orders: the queue is read again after a pass
        that changed something (``queue_changed``) or a change of its own."""
        if self._queue is None:
            self._queue = book.orders(("open", "in_progress"))
        changed = False
        for o in self._queue:
            n = sched.nodes[scheduler_name(o.node)]
            if o.state == "open":
                since = o.history[-1]["ts"] if o.history else o.opened_at
                if now >= since + self.opts.technician_s:
                    book.start(o.id, TECHNICIAN, "taken from the queue")
                    changed = True
                continue
            if max(n.broken_until, n.down_until) > now:
                continue  # the repair is not over yet
            if self.botched(n.name):  # the fault stays: its validation fails, and it needs another repair
                sched.validation_fails[n.name] = 1
                sched.break_node(n.name, now + self.opts.repair_s, 0.0)
            else:
                sched.validation_fails.pop(n.name, None)
            book.done(o.id, TECHNICIAN, new_serial=f"sim-{o.id}-{len(o.history)}", note=o.expected)
            changed = True
            if pipeline is not None:
                pipeline.forget(o.part)
        if changed:
            self._queue = self._ordered = None
        return changed


class Faults:
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
        self.failures = sorted(((inst.failure, node_of(inst.entity), inst.template.target == "port", i)
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
                                      "job_opted_in": job.opt_in if job else None,
                                      "job_interval_h": job.checkpoint_interval_s / 3600.0 if job else None,
                                      "job_since_checkpoint_h": job.since_ckpt_s / 3600.0 if job else None}
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
            node = node_of(inst.entity)
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


def follow_the_scheduler(sim: Simulator, sched: SimScheduler) -> None:
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
