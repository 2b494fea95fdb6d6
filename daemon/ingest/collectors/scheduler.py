"""The scheduler's view of the nodes as reboot evidence (issue 24): when each node booted, and which it is rebooting.

A node the scheduler reboots (``scontrol reboot``: state flag ``REBOOT_ISSUED``) or powers up (``POWERING_UP``)
loses its telemetry and comes back with its counters at zero and its links training. The pipeline's reboot grace
(docs/rules.md) then keeps the link-state rules quiet; without this collector it starts only at the kernel's boot
banner or a new ``node_boot_time_seconds`` after the node is back, and a node without node_exporter or a forwarded
journal has neither. Each collection is one ``sinfo --json``: a node's ``boot_time`` becomes its ``boot_time_s``
gauge (a new one is reboot evidence, as node_exporter's is), and a node being rebooted or powered up gives a
``boot`` event at every collection while it is. Slurm's node names are raswarden's through the topology's
``scheduler_name`` (or its host aliases); a node the topology does not place is left out.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.collectors.collector import Collector, Outcome
from daemon.ingest.formats.openmetrics import samples_frame
from detectors.schema import events_frame
from playbooks.scheduler import SchedulerError
from playbooks.slurm import SlurmScheduler

SOURCE = "slurm"


class SlurmNodesCollector(Collector):
    """Reads Slurm's node states; see the module docstring."""

    kind: ClassVar[str] = "slurm"
    options: ClassVar[dict[str, Any]] = {"slurm_conf": "", "bin_dir": "", "timeout_s": 10.0}

    def __init__(self, name: str, ctx, **options: Any):
        super().__init__(name, ctx, **options)
        if float(self.timeout_s) <= 0:
            raise ValueError("timeout_s: must be positive")
        self.slurm = SlurmScheduler(self.slurm_conf or None, timeout_s=float(self.timeout_s),
                                    bin_dir=self.bin_dir or None)
        topology = ctx.mapper.topology
        self._node_of = {slurm: node for node, slurm in topology.scheduler_name.items()}

    def node(self, slurm_name: str) -> str | None:
        """raswarden's node for a Slurm node name (None: not in the topology's fleet)."""
        node = self._node_of.get(slurm_name) or self.ctx.mapper.topology.resolve_host(slurm_name)
        known = self.ctx.mapper.topology.node_rack
        return node if node and (not known or node in known) else None

    def collect(self, now: float) -> tuple[Batch, Outcome]:
        outcome = Outcome(targets_total=1)
        try:
            nodes = self.slurm.nodes()
        except SchedulerError as exc:
            outcome.errors.append(str(exc))
            return Batch(), outcome
        outcome.targets_up = 1
        mapper = self.ctx.mapper
        sids, values, events = [], [], []
        for info in nodes.values():
            node = self.node(info.name)
            if node is None:
                continue
            if info.boot_time is not None:
                sids.append(mapper.canonical_series(node, "boot_time_s"))
                values.append(info.boot_time)
            if info.booting:
                events.append((now, node, "boot", None, "info", f"Slurm: {info.name} {info.booting}", SOURCE, None,
                               None))
        batch = Batch()
        if sids:
            batch.samples = samples_frame(mapper, np.asarray(sids, dtype=np.int64), np.full(len(sids), now),
                                          np.asarray(values, dtype=np.float64), SOURCE)
        if events:
            batch.events = events_frame(events)
        outcome.samples, outcome.events = len(batch.samples), len(batch.events)
        return batch, outcome
