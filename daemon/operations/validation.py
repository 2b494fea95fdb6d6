"""Validation before return: a repaired node goes back to the cluster's jobs only after a validation job passed on it.

Once every active repair order of a node is ``repaired`` (daemon/operations/repairs.py), raswarden holds the node in a
maintenance reservation of its own, returns it from its drain into that reservation (no one else's job can start
there), and runs ``repairs.validation_command`` as a batch job on exactly that node (``dcgmi diag -r 2``, NCCL's
``all_reduce_perf``, a burn-in: exit status 0 passes); the orders are ``validating``. On a pass the reservation is
released (the node is back in service) and the orders are ``closed``; on a fail the node is drained again, the
reservation released and the orders go back to ``open`` with the job's exit status and output as evidence.

**Active checks** (``repairs.idle_check_every_s``): the same command runs on idle nodes, each at most that often,
``repairs.idle_checks_at_once`` at a time, only within the blast-radius budget (a held node is unavailable to
the cluster's jobs) and never while the circuit breaker is tripped: the node is held in a reservation (not
drained), the job runs, a pass releases it, a failure drains it and opens a repair order for it (the telemetry saw
nothing: the check did).

Every call to the scheduler is idempotent (a reservation or a job of the same name is the one asked for), so a
daemon killed between any two of them does the rest on its next pass and repeats nothing that took effect.
"""

from __future__ import annotations

import logging
import os
import time

from daemon.config import RepairsConfig
from daemon.operations.repairs import RepairBook
from daemon.store import IdleCheckRow, RepairOrderRow
from playbooks.engine import fault_point
from playbooks.guards import Guards, over_budget
from playbooks.scheduler import IDLE, ClusterState, Scheduler, SchedulerError, ValidationScheduler

log = logging.getLogger(__name__)


def reservation_name(node: str) -> str:
    return f"raswarden-validate-{node}"


def run_held(scheduler: ValidationScheduler, node: str, hold_s: float, name: str, command: str, time_limit_s: float,
             output: str, step: str) -> str:
    """Hold ``node`` in raswarden's reservation, resume it into it (only raswarden's jobs start there) and run
    ``command`` there as the job ``name``; its id. Each call is idempotent (``step``: the fault points' name)."""
    reservation = reservation_name(node)
    scheduler.reserve(node, reservation, hold_s)
    fault_point(step, "reserved")
    scheduler.resume(node)
    fault_point(step, "resumed")
    job = scheduler.submit_validation(node, reservation, name, command, time_limit_s, output)
    fault_point(step, "submitted")
    return job


class Validator:
    """Validates the nodes whose repair orders are done, one pass at a time (:meth:`step`)."""

    def __init__(self, book: RepairBook, scheduler: Scheduler, cfg: RepairsConfig, clock=time.time,
                 scheduler_names: dict[str, str] | None = None, guards: Guards | None = None,
                 rack_of=lambda node: None, breaker=lambda: None, owns=lambda node: True):
        self.book = book
        self.scheduler = scheduler
        self.cfg = cfg
        self.clock = clock
        self.scheduler_names = scheduler_names or {}
        self._telemetry_names = {v: k for k, v in self.scheduler_names.items()}  # Slurm's name -> telemetry's
        self.guards = guards or Guards()
        self.rack_of = rack_of
        self.breaker = breaker  # the circuit breaker's reason when tripped: no new idle check then
        self.owns = owns  # whether a node (its telemetry name) is this shard's to validate and check
        self._looked_for_idle = float("-inf")

    def step(self) -> dict[str, int]:
        """Start validations of fully repaired nodes and read the ones running; how many of each happened, and how
        many are still running (``validations_running``, a pass that failed to reach the scheduler included)."""
        if not isinstance(self.scheduler, ValidationScheduler):
            return {}
        by_node = self.book.by_node(self.owns)
        out = {"validations_started": 0, "validations_passed": 0, "validations_failed": 0, "validations_running": 0}
        for node, orders in by_node.items():
            states = {o.state for o in orders}
            try:
                if states == {"repaired"}:
                    out["validations_running"] += self._start(node, orders)  # a job started runs until read
                    out["validations_started"] += 1
                elif "validating" in states and states <= {"validating", "repaired"}:
                    result = self._read(node, [o for o in orders if o.state == "validating"])
                    out[f"validations_{result or 'running'}"] += 1
            except SchedulerError as exc:  # the next pass tries again; what took effect is not repeated
                log.warning("validation of %s: %s", node, exc)
                out["validations_running"] += 1
        if self.cfg.idle_check_every_s > 0 and self.cfg.validation_command and self.guards.mode == "act":
            try:
                out.update(self._idle_checks())
            except SchedulerError as exc:
                log.warning("idle checks: %s", exc)
        return out

    # -- active checks of idle nodes -------------------------------------------------------------------------------
    def checks(self) -> list[IdleCheckRow]:
        """Every node's idle check, the one running or its last: running first, then the latest ended first."""
        return sorted(self.book.records.idle_checks(),
                      key=lambda r: (r.status != "running", -(r.checked_at or r.started_at)))

    def _idle_checks(self) -> dict[str, int]:
        now = self.clock()
        out = {"checks_started": 0, "checks_passed": 0, "checks_failed": 0}
        store = self.book.store
        running = self.book.records.idle_checks("running")
        for row in running:
            outcome = self.scheduler.job_outcome(row.job)
            if not outcome.finished:
                continue
            name = f"{row.reservation}-{row.checks}"
            if outcome.state == "passed":
                self.scheduler.release(row.reservation)
                self._save(row, status="passed", checked_at=now, result=outcome.detail)
                out["checks_passed"] += 1
                continue
            why = f"idle check {outcome.state} (job {row.job}, exit status {outcome.exit_code}): " + tail(
                job_output(self.cfg, name))
            self.scheduler.drain(row.node, f"raswarden: idle check failed ({name})")
            self.scheduler.release(row.reservation)
            order = self.book.open_for_check(self._telemetry_name(row.node), self.rack_of(row.node), name, why)
            self._save(row, status="failed", checked_at=now, result=why)
            out["checks_failed"] += 1
            log.warning("%s failed its idle check: %s (repair order %s)", row.node, why, order.id)
        # look for a node to check at most once a minute (one snapshot), while fewer than allowed are running
        if len(running) - out["checks_passed"] - out["checks_failed"] >= self.cfg.idle_checks_at_once or \
                now - self._looked_for_idle < 60.0:
            return out
        tripped = self.breaker()
        if tripped:  # the telemetry or the infrastructure is broken: take no node out to check it
            log.info("no idle check while the circuit breaker is tripped (%s)", tripped)
            return out
        self._looked_for_idle = now
        known = {r.node: r for r in self.book.records.idle_checks()}
        try:
            with store.cluster_lock("blast-radius"):  # the drains' budget: no shard drains while this takes a node
                self._start_one(self.scheduler.snapshot(), known, now, out)
        except TimeoutError as exc:
            log.info("no idle check now: %s", exc)
        return out

    def _start_one(self, state: ClusterState, known: dict[str, IdleCheckRow], now: float, out: dict) -> None:
        """Hold the first due node within the budget and start its check (one a look: the next sees it held)."""
        for node in self._due(state, known, now):
            reason = over_budget(self.guards, node, state, self.rack_of)
            if reason:
                log.info("idle check of %s waits: %s", node, reason)
                return
            row = known.get(node) or IdleCheckRow(node=node)
            reservation = f"raswarden-check-{node}"
            count = row.checks + 1
            self.scheduler.reserve(node, reservation, self.cfg.hold_s)
            job = self.scheduler.submit_validation(node, reservation, f"{reservation}-{count}",
                                                   self.cfg.validation_command, self.cfg.validation_timeout_s,
                                                   job_output(self.cfg, f"{reservation}-{count}"))
            self._save(row, checks=count, status="running", job=job, reservation=reservation, started_at=now)
            out["checks_started"] += 1
            log.info("idle check of %s: job %s", node, job)
            return

    def _due(self, state: ClusterState, known: dict[str, IdleCheckRow], now: float) -> list[str]:
        """Idle nodes (available, no job, no repair under way) whose last check is older than the interval, the
        longest unchecked first."""
        due = []
        for name, info in state.nodes.items():
            if not info.available or IDLE not in info.states or state.jobs_on(name) or \
                    not self.owns(self._telemetry_name(name)):
                continue
            row = known.get(name)
            if row is not None and (row.status == "running" or (row.checked_at or row.started_at) >
                                    now - self.cfg.idle_check_every_s):
                continue
            if self.book.active_on(self._telemetry_name(name)):
                continue
            due.append((row.checked_at if row is not None and row.checked_at else float("-inf"), name))
        return [n for _, n in sorted(due)]

    def _telemetry_name(self, scheduler_node: str) -> str:
        return self._telemetry_names.get(scheduler_node, scheduler_node)

    def _save(self, row: IdleCheckRow, **changes) -> None:
        self.book.records.save_idle_check(row.node, **changes)

    # -- one node --------------------------------------------------------------------------------------------
    def _start(self, node: str, orders: list[RepairOrderRow]) -> bool:
        """Hold the node and start its validation job; whether one runs (without a validation command the node
        returns at once)."""
        target = self.scheduler_names.get(node, node)
        reservation = reservation_name(target)
        first = min(o.id for o in orders)
        attempt = 1 + max(sum(1 for h in o.history if h.get("to") == "validating") for o in orders)
        if not self.cfg.validation_command:
            self.scheduler.resume(target)
            for o in orders:
                self.book.move(o.id, "validating", "raswarden", "no validation command configured")
                self.book.move(o.id, "closed", "raswarden", "returned without a validation job")
            return False
        name = f"{reservation}-{first}-{attempt}"
        job = run_held(self.scheduler, target, self.cfg.hold_s, name, self.cfg.validation_command,
                       self.cfg.validation_timeout_s, job_output(self.cfg, name), "validate")
        for o in orders:
            self.book.move(o.id, "validating", "raswarden",
                           f"job {job} ({self.cfg.validation_command}) in reservation {reservation}",
                           extra={"job": job, "reservation": reservation, "job_name": name})
            fault_point("validate", "moved")
        log.info("validating %s: job %s in reservation %s", node, job, reservation)
        return True

    def _read(self, node: str, orders: list[RepairOrderRow]) -> str | None:
        target = self.scheduler_names.get(node, node)
        last = next(h for h in reversed(orders[0].history) if h.get("to") == "validating")
        job, reservation, name = last.get("job"), last.get("reservation"), last.get("job_name", "")
        if job is None:  # returned without a job (no command): nothing to read
            return None
        outcome = self.scheduler.job_outcome(job)
        if not outcome.finished:
            return None
        if outcome.state == "passed":
            self.scheduler.release(reservation)
            fault_point("validate", "released")
            for o in orders:
                self.book.move(o.id, "closed", "raswarden", f"validation passed (job {job}): back in service")
            log.info("%s passed validation (job %s): back in service", node, job)
            return "passed"
        output = job_output(self.cfg, name)
        self.scheduler.drain(target, f"raswarden: validation failed (repair order {min(o.id for o in orders)})")
        self.scheduler.release(reservation)
        why = f"validation {outcome.state} (job {job}, exit status {outcome.exit_code}): {tail(output)}"
        for o in orders:
            self.book.move(o.id, "open", "raswarden", why, evidence=why)
        log.warning("%s failed validation: %s", node, why)
        return "failed"


def job_output(cfg: RepairsConfig, job_name: str) -> str:
    """Where one of raswarden's jobs on a node (a validation, a check, a reset) writes its output, as the node sees
    it."""
    return os.path.join(cfg.output_dir, f"{job_name}.out")


def tail(path: str, lines: int = 5) -> str:
    """The last lines of a job's output, or where it is when this host cannot read it."""
    try:
        with open(path, errors="replace") as fh:
            text = " | ".join(line.strip() for line in fh.read().splitlines()[-lines:] if line.strip())
        return text or f"no output in {path}"
    except OSError:
        return f"output in {path} on the node"
