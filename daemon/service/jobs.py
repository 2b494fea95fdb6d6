"""Periodic jobs as the daemon runs them, for the service and for the commands that keep going.

APScheduler 3 runs each job at most once at a time (``max_instances=1``) and does not repeat a late run
(``coalesce``); a job that raises is logged and counted (``raswarden_job_failures_total``), and the others go on.
The service runs its cycle, playbooks, alerts, housekeeping, retraining and watchdog here; ``raswarden alerts flush
--follow`` and ``raswarden playbook run --follow`` run their one job here too, under the shard's lease
(:func:`leased`), so that a command and a daemon never act for one shard at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from daemon import metrics
from daemon.store import STORE_TROUBLE, store_cause
from daemon.store.leases import Lease
from playbooks.stopping import Stopped
from playbooks.stopping import watching as stopping_watch

log = logging.getLogger("raswarden.jobs")


@dataclass(frozen=True)
class Job:
    """A named function run every ``every_s`` seconds; the first run now, or one interval after the start."""

    name: str
    func: Callable[[], object]
    every_s: float
    first_now: bool = True
    #: when set, the runs (after a first one at once) fall on the wall clock's times t with t = phase_s (mod every_s):
    #: instances that share a server (the shards' cycles querying one Prometheus) take turns instead of asking at once
    phase_s: float | None = None


def next_on_phase(now: float, every_s: float, phase_s: float) -> float:
    """The first time at or after ``now`` that is ``phase_s`` past a multiple of ``every_s`` (Unix seconds)."""
    return phase_s + every_s * math.ceil((now - phase_s) / every_s)


STORE_REMIND_S = 600.0
"""A job's store failure is logged when it first comes, then again every ten minutes while it lasts."""
STORE_CAUSES_KEPT = 256
"""Store failures remembered (job and cause) for their reminders: a cause's text may differ from run to run (a row id,
a path), and a daemon that runs for months must not keep every one; past this many the longest unsaid are dropped."""
_store_said: dict[tuple[str, str], tuple[float, int]] = {}  # (job, cause) -> (last logged, runs since)


def _store_failure(name: str, cause: str) -> None:
    now = time.monotonic()
    said, since = _store_said.get((name, cause), (-math.inf, 0))
    if now - said < STORE_REMIND_S:
        _store_said[(name, cause)] = (said, since + 1)
        return
    again = f" ({since} failed runs since it was last said)" if since else ""
    log.error("job %s failed: the store: %s%s", name, cause, again)
    _store_said[(name, cause)] = (now, 0)
    if len(_store_said) > STORE_CAUSES_KEPT:
        for key in sorted(_store_said, key=lambda k: _store_said[k][0])[:len(_store_said) - STORE_CAUSES_KEPT]:
            del _store_said[key]


def guarded(name: str, func: Callable[[], object], stopping: threading.Event | None = None,
            in_flight: dict[str, float] | None = None) -> Callable[[], None]:
    """``func`` as a job: an exception is logged and counted, never raised into the scheduler. Its long waits give
    up early once ``stopping`` is set (playbooks/stopping.py); ``in_flight`` holds its start while it runs."""
    def run() -> None:
        if in_flight is not None:
            in_flight[name] = time.monotonic()
        try:
            with stopping_watch(stopping) if stopping is not None else nullcontext():
                func()
        except Stopped as exc:  # a wait given up for the stop: what it left is taken up at the next start
            log.info("job %s stopped: %s", name, exc)
        except STORE_TROUBLE as exc:  # the store (a full disk, a server gone): one line, not every run's traceback
            metrics.JOB_FAILURES.labels(name).inc()
            _store_failure(name, store_cause(exc))
        except Exception:  # a job's failure is logged and counted; the daemon goes on
            metrics.JOB_FAILURES.labels(name).inc()
            log.exception("job %s failed", name)
        finally:
            if in_flight is not None:
                in_flight.pop(name, None)
    return run


def leased(lease: Lease, func: Callable[[], object],
           standby: Callable[[str], None] | None = None) -> Callable[[], object]:
    """``func`` run only while this instance holds (or can take) ``lease``; otherwise ``standby`` is told who
    holds it and nothing runs."""
    def run() -> object:
        if lease.acquire():
            return func()
        if standby is not None:
            held = lease.current()
            standby(held.holder if held else "?")
        return None
    return run


class JobRunner:
    """Periodic jobs on a background APScheduler with ``workers`` threads."""

    def __init__(self, workers: int = 4):
        self.workers = workers
        self.scheduler: BackgroundScheduler | None = None
        self.jobs: list[Job] = []
        #: set by :meth:`stop`: the jobs in flight give up their long waits (playbooks/stopping.py)
        self.stopping = threading.Event()
        self._in_flight: dict[str, float] = {}  # job name -> when its run began (monotonic)

    def schedule(self, jobs: list[Job]) -> None:
        """Replace the jobs (at once if running: a reload's new intervals take effect now)."""
        self.jobs = list(jobs)
        if self.scheduler is None:
            return
        for job in self.scheduler.get_jobs():
            job.remove()
        for job in self.jobs:
            self._add(job)

    def replace(self, job: Job) -> None:
        """Replace the job of ``job``'s name alone (e.g. the cycle's phase, once a pool member serves a shard)."""
        self.jobs = [j for j in self.jobs if j.name != job.name] + [job]
        if self.scheduler is None:
            return
        for scheduled in self.scheduler.get_jobs():
            if scheduled.name == job.name:
                scheduled.remove()
        self._add(job)

    def _add(self, job: Job) -> None:
        grace = max(1, int(job.every_s))
        now = dt.datetime.now(dt.UTC)
        # APScheduler takes next_run_time=None as "paused": a job not run at once gets none, not None
        first = {"next_run_time": now} if job.first_now else {}
        if job.phase_s is not None:
            # on its phase from the next such time on (an interval trigger's runs follow its start_date); the first
            # run at once, when asked for, on its own (the job's function serializes the two if need be)
            first = {"start_date": dt.datetime.fromtimestamp(
                next_on_phase(now.timestamp(), job.every_s, job.phase_s), dt.UTC)}
            if job.first_now:
                self.scheduler.add_job(self._guarded(job), "date", run_date=now, id=f"{job.name}:first",
                                       name=job.name, misfire_grace_time=grace)
        self.scheduler.add_job(self._guarded(job), "interval", seconds=job.every_s, id=job.name,
                               name=job.name, max_instances=1, coalesce=True, misfire_grace_time=grace, **first)

    def _guarded(self, job: Job) -> Callable[[], None]:
        return guarded(job.name, job.func, self.stopping, self._in_flight)

    def start(self) -> None:
        self.stopping.clear()
        self.scheduler = BackgroundScheduler(executors={"default": JobExecutor(self.workers)}, timezone="UTC")
        self.schedule(self.jobs)
        self.scheduler.start()

    def stop(self, wait: bool = True) -> None:
        """Stop scheduling; with ``wait``, the jobs in flight finish first (told to stop: their waits on Slurm or
        on another raswarden's lock give up within seconds, and what they leave undone is taken up at the next
        start)."""
        if self.scheduler is None:
            return
        self.stopping.set()
        began = time.monotonic()
        running = dict(self._in_flight)
        if wait and running:
            log.info("stopping: waiting for %s", ", ".join(
                f"job {name} (running {began - at:.1f} s)" for name, at in sorted(running.items())))
        self.scheduler.shutdown(wait=wait)
        self.scheduler = None
        if wait and running:
            took = time.monotonic() - began
            # slow: a wait that does not ask playbooks.stopping (a hung database?) held the stop
            log.log(logging.WARNING if took > 10.0 else logging.INFO, "stopped: the jobs in flight ended in %.1f s",
                    took)

    def run_until_stopped(self, stop: threading.Event | None = None) -> None:
        """Start, run until SIGTERM or SIGINT (or ``stop`` is set), then stop after the jobs in flight."""
        stop = stop or threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
        self.start()
        try:
            # Woken twice a second, not only by the event: the kernel may hand SIGTERM to any thread (a job's, in a
            # Slurm call), and Python runs the handler only when the main thread runs; a bare wait() would sleep
            # through it, the jobs going on until SIGKILL.
            while not stop.wait(0.5):
                pass
        finally:
            self.stop(wait=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
