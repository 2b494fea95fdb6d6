"""Automatic reboots: where the vendor's catalog asks for a reboot, raswarden has the scheduler reboot the node.

NVIDIA's Xid catalog answers some codes with RESTART_BM (a bare-metal reboot: Xid 79's GPU fallen off the bus, 119
and 120's GSP errors, ...), and a reset that did not clear a fault is followed by a reboot (daemon/operations/
resets.py): the repair order expects a ``reboot``. A technician is not needed for that. With ``repairs.reboot`` on,
raswarden holds the drained node in its maintenance reservation (the one validation uses: if the scheduler returns
the node to service by itself, no one else's job starts there), asks the scheduler to reboot it (Slurm:
``scontrol reboot``, run by slurm.conf's ``RebootProgram`` once the node is idle; a drained node stays drained),
and once the node is back with a boot time after the request, marks the orders ``repaired``: the validation job
runs next (daemon/operations/validation.py) and only a pass returns the node.

A reboot is tried once per order. A node that does not come back within ``repairs.reboot_timeout_s`` (or that
Slurm gives up on: "reboot timed out"), or that comes back without having rebooted, is drained again and its orders
go to the technicians expecting an ``inspect`` (NVIDIA's step after a reboot: contact support), as do orders whose
validation after the reboot failed. Only a node whose every active order expects a ``reboot`` or a ``reset`` (a
reboot resets its GPUs too) and at least one a reboot is rebooted (hands-on work waits for the technician); never
in dry-run or shadow mode, never while the circuit breaker is tripped, never while a job still runs there.

The orders are moved before the scheduler is asked, and the request is asked again while the node is not flagged
REBOOT and its boot time is older than the request (not while the scheduler shows none), so a daemon killed between
the two asks once and a node that has just rebooted is never asked twice.
"""

from __future__ import annotations

import logging
import time

from daemon.config import RepairsConfig
from daemon.metrics import NODE_REBOOTS
from daemon.operations.repairs import OrderWorker, RepairBook
from daemon.operations.validation import reservation_name
from daemon.store import RepairOrderRow
from playbooks.engine import fault_point
from playbooks.guards import REASON_PREFIX, Guards
from playbooks.scheduler import DOWN, DRAIN, REBOOT, NodeInfo, RebootScheduler, Scheduler, SchedulerError, \
    ValidationScheduler

log = logging.getLogger(__name__)

REBOOT_AT = "reboot_at"  # the history entry's key: when raswarden asked the scheduler to reboot this order's node
REBOOTED = "rebooted_at"  # ... and when the node booted again for it
BOOT_SLACK_S = 1.0  # a scheduler's boot time is whole seconds (Slurm's): a boot this close before the request counts


def tried(order: RepairOrderRow) -> bool:
    """Whether raswarden has asked for a reboot for this order, or found it could not (never twice)."""
    return any(REBOOT_AT in h for h in order.history)


def was_rebooted(order: RepairOrderRow) -> bool:
    """Whether the order's node has booted again after raswarden's reboot for it."""
    return any(REBOOTED in h for h in order.history)


class Rebooter(OrderWorker):
    """Reboots the nodes whose orders expect a reboot, one pass at a time (:meth:`step`)."""

    def __init__(self, book: RepairBook, scheduler: Scheduler, cfg: RepairsConfig,
                 scheduler_names: dict[str, str] | None = None, guards: Guards | None = None,
                 breaker=lambda: None, owns=lambda node: True, clock=time.time):
        super().__init__(book, scheduler, cfg, scheduler_names, guards, breaker, owns)
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return self.cfg.reboot and isinstance(self.scheduler, RebootScheduler) and \
            isinstance(self.scheduler, ValidationScheduler) and self.guards.mode == "act"

    def step(self) -> dict[str, int]:
        """Send on orders whose reboot did not clear the fault, read the reboots under way and start new ones; how
        many of each happened (``reboots_running``: still under way after this pass)."""
        out = {"reboots_started": 0, "reboots_passed": 0, "reboots_failed": 0, "reboots_running": 0}
        if not self.enabled:
            return out
        by_node = self.book.by_node(self.owns)
        state = None
        for node, orders in by_node.items():
            try:
                for order in orders:
                    if order.state == "open" and order.expected in ("reboot", "reset") and was_rebooted(order):
                        self._escalate(order, "the validation after raswarden's reboot failed")
                running = [o for o in orders if o.state == "in_progress" and REBOOT_AT in o.history[-1]]
                if not running and not self._due(orders):
                    continue
                state = state or self.scheduler.snapshot()
                info = state.nodes.get(self.target(node))
                if running:
                    result = self._read(node, running, info)
                    out[f"reboots_{result or 'running'}"] += 1
                elif self._ready(node, info, state) and not self.breaker() and self._start(node, orders):
                    out["reboots_started"] += 1
                    out["reboots_running"] += 1
            except SchedulerError as exc:  # the next pass tries again; what took effect is not repeated
                log.warning("reboot of %s: %s", node, exc)
                out["reboots_running"] += 1
        return out

    @staticmethod
    def _due(orders: list[RepairOrderRow]) -> bool:
        """Whether the node's orders are all open reboots or resets not rebooted for yet, one at least a reboot."""
        return any(o.expected == "reboot" for o in orders) and all(
            o.state == "open" and o.expected in ("reboot", "reset") and not tried(o) for o in orders)

    def _ready(self, node: str, info: NodeInfo | None, state) -> bool:
        """Whether the node is raswarden's drained node with no job left on it (a job still running waits)."""
        if info is None or DRAIN not in info.states or not info.reason.startswith(REASON_PREFIX):
            return False  # returned, or drained by someone else since: theirs
        return not state.jobs_on(info.name)

    def _start(self, node: str, orders: list[RepairOrderRow]) -> bool:
        """Hold the node, move its orders, ask for the reboot; whether it is under way."""
        target = self.target(node)
        reservation = reservation_name(target)
        can = getattr(self.scheduler, "can_reboot", None)  # a cluster of several schedulers: not every part can
        if can is not None and not can(target):
            for o in orders:
                self.book.expect(o.id, "reboot", f"no automatic reboot: {target}'s scheduler cannot reboot it",
                                 extra={REBOOT_AT: None})
            return False
        self.scheduler.reserve(target, reservation, self.cfg.hold_s)
        fault_point("reboot", "reserved")
        at = self.clock()
        for o in orders:
            self.book.move(o.id, "in_progress", "raswarden", f"automatic reboot of {target} asked of the scheduler "
                           f"(held in reservation {reservation})", extra={REBOOT_AT: at, "reservation": reservation},
                           expect="open")
            fault_point("reboot", "moved")
        if not self._ask(target, orders):
            return False
        fault_point("reboot", "asked")
        log.info("rebooting %s for %s", target, ", ".join(o.part for o in orders))
        return True

    def _ask(self, target: str, orders: list[RepairOrderRow]) -> bool:
        """Ask the scheduler to reboot; whether it took the request. One that refuses for good (Slurm without a
        RebootProgram) leaves the reboot to a technician at once."""
        try:
            self.scheduler.reboot(target)
            return True
        except SchedulerError as exc:
            if exc.retryable:
                raise
            self.scheduler.release(orders[0].history[-1].get("reservation", reservation_name(target)))
            for o in orders:
                why = f"no automatic reboot: {exc}"
                self.book.move(o.id, "open", "raswarden", why, evidence=why, expect="in_progress")
                self.book.expect(o.id, "reboot", why)
            NODE_REBOOTS.labels("failed").inc()
            log.warning("%s: no automatic reboot: %s", target, exc)
            return False

    def _read(self, node: str, orders: list[RepairOrderRow], info: NodeInfo | None) -> str | None:
        last = orders[0].history[-1]
        at, reservation = float(last[REBOOT_AT]), last.get("reservation", "")
        target = self.target(node)
        booted = info is not None and info.boot_time is not None and info.boot_time >= at - BOOT_SLACK_S
        if info is not None and REBOOT not in info.states and DOWN not in info.states and booted:
            for o in orders:
                self.book.move(o.id, "repaired", "raswarden", f"rebooted by raswarden (booted "
                               f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(info.boot_time))}): validation "
                               "next", expect="in_progress", extra={REBOOTED: info.boot_time})
                fault_point("reboot", "repaired")
            NODE_REBOOTS.labels("passed").inc()
            log.info("%s: rebooted, validating next", target)
            return "passed"
        why = self._failure(info, at, booted)
        if why is None:
            # not asked yet (a restart between the move and the request): asked again, but only on a boot time known
            # to be older than the request (Slurm shows none for a moment as a rebooted node registers), or where the
            # scheduler keeps the request itself and has none (Kubernetes) with no boot since it
            before = info is not None and ((info.boot_time is not None and info.boot_time < at - BOOT_SLACK_S) or (
                info.reboot_asked is False and info.boot_time is None))
            if before and REBOOT not in info.states and not self._ask(target, orders):
                return "failed"
            return None
        self.scheduler.drain(target, f"raswarden: reboot failed (repair order {min(o.id for o in orders)})")
        self.scheduler.release(reservation)
        for o in orders:
            row = self.book.move(o.id, "open", "raswarden", why, evidence=why, expect="in_progress")
            self._escalate(row, "raswarden's reboot did not clear it")
        NODE_REBOOTS.labels("failed").inc()
        log.warning("%s: reboot failed: %s", target, why)
        return "failed"

    def _failure(self, info: NodeInfo | None, at: float, booted: bool) -> str | None:
        """Why the reboot asked at ``at`` failed, or None while it may still come."""
        waited = self.clock() - at
        if info is None:
            return f"automatic reboot: the scheduler no longer knows the node ({waited:.0f} s after the request)"
        if "reboot timed out" in info.reason.lower():
            return f"automatic reboot timed out: the node did not come back ({info.reason})"
        if DRAIN not in info.states and REBOOT not in info.states and not booted:
            return (f"automatic reboot: the node is back in the scheduler without a new boot time (booted "
                    f"{info.boot_time}, asked at {at:.0f}): it did not reboot")
        if waited > self.cfg.reboot_timeout_s:
            return (f"automatic reboot: the node was not back {waited:.0f} s after the request "
                    f"(repairs.reboot_timeout_s {self.cfg.reboot_timeout_s:.0f}; {', '.join(sorted(info.states))})")
        return None

    def _escalate(self, order: RepairOrderRow, why: str) -> None:
        """The order now expects a technician's inspection, NVIDIA's step after a reboot that did not clear it."""
        self.book.expect(order.id, "inspect", f"{why}: NVIDIA's next step is support (hands-on)")
