"""The closed loop (``raswarden simulate SCENARIO --closed-loop``): simulated hardware, raswarden's detectors
and playbooks, and a simulated Slurm, with every GPU-hour accounted, under one of three policies:

* ``none``: no raswarden. A hard fault kills the job on its node; the node stays schedulable (Slurm does not
  see a GPU off the bus), so jobs placed on it crash, until an operator drains it ``operator_response_s``
  after the failure.
* ``reactive``: raswarden acts on ``failed`` incidents only: drain and requeue right after the failure. Only
  the rules run (they alone say ``failed``).
* ``full``: every built-in playbook on every incident (checkpoint, drain and requeue ahead of the failure),
  with the learned detectors when a model is given.

The loop is closed both ways: playbooks act on the simulated scheduler, and the simulator's workload follows
the scheduler (a GPU is busy while a job runs on it, idle on a drained node and while a job restarts), so
the detectors see what a drain does. A hard fault breaks its node at the labelled failure time (the job on it
hangs for ``hang_s``, the collective timeout, then dies) and is repaired ``repair_s`` after the node is taken
out of service for it, when the fault's effects stop, and the technician returns it to service (resumes it,
whoever drained it; the same under every policy). A node raswarden drains (and its job has left) while it
carries a fault that has not failed yet goes to repair right then: the part is replaced and the failure never
happens. Time under repair is not counted as idle (the node is out for ``repair_s`` whoever takes it
out, so only when differs); time drained on working hardware is: that is what a false drain costs. A fabric
port that fails kills the job on its node (its collectives fail) but leaves the node usable on its other
rails. The same operator acts under every policy (a
node raswarden already drained needs nothing from them). A job runs at the pace of its slowest GPU: a
fail-slow GPU (or a throttling one) holds back the whole synchronous job, and the time is accounted as
*slowed*; left alone, a fail-slow GPU recovers (or is found by someone) at the end of its labelled window,
and a drain sends it to repair like any other fault.

The package: ``options`` (what the loop assumes), ``world`` (faults, operators, technicians, the workload),
``loop`` (one run), ``outcome`` (the run scored), ``report`` (tables over runs)."""

from lab.closedloop.loop import run
from lab.closedloop.options import ACCOUNTING_VERSION, POLICIES, LoopOptions
from lab.closedloop.outcome import LoopResult

__all__ = ["ACCOUNTING_VERSION", "POLICIES", "LoopOptions", "LoopResult", "run"]
