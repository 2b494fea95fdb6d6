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

:class:`Service` is assembled here (its parts built from the config, again on reload), with its lifecycle, health and
jobs' schedule; its concerns are parts of their own: holding a shard (``holding.py``), the cycle (``cycle.py``) and
the side jobs (``side_jobs.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from daemon import metrics
from daemon.alerting.runner import Alerting
from daemon.config import Config, ConfigError, load
from daemon.ingest.collectors import Collector, build
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.ingest.rejects import RejectLog
from daemon.judgement import warmstate
from daemon.judgement.cooling import CoolingLoops
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.judgement.repeats import RepeatLog
from daemon.judgement.splitracks import SplitRacks
from daemon.operations.advice import Advisor
from daemon.operations.remediation import Remediation, scheduler_from_config
from daemon.service.cycle import CycleJob, CycleReport
from daemon.service.holding import ShardHolding
from daemon.service.jobs import Job, JobRunner
from daemon.service.reloadanswer import AnswerWriter
from daemon.service.sdnotify import Notifier
from daemon.service.side_jobs import SideJobs
from daemon.shards import ALERTS_LEASE, POOL, Ownership, UnwatchedShards, cycle_phase, plan_warnings, split_racks
from daemon.store import Store
from daemon.store.leases import Lease, claim_lease, shard_lease
from daemon.topology import Topology

log = logging.getLogger("raswarden.service")


class Service(ShardHolding, CycleJob, SideJobs):
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
            remediation = Remediation.from_config(cfg, self.store, scheduler, clock=self.clock, topology=topology,
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
