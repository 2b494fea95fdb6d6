"""rasdaemon databases, tailed by row id: memory-controller (EDAC), PCIe AER, MCE and extlog events.

``databases`` lists paths or globs (``/srv/ras/*.db``: one database per node, named ``<host>.db``, as they
arrive from the nodes); each table of each database is read ``WHERE id > last`` through the same reader
replay uses (:class:`daemon.formats.rasdaemon_sqlite.RasdaemonReader`), and the last id per table is the saved
state, so a restart reads every new row once. A database that is missing or locked is an error of that
database; the others are read.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any, ClassVar

from daemon.batch import Batch
from daemon.collectors.collector import Collector, Outcome, merge_batches
from daemon.formats.rasdaemon_sqlite import RasdaemonReader


class RasdaemonCollector(Collector):
    """Tails rasdaemon SQLite databases; see the module docstring."""

    kind: ClassVar[str] = "rasdaemon"
    options: ClassVar[dict[str, Any]] = {"databases": ["/var/lib/rasdaemon/ras-mc_event.db"]}

    def paths(self) -> list[Path]:
        out: list[Path] = []
        for pattern in self.databases:
            matches = sorted(glob.glob(str(pattern))) if glob.has_magic(str(pattern)) else [str(pattern)]
            out += [Path(m) for m in matches]
        return out

    def collect(self, now: float) -> tuple[Batch, Outcome]:
        outcome = Outcome()
        reader = RasdaemonReader()
        batches = []
        cursors = self.state.setdefault("cursors", {})
        for path in self.paths():
            outcome.targets_total += 1
            if not path.exists():
                outcome.errors.append(f"{path}: no such file")
                continue
            rejected = self.ctx.rejects.total
            mine = cursors.setdefault(str(path), {})
            batches += list(reader.read(path, self.ctx, mine))
            if self.ctx.rejects.total > rejected and not mine:
                outcome.errors.append(f"{path}: not readable (see the rejected input)")
            else:
                outcome.targets_up += 1
        batch = merge_batches(batches)
        outcome.events = len(batch.events)
        return batch, outcome
