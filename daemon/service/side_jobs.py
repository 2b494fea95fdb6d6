"""The service's side jobs beside the cycle: playbooks (incidents to actions, steps advanced), checkpoint advice,
alerts (and the cluster's own judgements where the alerts run), housekeeping, retraining and the watchdog.

A part of :class:`daemon.service.service.Service`: each job takes its own lock and acts only while the service
holds its lease.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from daemon import metrics
from daemon.alerting.runner import ALERT_PASS_WAIT_S
from daemon.operations.advice import JobAdvice, degraded_reason, write_files
from daemon.operations.foresight import YEAR_H
from playbooks.scheduler import SchedulerError

log = logging.getLogger("raswarden.service")


class SideJobs:
    """The jobs that run beside the cycle, each on its own interval."""

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
