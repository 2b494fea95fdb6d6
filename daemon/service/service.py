"""``raswarden run``: the daemon on a management node.

The jobs (daemon/service/jobs.py: each at most once at a time, a late run not repeated, a failure logged and counted):

* **cycle** every ``service.interval_s``: every collector reads what is new (concurrently), the batch goes
  through the same :meth:`Pipeline.tick` as replay, and the collectors' cursors are saved with the tick; every
  ``warm_state_interval_s`` the pipeline's warm state is saved too (daemon/judgement/warmstate.py);
* **playbooks**: incidents become actions and pending steps advance (daemon/operations/remediation.py);
* **alerts**: incidents become notifications and the outbox delivers (daemon/alerting);
* **housekeeping**: findings older than ``retention_days``, delivered notifications and told alerts go;
* **retrain** (optional): ``raswarden train`` on the configured traces in a child process; the new model is
  used only when it loads (a model from another build is refused);
* **watchdog**: ``WATCHDOG=1`` to systemd only while cycles keep finishing.

One active daemon per shard: every job first renews the shard's lease in the store; an instance that
cannot get it is a standby and does nothing but try again. The instance that takes over takes up the shard's
warm state (what the detectors had learned), restores the open incidents and non-healthy states from the store
(:meth:`Pipeline.restore`) and the collectors' cursors.

SIGTERM lets the job in flight finish, saves the warm state, delivers what the outbox can, releases the lease and
exits; SIGHUP reloads the config file (a bad one is refused with the key it names, and the old config stays; the
detectors keep what they learned unless the reload changed detection) and writes its answer for ``raswarden reload``
(:mod:`daemon.service.reloadanswer`), so ``systemctl reload`` returns once the new config runs or was refused.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from daemon import metrics
from daemon.operations.advice import Advisor, JobAdvice, degraded_reason, write_files
from daemon.alerting.runner import ALERT_PASS_WAIT_S, Alerting
from daemon.ingest.batch import Batch
from daemon.ingest.collectors import Collector, Outcome, build, merge_batches
from daemon.config import Config, ConfigError, load
from daemon.judgement.cooling import CoolingLoops
from daemon.operations.foresight import YEAR_H
from daemon.ingest.formats.reader import ReadContext
from daemon.service.jobs import Job, JobRunner
from daemon.store.leases import Lease, claim_lease, shard_lease
from daemon.ingest.naming import SeriesMapper
from daemon.operations.operator import repaired_nodes
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.ingest.rejects import RejectLog
from daemon.service.reloadanswer import AnswerWriter
from daemon.operations.remediation import Remediation, scheduler_from_config
from daemon.judgement.repeats import RepeatLog
from daemon.service.sdnotify import Notifier
from daemon.shards import ALERTS_LEASE, POOL, Ownership, UnwatchedShards, cycle_phase, plan_warnings, split_racks
from daemon.judgement.splitracks import SplitRacks, parents
from daemon.store import Store
from daemon.topology import Topology
from playbooks.scheduler import SchedulerError
from daemon.judgement import warmstate

log = logging.getLogger("raswarden.service")


@dataclass
class CycleReport:
    """What the last cycle did (for the status line, /healthz and the status page)."""

    ts: float = 0.0
    finished_at: float = 0.0
    samples: int = 0
    events: int = 0
    late: int = 0
    findings: int = 0
    duration_s: float = 0.0
    tick_s: float = 0.0  # of duration_s, the pipeline's tick (the rest is collection and saving)
    outcomes: dict[str, Outcome] = field(default_factory=dict)


class Service:
    """The live daemon: collectors → pipeline → playbooks and alerts, under one shard lease."""

    def __init__(self, cfg: Config, notifier: Notifier | None = None, clock=time.time):
        self.cfg = cfg
        self.clock = clock
        self.notifier = notifier or Notifier()
        self.store = Store(cfg.store_url)
        # a pool member (service.shard = "*") serves the first shard no live instance holds, once it holds one
        self.pool = sorted(cfg.shards) if cfg.service.shard == POOL else []
        self.lease = Lease(self.store, shard_lease(cfg.service.shard), ttl_s=cfg.service.lease_ttl)
        # an instance of one shard that stands by asks for it back: a pool member serving it hands it over
        self.claim = None if self.pool else Lease(self.store, claim_lease(cfg.service.shard),
                                                  ttl_s=cfg.service.lease_ttl, holder=self.lease.holder)
        # a sharded cluster's alert pipeline runs in one instance of any shard (daemon/shards.py)
        self.alert_lease = Lease(self.store, ALERTS_LEASE, ttl_s=max(cfg.service.lease_ttl,
                                                                     3 * cfg.service.alert_interval_s))
        self.active = False
        # One lock per job kind, so that alert delivery and playbook steps never wait for a collection; a
        # reload takes all three (in this order) before it swaps what the jobs use.
        self.cycle_lock = threading.RLock()
        self.playbook_lock = threading.RLock()
        self.alert_lock = threading.RLock()
        self.cycles = 0
        self._reliability_seen: tuple[dict | None, float] = (None, float("-inf"))  # order counts, when read
        self.last = CycleReport()
        self.previous_tick: float | None = None
        self.collector_errors: dict[str, RepeatLog] = {}  # per collector (set with the collectors, in _build)
        self.warm_saved_at = float("-inf")  # when the pipeline's warm state was last saved (or taken up)
        self.repairs_seen = 0  # the journal row up to which operators' "repaired" resumes were taken in
        self.jobs = JobRunner(workers=4)
        self.stop_event = threading.Event()
        self.reload_event = threading.Event()
        self.reload_answer = AnswerWriter()  # what `raswarden reload` waits for (systemctl reload)
        self.web = None
        self.started_at = clock()
        self._build(cfg)

    # -- assembly --------------------------------------------------------------------------------
    def _build(self, cfg: Config) -> None:
        """Everything that follows from the config (again on reload): built first, then swapped in at once, so
        a config that fails half-way leaves the running parts as they were."""
        topology = Topology.configured(cfg.service.topology)
        mapper = SeriesMapper(topology=topology, rejects=RejectLog())
        ownership = Ownership.of(cfg.shards.get(cfg.service.shard), topology)
        for warning in plan_warnings(cfg.shards, topology):
            log.warning("shards: %s", warning)
        ctx = ReadContext(mapper=mapper, owns_node=ownership.owns if ownership.sharded else None,
                          shard_matchers=ownership.matchers, shard_hosts=ownership.hosts(topology))
        model = None
        if cfg.service.model:
            from detectors.bundle import ModelBundle

            model = ModelBundle.load(cfg.service.model)
        collectors: list[Collector] = build(cfg.collectors, ctx)
        try:
            pipeline = Pipeline(mapper, PipelineConfig(interval_s=cfg.service.interval_s, model=model), self.store)
            scheduler = scheduler_from_config(cfg)
            remediation = Remediation(cfg, self.store, scheduler, clock=self.clock, topology=topology,
                                      ownership=ownership)
            alerting = Alerting.from_config(cfg, self.store, scheduler, topology)
        except Exception:
            for c in collectors:
                c.close()
            raise
        old_pool = getattr(self, "_pool", None)
        self.ctx, self.collectors, self.pipeline, self.ownership = ctx, collectors, pipeline, ownership
        # each collector's errors logged when they change; a collector kept by a reload keeps what it has logged
        self.collector_errors = {c.name: self.collector_errors.get(c.name) or RepeatLog(f"collector {c.name}", log)
                                 for c in collectors}
        self.remediation, self.alerting = remediation, alerting
        self.advisor = Advisor(cfg.advice)
        self._advised_under: tuple | None = None  # the collectors failing and the breaker at the last advice
        self._advice_refused = ""  # the scheduler's last refusal of the advice's snapshot (said once)
        pipeline.incidents.groups_rack = lambda rack: rack not in ownership.split_racks
        self.cooling = CoolingLoops(topology)
        self.split_racks = SplitRacks(split_racks(cfg.shards, topology), topology)
        self.unwatched = UnwatchedShards(cfg.shards, topology, grace_s=cfg.service.lease_ttl)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(collectors)), thread_name_prefix="collect")
        if old_pool is not None:
            old_pool.shutdown(wait=False)

    def activate(self) -> None:
        """Become the shard's active daemon: take up the shard's warm state, the store's incidents, states and
        cursors."""
        sv = self.cfg.service
        warmstate.load(self.store, sv.shard, self.pipeline, self.clock(), sv.warm_state_max_age_s)
        self.warm_saved_at = self.clock()
        incidents, states = self.pipeline.restore(self.store, self.ownership.owns_entity)
        _, self.repairs_seen = repaired_nodes(self.store, 0)  # earlier repairs: the features start afresh anyway
        for c in self.collectors:
            c.restore(self.store.collector_state(c.name))
        self.active = True
        log.info("active for shard %s (%s); restored %d open incidents and %d entity states",
                 self.cfg.service.shard, self.lease.holder, incidents, states)

    def _hold_lease(self) -> bool:
        if self.pool and not self.active:
            return self._take_a_shard()
        try:
            got = self.lease.acquire()
        except Exception as exc:  # the store is unreachable: not the holder until it answers again
            log.error("cannot renew the shard lease: %s", exc)
            got = False
        if got and self.pool and self._asked_back(self.cfg.service.shard):
            return self._hand_over()
        if not got and self.active:
            log.warning("lost the shard lease to %s: standing by", getattr(self.lease.current(), "holder", "?"))
            self.active = False
        elif got and not self.active:
            self.activate()
        if self.claim is not None:
            self._ask_back(standing_by=not got)
        return got

    def _ask_back(self, standing_by: bool) -> None:
        """An instance of one shard: while it stands by, it keeps a claim on its shard (a pool member serving the
        shard hands it over); once it holds the shard, the claim goes."""
        try:
            if standing_by:
                self.claim.acquire()
            elif self.claim.held():
                self.claim.release()
        except Exception as exc:  # the store again: the claim runs out by itself, the next cycle tries anew
            log.error("cannot write the claim on shard %s: %s", self.cfg.service.shard, exc)

    def _asked_back(self, shard: str) -> bool:
        """Whether the shard's own instance (not a pool member) is up and asks for it (:meth:`_ask_back`)."""
        try:
            return Lease(self.store, claim_lease(shard), ttl_s=self.cfg.service.lease_ttl,
                         holder=self.lease.holder, clock=self.clock).held_by_another()
        except Exception as exc:
            log.error("cannot read the claim on shard %s: %s", shard, exc)
            return False

    def _hand_over(self) -> bool:
        """A pool member whose shard's own instance is back: it lets go of the shard as a stop does
        (:meth:`_let_go`), waits in the pool again and takes a shard nobody holds, if there is one. The shard's
        instance takes it at its next cycle, with the cursors saved with the last tick, the warm state and the open
        incidents: nothing is read twice, repeated or lost."""
        shard = self.cfg.service.shard
        with self.playbook_lock, self.alert_lock:  # after the cycle lock, as a reload takes them
            self._let_go()
            self._serve(POOL, Lease(self.store, shard_lease(POOL), ttl_s=self.cfg.service.lease_ttl))
            self.active, self.previous_tick = False, None
        metrics.SHARD_HANDOVERS.inc()
        log.info("pool member: shard %s's own instance asked for it back; handed over", shard)
        return self._take_a_shard()

    def _let_go(self) -> None:
        """Leave the shard to another instance (a stop, a pool member's handover): the warm state saved, what the
        outbox can deliver delivered where this instance runs the alerts, the shard's and the alerts' leases
        released (unreleased, they run out within their TTL)."""
        if self.previous_tick is not None and self.cfg.service.warm_state_interval_s:
            warmstate.save(self.store, self.cfg.service.shard, self.pipeline, self.previous_tick)
        try:
            if not self.ownership.sharded or self.alert_lease.held():
                self.alerting.step(self.clock())
        except Exception:
            log.exception("final alert delivery failed")
        try:
            self.lease.release()
            if self.ownership.sharded and self.alert_lease.held():
                self.alert_lease.release()
        except Exception:
            log.exception("could not release the lease")

    def _take_a_shard(self) -> bool:
        """A pool member: hold the first shard whose lease no live instance holds, and whose own instance does not
        ask for it, and become its instance (its part of the cluster, its warm state, incidents and cursors); False
        while every shard is held."""
        for name in self.pool:
            if self._asked_back(name):
                continue
            lease = Lease(self.store, shard_lease(name), ttl_s=self.cfg.service.lease_ttl)
            try:
                got = lease.acquire()
            except Exception as exc:
                log.error("cannot try the lease of shard %s: %s", name, exc)
                return False
            if not got:
                continue
            self._serve(name, lease)
            log.info("pool member: shard %s had no live holder, taking it", name)
            self.activate()
            return True
        return False

    def _serve(self, shard: str, lease: Lease) -> None:
        """A pool member's parts rebuilt for ``shard`` (or for none, :data:`POOL`) under ``lease``."""
        cfg = dataclasses.replace(self.cfg, service=dataclasses.replace(self.cfg.service, shard=shard))
        old = self.collectors
        self._build(cfg)
        for c in old:
            c.close()
        self.cfg, self.lease = cfg, lease
        self.jobs.replace(self._cycle_job(first_now=False))  # the shard's phase from now on

    # -- jobs ------------------------------------------------------------------------------------
    def cycle(self) -> CycleReport | None:
        """Collect, tick, save cursors with the tick. None when standing by."""
        with self.cycle_lock:
            if not self._hold_lease():
                metrics.ACTIVE.set(0)
                return None
            metrics.ACTIVE.set(1)
            started = time.perf_counter()
            now = self.clock()
            outcomes: dict[str, Outcome] = {}
            batches: list[Batch] = []
            futures = {c.name: self._pool.submit(self._collect_one, c, now) for c in self.collectors}
            for name, fut in futures.items():
                batch, outcome = fut.result()
                outcomes[name] = outcome
                batches.append(batch)
            batch = self.ownership.keep(merge_batches(batches))  # a shard keeps its own nodes' telemetry
            batch, late = self._drop_late(batch)
            states = {c.name: dict(c.state) for c in self.collectors if c.state}
            repaired, self.repairs_seen = repaired_nodes(self.store, self.repairs_seen)
            for node in repaired:
                log.info("%s: an operator resumed it as repaired; the detectors forget its history", node)
                self.pipeline.forget(node)
            if self.ownership.split_racks:  # the cluster's rack incidents its nodes there are grouped under
                try:
                    self.pipeline.incidents.outside_parents = parents(self.store, self.ownership.split_racks)
                except Exception as exc:  # a store hiccup: the last ones known stay until the next cycle
                    log.error("split racks' incidents not read: %s", exc)
            ticked = time.perf_counter()
            result = self.pipeline.tick(now, batch, collector_state=states)
            tick_s = time.perf_counter() - ticked
            self.previous_tick = now
            self.cycles += 1
            every = self.cfg.service.warm_state_interval_s
            if every and now - self.warm_saved_at >= every:
                warmstate.save(self.store, self.cfg.service.shard, self.pipeline, now)
                self.warm_saved_at = now
            report = CycleReport(now, self.clock(), len(batch.samples), len(batch.events), late,
                                 len(result.findings), time.perf_counter() - started, tick_s, outcomes)
            self.last = report
            self._advise_on_change()
            self._tick_metrics(report)
            self.notifier.status(self.status_line())
            return report

    def _collect_one(self, collector: Collector, now: float) -> tuple[Batch, Outcome]:
        repeats = self.collector_errors[collector.name]
        started = time.perf_counter()
        try:
            batch, outcome = collector.collect(now)
        except Exception as exc:  # a collector bug must not stop the others or the daemon
            error = f"{type(exc).__name__}: {exc}"
            if not repeats.ongoing(error):  # the traceback once, not every tick
                log.exception("collector %s failed", collector.name)
            batch, outcome = Batch(), Outcome(errors=[error], targets_total=1)
        took = time.perf_counter() - started
        metrics.COLLECTOR_DURATION.labels(collector.name).set(took)
        metrics.COLLECTOR_SUCCESS.labels(collector.name).set(1 if outcome.ok else 0)
        if outcome.ok:
            metrics.COLLECTOR_LAST_SUCCESS.labels(collector.name).set(now)
        repeats.report(outcome.errors, now)
        return batch, outcome

    def _drop_late(self, batch: Batch) -> tuple[Batch, int]:
        """Samples and events older than the previous tick minus the allowed lateness are counted and dropped."""
        if self.previous_tick is None:
            return batch, 0
        cutoff = self.previous_tick - self.cfg.service.lateness
        late = 0
        if len(batch.samples):
            keep = batch.samples["ts"].to_numpy() > cutoff
            if not keep.all():
                late += int((~keep).sum())
                batch.samples = batch.samples[keep].reset_index(drop=True)
        if len(batch.events):
            keep = batch.events["ts"].to_numpy() > cutoff
            if not keep.all():
                late += int((~keep).sum())
                batch.events = batch.events[keep].reset_index(drop=True)
        if late:
            metrics.LATE_DROPPED.inc(late)
            log.warning("dropped %d samples/events older than %.0f s before the previous tick", late,
                        self.cfg.service.lateness)
        return batch, late

    def _tick_metrics(self, r: CycleReport) -> None:
        metrics.TICKS.inc()
        metrics.CYCLE_DURATION.observe(r.duration_s)
        metrics.TICK_DURATION.observe(r.tick_s)
        metrics.LAST_TICK.set(r.ts)
        counts: dict[str, int] = {}
        for h in self.pipeline.health.entities.values():
            counts[h.state.label] = counts.get(h.state.label, 0) + 1
        for state in ("suspect", "subhealthy", "failed", "unknown"):
            metrics.HEALTH.labels(state).set(counts.get(state, 0))
        open_by: dict[tuple[str, str], int] = {}
        for inc in self.pipeline.incidents.open.values():
            key = (inc.category, inc.severity.label)
            open_by[key] = open_by.get(key, 0) + 1
        metrics.INCIDENTS_OPEN.clear()
        for (category, severity), n in open_by.items():
            metrics.INCIDENTS_OPEN.labels(category, severity).set(n)
        scores: dict[str, float] = {}
        for h in self.pipeline.health.entities.values():
            if h.top is not None:
                scores[h.top.detector] = max(scores.get(h.top.detector, 0.0), float(h.top.score))
        for detector, score in scores.items():
            metrics.DETECTOR_MAX_SCORE.labels(detector).set(score if np.isfinite(score) else 0.0)

    def playbooks(self) -> dict[str, int] | None:
        with self.playbook_lock:
            if not self.lease.held():
                return None
            counts = self.remediation.step()
            by: dict[tuple[str, str], int] = {}
            for action in self.remediation.journal.actions():
                key = (action.playbook, action.status)
                by[key] = by.get(key, 0) + 1
            orders = self.remediation.repairs.counts()
            self._advise_on_change()
        metrics.ACTIONS.clear()
        for (playbook, status), n in by.items():
            metrics.ACTIONS.labels(playbook, status).set(n)
        for state, n in orders.items():
            metrics.REPAIR_ORDERS.labels(state).set(n)
        self._reliability_metrics(orders)
        return counts

    def _detection_trust(self) -> tuple:
        """What the advice's trust in detection depends on: the collectors failing and the playbooks' breaker."""
        return tuple(sorted(n for n, o in self.last.outcomes.items() if not o.ok)), self.remediation.journal.breaker()

    def _advise_on_change(self) -> None:
        """Advise again at once when a collector started or stopped failing or the breaker tripped or was reset
        since the last advice (the jobs must not wait for the next ``[advice] every_s`` to checkpoint safely), and
        first as soon as the daemon is active (the advice job's first run may have found it standing by)."""
        if not self.cfg.advice.enabled:
            return
        trust = self._detection_trust()
        if trust != self._advised_under:
            if self._advised_under is not None:
                log.warning("detection %s: checkpoint advice made again", "degraded" if any(trust) else "trusted")
            try:
                self.advise(trust)
            except Exception as exc:  # (the scheduler unreachable): the cycle goes on; the advice job tries again
                log.error("checkpoint advice failed: %s: %s", type(exc).__name__, exc)
                metrics.JOB_FAILURES.labels("advice").inc()
                self._advised_under = trust

    def advise(self, trust: tuple | None = None) -> dict[str, JobAdvice] | None:
        """Checkpoint-interval advice for every running opted-in job (daemon/operations/advice.py): on /metrics, in the
        API and,
        with ``[advice] directory``, a file per job. The safe interval for all while a collector fails or the
        playbooks' breaker is open, for a job on a node without telemetry. In a sharded cluster each shard advises
        the jobs whose first node it owns, from the whole cluster's journal. ``trust``: :meth:`_detection_trust`,
        when the caller has it."""
        with self.playbook_lock:
            if not self.cfg.advice.enabled or not self.lease.held():
                return None
            now = self.clock()
            try:
                state = self.remediation.engine.scheduler.snapshot()
            except SchedulerError as exc:  # the playbooks say so too; the files expire and the jobs fall back
                if str(exc) != self._advice_refused:
                    log.warning("checkpoint advice: the scheduler did not answer: %s", exc)
                self._advice_refused = str(exc)
                self._advised_under = trust or self._detection_trust()  # tried: the advice job tries again
                return None
            self._advice_refused = ""
            if self.ownership.sharded:  # a job is advised by the shard of its first node (one writer per file)
                node_of = {sched: node for node, sched in self.remediation.scheduler_names.items()}
                state = dataclasses.replace(state, jobs={j: job for j, job in state.jobs.items() if job.nodes and
                                                         self.ownership.owns(node_of.get(job.nodes[0], job.nodes[0]))})
            self._advised_under = trust = trust or self._detection_trust()
            degraded = degraded_reason(trust[1], list(trust[0]))
            before = set(self.advisor.last)
            advice = self.advisor.run(self.store, state, now, degraded, self.remediation.scheduler_names)
        metrics.CHECKPOINT_ADVICE.clear()
        for job, a in advice.items():
            metrics.CHECKPOINT_ADVICE.labels(job).set(a.interval_s)
        metrics.CHECKPOINT_ADVICE_SAFE.set(1 if degraded else 0)
        fs = self.advisor.foresight
        metrics.FORESIGHT.labels("acted").set(fs.foreseen)
        metrics.FORESIGHT.labels("warned").set(fs.warned)
        metrics.FORESIGHT.labels("unwarned").set(fs.unwarned)
        metrics.UNWARNED_RATE.labels("mean").set(fs.rate("unwarned") * YEAR_H)
        metrics.UNWARNED_RATE.labels(f"q{self.cfg.advice.quantile:g}").set(
            fs.rate("unwarned", self.cfg.advice.quantile) * YEAR_H)
        if self.cfg.advice.directory:
            try:
                write_files(self.cfg.advice.directory, advice, gone=before)
            except OSError as exc:  # (a shared filesystem gone, no permission): the API and /metrics still have it
                log.error("checkpoint advice not written to %s: %s", self.cfg.advice.directory, exc)
                metrics.ADVICE_FILE_ERRORS.inc()
        return advice

    def _reliability_metrics(self, orders: dict[str, int]) -> None:
        """The last 30 days' repair figures on /metrics: read again when the orders' counts by state change, else
        every 10 minutes (the 30 days slide), not at every playbook pass."""
        seen = self._reliability_seen
        now = time.time()
        if not sum(orders.values()) or (seen[0] == orders and now - seen[1] < 600.0):
            return
        from daemon.operations.reliability import figures

        self._reliability_seen = (dict(orders), now)
        month = figures(self.store, now - 30 * 86400.0).total
        metrics.REPAIRS_BEFORE_FAILURE.set(month.before_share if month.before_share is not None else float("nan"))
        metrics.REPAIR_TIME.set(3600.0 * month.mttr_h if month.mttr_h is not None else float("nan"))

    def alerts(self) -> dict[str, int] | None:
        """Incidents to notifications and deliveries: the shard's holder, or, in a sharded cluster, whichever
        instance holds the cluster's alert lease (one alert pipeline for the cluster: nothing told twice). The same
        instance judges the racks split between shards, the cluster's cooling loops and the shards no instance holds
        first (daemon/judgement/splitracks.py, daemon/judgement/cooling.py, daemon/shards.py)."""
        with self.alert_lock:
            if self.ownership.sharded:
                try:
                    held = self.alert_lease.acquire()
                except Exception as exc:
                    log.error("cannot renew the alert lease: %s", exc)
                    held = False
            else:
                held = self.lease.held()
            if not held:
                return None
            # the cluster's own incidents, judged where its alerts are: racks split between shards, cooling loops
            # (whose racks' incidents those are among), shards nobody watches
            for what, judge in (("split racks", self.split_racks), ("cooling loops", self.cooling),
                                ("shards' holders", self.unwatched)):
                try:
                    judge.step(self.store, self.clock())
                except Exception as exc:  # a store hiccup: the next pass judges again, the alerts go on
                    log.error("%s not judged: %s", what, exc)
            metrics.SHARDS_UNWATCHED.set(len(self.unwatched.unwatched))
            return self.alerting.step(self.clock(), wait_s=ALERT_PASS_WAIT_S)

    def housekeeping(self) -> dict[str, int]:
        """Trim what is older than the retention: findings, delivered/failed notifications, told alerts."""
        out = self.store.trim(self.clock() - self.cfg.service.retention_days * 86400)
        if any(out.values()):
            log.info("housekeeping removed %s", out)
        return out

    def retrain(self) -> bool:
        """Train a new model on the configured traces in a child process; use it when it loads."""
        from detectors.bundle import IncompatibleModel, ModelBundle

        sv = self.cfg.service
        base = Path(sv.model).parent if sv.model else Path(os.environ.get("STATE_DIRECTORY", "."))
        target = base / f"model-{int(self.clock())}"
        argv = [sys.executable, "-m", "daemon", "train", *sv.retrain_traces, "--out", str(target)]
        log.info("retraining: %s", " ".join(argv))
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            log.error("retraining failed (exit %d): %s", done.returncode, done.stderr[-500:])
            return False
        try:
            bundle = ModelBundle.load(target)
        except (IncompatibleModel, OSError, ValueError) as exc:
            log.error("the retrained model in %s is not used: %s", target, exc)
            return False
        with self.cycle_lock:
            self.pipeline.use_model(bundle)
        log.info("using the retrained model %s", target)
        return True

    def watchdog(self) -> None:
        """Pet systemd's watchdog only while cycles keep finishing (a hung daemon is restarted)."""
        limit = 3 * self.cfg.service.interval_s + 30
        if self.clock() - max(self.last.finished_at, self.started_at) <= limit:
            self.notifier.watchdog()
        else:
            log.error("no cycle finished for %.0f s: not petting the watchdog", self.clock() - self.last.finished_at)

    # -- health and status -----------------------------------------------------------------------
    def status_line(self) -> str:
        if not self.active:
            held = self.lease.current()
            return f"standby: {held.holder if held else '?'} holds shard {self.cfg.service.shard}"
        r = self.last
        up = sum(1 for o in r.outcomes.values() if o.ok)
        return (f"tick {self.cycles}: {r.samples} samples, {r.events} events, {r.findings} findings; "
                f"{len(self.pipeline.incidents.open)} open incidents; collectors {up}/{len(r.outcomes)} ok")

    def healthz(self) -> tuple[bool, dict]:
        """Ready when the store is writable and, once active, the collectors answered the last cycle."""
        problems: list[str] = []
        try:
            self.store.save_collector_state({"_healthz": {"pid": self.lease.holder}}, self.clock())
        except Exception as exc:
            problems.append(f"store not writable: {type(exc).__name__}")
        if self.active:
            for name, outcome in self.last.outcomes.items():
                if not outcome.ok:
                    problems.append(f"collector {name}: " + "; ".join(outcome.errors[:2]))
            if not self.last.finished_at:
                problems.append("no cycle finished yet")
        # what works without something the config names (a secret not there yet): told, not failed
        warnings = [f"receiver {name} is off: {why}" for name, why in self.alerting.unavailable.items()]
        if self.cfg.http.token_error:
            warnings.append(f"the API's write calls are off: {self.cfg.http.token_error}")
        return not problems, {"active": self.active, "problems": problems, "warnings": warnings,
                              "status": self.status_line()}

    # -- lifecycle -------------------------------------------------------------------------------
    def reload(self, path: str | Path | None = None) -> bool:
        """Re-read the config file; a bad one is refused (with the key it names) and the old one stays."""
        path = path or self.cfg.path
        try:
            cfg = load(path)
            configured = POOL if self.pool else self.cfg.service.shard
            if cfg.store_url != self.cfg.store_url or cfg.service.shard != configured:
                raise ConfigError(f"{path}: store.url and service.shard cannot change on reload (restart instead)")
            if self.pool:  # a pool member keeps serving the shard it took
                cfg = dataclasses.replace(cfg, service=dataclasses.replace(cfg.service, shard=self.cfg.service.shard))
        except ConfigError as exc:
            return self._reload_refused(exc)
        self.notifier.notify(RELOADING=1, MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000,
                             STATUS="reloading")
        with self.cycle_lock, self.playbook_lock, self.alert_lock:
            old_collectors, old_pipeline = self.collectors, self.pipeline
            states = {c.name: dict(c.state) for c in old_collectors}
            try:
                self._build(cfg)
            except Exception as exc:
                self.notifier.notify(READY=1, STATUS=self.status_line())  # the old config runs on
                return self._reload_refused(exc)
            for c in old_collectors:
                c.close()
            for c in self.collectors:
                c.restore(states.get(c.name) or self.store.collector_state(c.name))
            if self.active:
                warmstate.hand_over(old_pipeline, self.pipeline)  # what the detectors learned goes on
                self.pipeline.restore(self.store, self.ownership.owns_entity)
            self.cfg = cfg
            self._schedule_jobs()
        metrics.RELOADS.labels("applied").inc()
        self.notifier.notify(READY=1, STATUS=self.status_line())
        log.info("config reloaded from %s", path)
        self.reload_answer.write(applied=True)
        return True

    def _reload_refused(self, exc: Exception) -> bool:
        log.error("reload refused, keeping the running config: %s", exc)
        metrics.RELOADS.labels("refused").inc()
        self.reload_answer.write(applied=False, reason=str(exc))
        return False

    def _cycle_job(self, first_now: bool = True) -> Job:
        """The cycle, on its shard's phase of the interval (daemon/shards.py ``cycle_phase``)."""
        sv = self.cfg.service
        return Job("cycle", self.cycle, sv.interval_s, first_now=first_now,
                   phase_s=cycle_phase(self.cfg.shards, sv.shard, sv.interval_s))

    def _schedule_jobs(self) -> None:
        sv = self.cfg.service
        jobs = [self._cycle_job(), Job("playbooks", self.playbooks, sv.playbook_interval_s),
                Job("alerts", self.alerts, sv.alert_interval_s),
                Job("housekeeping", self.housekeeping, sv.housekeeping_interval_s, first_now=False)]
        if self.cfg.advice.enabled:
            jobs.append(Job("advice", self.advise, self.cfg.advice.every_s))
        if sv.retrain_interval_s:
            jobs.append(Job("retrain", self.retrain, sv.retrain_interval_s, first_now=False))
        if self.notifier.watchdog_s:
            jobs.append(Job("watchdog", self.watchdog, self.notifier.watchdog_s / 2))
        self.jobs.schedule(jobs)

    def start(self) -> None:
        """Start the HTTP server and the jobs; returns at once (see :meth:`run`)."""
        from daemon.web import WebServer

        self.started_at = self.clock()
        self.web = WebServer(self, self.cfg.http)
        self.web.start()
        self._schedule_jobs()
        self.jobs.start()
        if self.cfg.http.token_error:
            log.error("the API's write calls are off: %s", self.cfg.http.token_error)
        self.notifier.ready(f"started; listening on {self.web.address}")
        log.info("raswarden running: shard %s, %d collectors, interval %.0f s, http %s", self.cfg.service.shard,
                 len(self.collectors), self.cfg.service.interval_s, self.web.address)

    def stop(self) -> None:
        """Finish the jobs in flight, deliver what the outbox can, release the lease, close everything."""
        self.notifier.stopping("finishing the job in flight")
        self.jobs.stop(wait=True)
        if self.active:
            self._let_go()
        elif self.claim is not None and self.claim.held():
            try:  # a standby that stops asks no more (a pool member would hand the shard to nobody)
                self.claim.release()
            except Exception:
                log.exception("could not release the claim on the shard")
        for c in self.collectors:
            c.close()
        self._pool.shutdown(wait=True)
        if self.web is not None:
            self.web.stop()
        self.store.close()
        self.notifier.close()
        self.reload_answer.remove()
        log.info("raswarden stopped")

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; SIGHUP reloads."""
        signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGHUP, lambda *_: self.reload_event.set())
        self.start()
        try:
            while not self.stop_event.wait(0.5):
                if self.reload_event.is_set():
                    self.reload_event.clear()
                    self.reload()
        finally:
            self.stop()
        return 0
