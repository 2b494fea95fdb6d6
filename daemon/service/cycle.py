"""The cycle job: every collector reads what is new (concurrently), late data is counted and dropped, the batch goes
through :meth:`Pipeline.tick` as in replay, the collectors' cursors are saved with the tick, and the warm state every
``warm_state_interval_s``.

A part of :class:`daemon.service.service.Service`: it reads the service's collectors, pipeline, ownership and store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from daemon import metrics
from daemon.ingest.batch import Batch
from daemon.ingest.collectors import Collector, Outcome, merge_batches
from daemon.judgement import warmstate
from daemon.judgement.splitracks import parents
from daemon.operations.operator import repaired_nodes

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


class CycleJob:
    """The service's cycle: collect, tick, save."""

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
