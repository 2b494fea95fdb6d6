"""Automatic GPU resets: where the vendor's catalog asks for a reset, raswarden does it before calling a technician.

NVIDIA's Xid catalog answers many codes with RESET_GPU (a GPU unusable until reset: 46, 136, 155, 167, 169, ...),
and a repair order opened for such a part expects a ``reset`` (daemon/operations/repairs.py). A technician is not
needed for that: with ``repairs.reset_command`` set, raswarden holds the drained node in its maintenance reservation
(the one validation uses), runs the command there as a batch job (``nvidia-smi --gpu-reset -i {uuids}``, or a
site's wrapper that also restarts the fabric manager) and, on exit 0, marks the orders ``repaired`` by itself: the
validation job runs next (daemon/operations/validation.py) and only a pass returns the node.

A reset is tried once per order. When it fails (the job's exit status), or the validation after it fails, the order
goes back to the queue expecting a ``reboot``, NVIDIA's next step, with the job's output as evidence; a part whose
order comes back within the repeat window is a repeat offender and gets ``replace``/``rma`` from the start, so it is
never reset in a loop. Only a node whose every active order is an accelerator's ``reset`` is reset automatically
(a node that also needs hands-on work waits for the technician, who resets it too); never in dry-run or shadow
mode, never while the circuit breaker is tripped.

Every call to the scheduler is idempotent (the reservation and the job are looked up by name), so a daemon killed
between two of them repeats nothing on its next pass.
"""

from __future__ import annotations

import logging
import re

from daemon.config import RepairsConfig
from daemon.metrics import GPU_RESETS
from daemon.operations.repairs import OrderWorker, RepairBook
from daemon.operations.validation import job_output, reservation_name, run_held, tail
from daemon.store import RepairOrderRow
from daemon.topology import Topology
from playbooks.engine import fault_point
from playbooks.guards import Guards
from playbooks.params import PLACEHOLDER, render
from playbooks.scheduler import Scheduler, SchedulerError, ValidationScheduler

log = logging.getLogger(__name__)

_SAFE = re.compile(r"^[A-Za-z0-9:._,-]*$")  # a rendered value the shell line can hold without quoting
RESET_JOB = "reset_job"  # the history entry's key: raswarden's reset of this order


def was_reset(order: RepairOrderRow) -> bool:
    """Whether raswarden has reset this order's part (once per order, whatever came of it)."""
    return any(h.get(RESET_JOB) for h in order.history)


def tried(order: RepairOrderRow) -> bool:
    """Whether raswarden has reset this order's part or found it could not (never twice)."""
    return any(RESET_JOB in h for h in order.history)


class Resetter(OrderWorker):
    """Resets the GPUs whose orders expect a reset, one pass at a time (:meth:`step`)."""

    def __init__(self, book: RepairBook, scheduler: Scheduler, cfg: RepairsConfig, topology: Topology,
                 scheduler_names: dict[str, str] | None = None, guards: Guards | None = None,
                 breaker=lambda: None, owns=lambda node: True):
        super().__init__(book, scheduler, cfg, scheduler_names, guards, breaker, owns)
        self.topology = topology

    @property
    def enabled(self) -> bool:
        return bool(self.cfg.reset_command) and isinstance(self.scheduler, ValidationScheduler) and \
            self.guards.mode == "act"

    def step(self) -> dict[str, int]:
        """Escalate orders whose reset did not clear the fault, read the resets running and start new ones; how
        many of each happened (``resets_running``: still running after this pass)."""
        out = {"resets_started": 0, "resets_passed": 0, "resets_failed": 0, "resets_running": 0}
        if not self.enabled:
            return out
        by_node = self.book.by_node(self.owns)
        for node, orders in by_node.items():
            try:
                for order in orders:
                    if order.state == "open" and order.expected == "reset" and was_reset(order):
                        self._escalate(order, "the validation after raswarden's reset failed")
                running = [o for o in orders if o.state == "in_progress" and RESET_JOB in o.history[-1]]
                if running:
                    result = self._read(node, running)
                    out[f"resets_{result or 'running'}"] += 1
                elif self._due(orders):
                    if self.breaker():
                        continue
                    self._start(node, orders)
                    out["resets_started"] += 1
                    out["resets_running"] += 1
            except SchedulerError as exc:  # the next pass tries again; what took effect is not repeated
                log.warning("reset of %s: %s", node, exc)
                out["resets_running"] += 1
        return out

    def _due(self, orders: list[RepairOrderRow]) -> bool:
        """Whether the node's orders are all open accelerator resets not tried yet."""
        return all(o.state == "open" and o.expected == "reset" and o.kind == "accelerator" and not tried(o)
                   for o in orders)

    def command(self, node: str, orders: list[RepairOrderRow]) -> str:
        """The reset command for these orders' GPUs (SchedulerError when a value could not go on a shell line).
        ``{gpus}``: each GPU's index (the digits of its slot, ``gpu3``); ``{uuids}``, ``{pci_bus_ids}``: from the
        topology's accelerators, so only where it lists every one."""
        gpus, uuids, pcis = [], [], []
        for o in orders:
            local = o.part.split("/", 1)[1]
            ids = self.topology.accelerator_ids.get(o.part, {})
            gpus.append(local.lstrip("abcdefghijklmnopqrstuvwxyz") or local)
            uuids.append(ids.get("uuid", ""))
            pcis.append(ids.get("pci_bus_id", ""))
        values = {"node": self.target(node), "gpus": ",".join(gpus),
                  "uuids": ",".join(u for u in uuids if u) if all(uuids) else "",
                  "pci_bus_ids": ",".join(p for p in pcis if p) if all(pcis) else ""}
        for key in set(PLACEHOLDER.findall(self.cfg.reset_command)):
            if not values.get(key):
                raise SchedulerError(f"repairs.reset_command needs {{{key}}}, which the topology does not give "
                                     f"for {', '.join(o.part for o in orders)}", retryable=False)
            if not _SAFE.match(values[key]):
                raise SchedulerError(f"{{{key}}} of {node} is not a plain name: {values[key]!r}", retryable=False)
        return render(self.cfg.reset_command, values)

    def _start(self, node: str, orders: list[RepairOrderRow]) -> None:
        target = self.target(node)
        reservation = reservation_name(target)
        try:
            command = self.command(node, orders)
        except SchedulerError as exc:  # a template the topology cannot fill: a technician resets it
            for o in orders:
                self.book.expect(o.id, "reset", f"no automatic reset: {exc}", extra={RESET_JOB: ""})
            raise
        name = f"raswarden-reset-{target}-{min(o.id for o in orders)}"
        job = run_held(self.scheduler, target, self.cfg.hold_s, name, command, self.cfg.reset_timeout_s,
                       job_output(self.cfg, name), "reset")
        for o in orders:
            self.book.move(o.id, "in_progress", "raswarden", f"automatic reset: job {job} ({command}) in "
                           f"reservation {reservation}",
                           extra={RESET_JOB: job, "reservation": reservation, "job_name": name}, expect="open")
            fault_point("reset", "moved")
        log.info("resetting %s on %s: job %s (%s)", ", ".join(o.part for o in orders), node, job, command)

    def _read(self, node: str, orders: list[RepairOrderRow]) -> str | None:
        last = orders[0].history[-1]
        job, reservation, name = last[RESET_JOB], last.get("reservation", ""), last.get("job_name", "")
        outcome = self.scheduler.job_outcome(job)
        if not outcome.finished:
            return None
        if outcome.state == "passed":  # the node stays in the reservation for its validation job, if any
            if not self.cfg.validation_command:  # none: the orders close at once and the node returns
                self.scheduler.release(reservation)
            for o in orders:
                self.book.move(o.id, "repaired", "raswarden", f"reset by raswarden (job {job} exit 0): "
                               "validation next", expect="in_progress")
                fault_point("reset", "repaired")
            GPU_RESETS.labels("passed").inc()
            log.info("%s: reset passed (job %s), validating next", node, job)
            return "passed"
        target = self.target(node)
        self.scheduler.drain(target, f"raswarden: reset failed (repair order {min(o.id for o in orders)})")
        self.scheduler.release(reservation)
        why = f"automatic reset {outcome.state} (job {job}, exit status {outcome.exit_code}): " + \
            tail(job_output(self.cfg, name))
        for o in orders:
            row = self.book.move(o.id, "open", "raswarden", why, evidence=why, expect="in_progress")
            self._escalate(row, "raswarden's reset failed")
        GPU_RESETS.labels("failed").inc()
        log.warning("%s: reset failed: %s", node, why)
        return "failed"

    def _escalate(self, order: RepairOrderRow, why: str) -> None:
        """The order now expects a reboot, NVIDIA's step after a reset that did not clear the fault."""
        self.book.expect(order.id, "reboot", f"{why}: NVIDIA's next step is a reboot, then support")

