"""rasdaemon databases, tailed by row id: memory-controller (EDAC), PCIe AER, MCE and extlog events.

``databases`` lists paths or globs (``/srv/ras/*.db``: one database per node, named ``<host>.db``, as they
arrive from the nodes); each table of each database is read ``WHERE id > last`` through the same reader
replay uses (:class:`daemon.ingest.formats.rasdaemon_sqlite.RasdaemonReader`), and the last id per table is the saved
state, so a restart reads every new row once. A database that is missing or locked is an error of that
database; the others are read. A shard's instance reads only its nodes' databases (by the host each is named for,
a node's name or one of its aliases); the others are not opened.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any, ClassVar

from daemon.ingest.batch import Batch
from daemon.ingest.collectors.collector import Collector, Outcome, merge_batches
from daemon.ingest.formats.rasdaemon_sqlite import RasdaemonReader, host_of_database


class RasdaemonCollector(Collector):
    """Tails rasdaemon SQLite databases; see the module docstring."""

    kind: ClassVar[str] = "rasdaemon"
    options: ClassVar[dict[str, Any]] = {"databases": ["/var/lib/rasdaemon/ras-mc_event.db"]}

    def paths(self) -> list[Path]:
        """The databases to read: every match of the globs, a shard's own nodes' only."""
        out: list[Path] = []
        hosts = self.ctx.shard_hosts
        for pattern in self.databases:
            matches = sorted(glob.glob(str(pattern))) if glob.has_magic(str(pattern)) else [str(pattern)]
            out += [Path(m) for m in matches if hosts is None or host_of_database(Path(m)) in hosts]
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
