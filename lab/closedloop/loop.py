"""One closed-loop run: the simulator, raswarden's pipeline and playbooks and a simulated Slurm, tick by tick."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np

from daemon.operations.advice import Advisor
from daemon.config import AdviceConfig, Config
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.ingest.rejects import RejectLog
from daemon.operations.remediation import Remediation
from daemon.store import Store
from daemon.ingest.timeorder import tick_index
from daemon.topology import Topology
from lab.closedloop.options import POLICIES, LoopOptions
from lab.closedloop.outcome import Actions, LoopResult, repair_figures, score
from lab.closedloop.world import (Faults, Technician, follow_advice, follow_the_scheduler, plan_jobs,
                                  return_repaired)
from lab.sim.cluster import SimScheduler
from lab.sim.batches import chunk_to_batch
from lab.sim.simulator import SimChunk, Simulator

def _set_pace(sim: Simulator, sched: SimScheduler, chunk: SimChunk, begin: int, end: int,
              speeds: np.ndarray) -> np.ndarray:
    """Each node's pace over the world's step ``chunk.ts[begin:end]`` (its slowest GPU's mean speed: a synchronous
    job runs at it), set on the scheduler's nodes where it changed; returns it."""
    if chunk.gpu_speed is None:
        return speeds
    per_step = chunk.gpu_speed[:, begin:end].mean(axis=1)
    pace = per_step.reshape(len(sim.topo.nodes), sim.topo.gpus_per_node).min(axis=1)
    for i in np.flatnonzero(pace != speeds):
        sched.nodes[sim.topo.nodes[i]].speed = float(pace[i])
    return pace


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
                        PipelineConfig(interval_s=opts.interval_s * opts.ticks_every(),
                                       model=model if policy == "full" else None, rules_only=policy == "reactive"),
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
    world = Faults(sim, opts)
    sched = SimScheduler(list(sim.topo.nodes), sim.topo.gpus_per_node)
    jobs = plan_jobs(sim, opts)
    advisor = None
    if opts.checkpoint_policy == "advised":
        if policy == "none":
            raise ValueError("checkpoint policy 'advised' needs raswarden (policy reactive or full)")
        advisor = Advisor(AdviceConfig(cost_s=opts.checkpoint_cost_s, restart_s=opts.restart_cost_s))
        follow_advice(jobs, advisor)
    for job in jobs:
        sched.submit(job)
    sched.step(sc.start)
    follow_the_scheduler(sim, sched)
    tmp = tempfile.TemporaryDirectory(prefix="raswarden-loop-") if workdir is None else None
    work = Path(tmp.name) if tmp else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    store = pipeline = remediation = None
    if policy != "none":
        store, pipeline = _raswarden(sim, policy, opts, model, work)
    under_repair: set[str] = set()  # drained nodes out of service for a repair
    technician = Technician(opts, world, sc.seed)
    orders = opts.repair_orders and policy != "none"  # the technician works from raswarden's repair orders
    did = Actions()
    ticks = 0
    steps = max(1, int(round(opts.interval_s / sc.resolution)))
    every = opts.ticks_every()
    tick_s = opts.interval_s * every
    clock = [sc.start]
    advised_at = -math.inf
    try:
        speeds = np.ones(len(sim.topo.nodes))
        # One chunk a raswarden tick: the world moves through it a step at a time, then raswarden reads it all.
        for chunk in sim.chunks(chunk_steps=steps * every):
            for begin in range(0, len(chunk.ts), steps):
                end = min(begin + steps, len(chunk.ts))
                now = float(chunk.ts[end - 1])
                speeds = _set_pace(sim, sched, chunk, begin, end, speeds)
                world.fail_until(sched, now)
                world.operators_until(sched, now)
                worked = orders and remediation is not None and technician.work(remediation.repairs, sched, now,
                                                                                pipeline)
                return_repaired(sched, under_repair, now, pipeline, technician,
                                skip=technician.ordered(remediation.repairs).__contains__ if orders and
                                remediation is not None else lambda node: False)
                sched.step(now)
                clock[0] = now
                news = False  # raswarden's tick changed an incident
                if pipeline is not None and end == len(chunk.ts):
                    tick_now = float(tick_index(np.array([now]), tick_s)[0] * tick_s)
                    news = bool(pipeline.tick(tick_now, chunk_to_batch(sim, chunk, as_table=True)).incidents)
                    if remediation is None:
                        cfg = Config(playbook_dirs=list(playbook_dirs or []), guards=opts.guards)
                        # With repair orders the technician works from them and raswarden's validation returns the
                        # nodes; without, the technician returns the nodes it repaired and raswarden's recovery
                        # playbook the others.
                        remediation = Remediation.from_config(
                            cfg, store, sched, clock=lambda: clock[0], repair_orders=orders,
                            act_on=("failed",) if policy == "reactive" else ("subhealthy", "failed", "unknown"))
                # The jobs' advice is made again at each tick that changed an incident, else every advice.every_s.
                if advisor is not None and end == len(chunk.ts) and (
                        news or now >= advised_at + advisor.settings.every_s):
                    advisor.run(store, sched.snapshot(), now)
                    advised_at = now
                    for job_id in advisor.last:  # they poll their advice: the next step checkpoints if it is due
                        sched.jobs[job_id].read_interval()
                # The playbooks step with the world (a checkpoint, its wait, the drain), each step that can move
                # them: an incident changed, the technician changed an order, or the last pass left work under way
                # (the first pass looks at everything).
                if remediation is not None and (news or worked or not remediation.settled):
                    moved = remediation.step()
                    if any(v for k, v in moved.items() if k != "validations_running"):
                        technician.queue_changed()
                did.read(sched)
                world.repair_ahead(sched, now)
                ticks += 1
        incidents = {row.id: row for row in store.incidents()} if store is not None else {}
        repair_rows = remediation.repairs.orders(None) if orders and remediation is not None else []
    finally:
        if store is not None:
            store.close()
        if tmp is not None:
            tmp.cleanup()
    result = score(sim, policy, sched, world, did, faults, incidents, ticks, time.perf_counter() - started)
    result.repairs = repair_figures(repair_rows, technician, sched, sc.start + sc.duration) if opts.repair_orders \
        or opts.bad_repair_share else {}
    return result
