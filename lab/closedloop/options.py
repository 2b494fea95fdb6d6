"""What a closed-loop run assumes about the site, its policies, and the version of its accounting."""

from __future__ import annotations

from dataclasses import dataclass, field

from detectors.contract import TICK_S
from playbooks.guards import Guards

POLICIES = ("none", "reactive", "full")
# How the jobs choose their periodic checkpoint interval (LoopOptions.checkpoint_policy):
# fixed: every job checkpoints every checkpoint_interval_s (an hour, as the first build's jobs did);
# daly: the best fixed interval a job could pick without raswarden, Daly's optimum for its size at the fleet's
#   long-run hard-failure rate (the scenario's expected rate: what an operator's fleet statistics give);
# oracle: Daly's optimum at the seed's own count of hard failures over its node-hours, which no job could know
#   beforehand (a month with more failures than usual gets shorter intervals from the start): the best any fixed
#   interval per job size could do;
# advised: jobs that opted in to raswarden's signals follow its advice (daemon/operations/advice.py), polled whenever it
# is made
#   (each tick that changed an incident, else every 5 minutes), the daly interval until they have any; a job whose
#   advised interval falls below its time since its last checkpoint checkpoints at once. The others checkpoint as
#   under daly.
CHECKPOINT_POLICIES = ("fixed", "daly", "oracle", "advised")


# What the figures mean; results of another version do not mix (2: a slow GPU holds back its job; 3: actions are
# scored per fault from its onset, and "acted on before failure" needs the drain; 4: the net loss leaves out the
# periodic checkpoints, reported beside it; 5: a drain is true only while its node carries the fault, and the
# technician returns a repaired node to service under every policy).
ACCOUNTING_VERSION = 5


@dataclass
class LoopOptions:
    """What the loop assumes about the site (stated in every report)."""

    interval_s: float = TICK_S  # the world's step: the scheduler, the faults and the technician move this often
    # raswarden's detection tick (a multiple of interval_s; None: interval_s): its pipeline runs this often and reads
    # every sample since its last tick, as a daemon with a longer tick than its exporters' scrape does; its playbooks
    # (checkpoint, the wait for it, the drain; validation) still step with the world
    tick_s: float | None = None
    repair_s: float = 24 * 3600.0  # out of service to repaired hardware
    hang_s: float = 600.0  # a job hangs this long on a dead GPU before it dies (PyTorch's NCCL timeout default)
    operator_response_s: float = 2 * 3600.0  # failure to an operator's drain, without raswarden
    # The technician works from raswarden's repair orders (issue 26): an order is taken technician_s after it opens
    # (or reopens), done once the node's repair is (repair_s after it went out; at once for a part found working),
    # and raswarden's validation returns the node, or sends it back. Off: the technician returns a repaired node
    # to service directly. A share of repairs leaves the fault in place (bad_repair_share): validated, the node
    # fails its validation and goes back to the technician; returned directly, it breaks the jobs placed on it.
    repair_orders: bool = False
    technician_s: float = 3600.0
    bad_repair_share: float = 0.0
    checkpoint_interval_s: float = 3600.0
    checkpoint_policy: str = "fixed"  # one of CHECKPOINT_POLICIES
    checkpoint_cost_s: float = 120.0
    restart_cost_s: float = 600.0  # requeue, reschedule, load the checkpoint, warm up
    opt_in_share: float = 0.9  # jobs that checkpoint on raswarden's signal
    # Budgets for one 80-blade supernode under a dense fault scenario (a hundred times the fleet's rate): failed
    # nodes are not repaired within a 14 h scenario, and every unavailable node counts against the budget.
    guards: Guards = field(default_factory=lambda: Guards(max_drained_nodes=16, max_cluster_fraction=0.2,
                                                          max_rack_fraction=0.25, breaker_incidents=40))

    def __post_init__(self) -> None:
        if self.checkpoint_policy not in CHECKPOINT_POLICIES:
            raise ValueError(f"unknown checkpoint policy {self.checkpoint_policy!r} (one of "
                             f"{', '.join(CHECKPOINT_POLICIES)})")

    def ticks_every(self) -> int:
        """How many world steps make one raswarden tick."""
        if self.tick_s is None:
            return 1
        every = int(round(self.tick_s / self.interval_s))
        if every < 1 or abs(every * self.interval_s - self.tick_s) > 1e-6:
            raise ValueError(f"raswarden's tick ({self.tick_s:g} s) must be a multiple of the world's step "
                             f"({self.interval_s:g} s)")
        return every
