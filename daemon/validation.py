"""Validation before return: a repaired node goes back to the cluster's jobs only after a validation job passed on it.

Once every active repair order of a node is ``repaired`` (daemon/repairs.py), raswarden holds the node in a
maintenance reservation of its own, returns it from its drain into that reservation (no one else's job can start
there), and runs ``repairs.validation_command`` as a batch job on exactly that node (``dcgmi diag -r 2``, NCCL's
``all_reduce_perf``, a burn-in: exit status 0 passes); the orders are ``validating``. On a pass the reservation is
released (the node is back in service) and the orders are ``closed``; on a fail the node is drained again, the
reservation released and the orders go back to ``open`` with the job's exit status and output as evidence.

Every call to the scheduler is idempotent (a reservation or a job of the same name is the one asked for), so a
daemon killed between any two of them does the rest on its next pass and repeats nothing that took effect.
"""

from __future__ import annotations

import logging
import os
import time

from daemon.config import RepairsConfig
from daemon.repairs import RepairBook
from daemon.store import RepairOrderRow
from playbooks.scheduler import Scheduler, SchedulerError, ValidationScheduler

log = logging.getLogger(__name__)


def reservation_name(node: str) -> str:
    return f"raswarden-validate-{node}"


class Validator:
    """Validates the nodes whose repair orders are done, one pass at a time (:meth:`step`)."""

    def __init__(self, book: RepairBook, scheduler: Scheduler, cfg: RepairsConfig, clock=time.time,
                 scheduler_names: dict[str, str] | None = None):
        self.book = book
        self.scheduler = scheduler
        self.cfg = cfg
        self.clock = clock
        self.scheduler_names = scheduler_names or {}

    def step(self) -> dict[str, int]:
        """Start validations of fully repaired nodes and read the ones running; how many of each happened."""
        if not isinstance(self.scheduler, ValidationScheduler):
            return {}
        by_node: dict[str, list[RepairOrderRow]] = {}
        for order in self.book.orders():
            by_node.setdefault(order.node, []).append(order)
        out = {"started": 0, "passed": 0, "failed": 0}
        for node, orders in by_node.items():
            states = {o.state for o in orders}
            try:
                if states == {"repaired"}:
                    self._start(node, orders)
                    out["started"] += 1
                elif "validating" in states and states <= {"validating", "repaired"}:
                    result = self._read(node, [o for o in orders if o.state == "validating"])
                    if result:
                        out[result] += 1
            except SchedulerError as exc:  # the next pass tries again; what took effect is not repeated
                log.warning("validation of %s: %s", node, exc)
        return out

    # -- one node --------------------------------------------------------------------------------------------
    def _start(self, node: str, orders: list[RepairOrderRow]) -> None:
        target = self.scheduler_names.get(node, node)
        reservation = reservation_name(target)
        first = min(o.id for o in orders)
        attempt = 1 + max(sum(1 for h in o.history if h.get("to") == "validating") for o in orders)
        if not self.cfg.validation_command:
            self.scheduler.resume(target)
            for o in orders:
                self.book.move(o.id, "validating", "raswarden", "no validation command configured")
                self.book.move(o.id, "closed", "raswarden", "returned without a validation job")
            return
        name = f"{reservation}-{first}-{attempt}"
        self.scheduler.reserve(target, reservation, self.cfg.hold_s)
        self.scheduler.resume(target)  # out of its drain into the reservation: only raswarden's job starts there
        job = self.scheduler.submit_validation(target, reservation, name, self.cfg.validation_command,
                                               self.cfg.validation_timeout_s,
                                               os.path.join(self.cfg.output_dir, f"{name}.out"))
        for o in orders:
            self.book.move(o.id, "validating", "raswarden",
                           f"job {job} ({self.cfg.validation_command}) in reservation {reservation}",
                           extra={"job": job, "reservation": reservation, "job_name": name})
        log.info("validating %s: job %s in reservation %s", node, job, reservation)

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
            for o in orders:
                self.book.move(o.id, "closed", "raswarden", f"validation passed (job {job}): back in service")
            log.info("%s passed validation (job %s): back in service", node, job)
            return "passed"
        output = os.path.join(self.cfg.output_dir, f"{name}.out")
        self.scheduler.drain(target, f"raswarden: validation failed (repair order {min(o.id for o in orders)})")
        self.scheduler.release(reservation)
        why = f"validation {outcome.state} (job {job}, exit status {outcome.exit_code}): {_tail(output)}"
        for o in orders:
            self.book.move(o.id, "open", "raswarden", why, evidence=why)
        log.warning("%s failed validation: %s", node, why)
        return "failed"


def _tail(path: str, lines: int = 5) -> str:
    """The last lines of a job's output, or where it is when this host cannot read it."""
    try:
        with open(path, errors="replace") as fh:
            text = " | ".join(line.strip() for line in fh.read().splitlines()[-lines:] if line.strip())
        return text or f"no output in {path}"
    except OSError:
        return f"output in {path} on the node"
