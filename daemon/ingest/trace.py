"""A recorded trace: the telemetry files, the optional topology.yaml and labels.jsonl (docs/architecture.md §8)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from daemon.ingest.formats import Reader, describe_unread, sniff
from daemon.ingest.formats.kernellog import TextLogReader
from daemon.topology import Topology

log = logging.getLogger("raswarden.trace")


@dataclass
class Label:
    """One ground-truth label."""

    entity: str
    kind: str
    fault: str
    onset: float
    failure: float | None

    @property
    def benign(self) -> bool:
        return self.fault.startswith("benign_")


@dataclass
class Trace:
    """The files of one or more trace paths, sorted by name so discovery is deterministic."""

    files: list[tuple[Path, Reader]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # with what each file is and why it is not read
    topology_path: Path | None = None
    labels_path: Path | None = None

    @classmethod
    def discover(cls, paths: list[str | Path]) -> Trace:
        trace = cls()
        found: list[Path] = []
        for raw in paths:
            p = Path(raw)
            if p.is_dir():
                found.extend(sorted(q for q in p.rglob("*") if q.is_file()))
            elif p.is_file():
                found.append(p)
            else:
                raise FileNotFoundError(f"{p}: no such file or directory")
        for p in found:
            name = p.name
            if name in ("topology.yaml", "topology.yml"):
                trace.topology_path = p
            elif name == "labels.jsonl":
                trace.labels_path = p
            elif name.startswith("."):
                trace.skipped.append((p, "a hidden file"))
            elif name.endswith((".md", ".yaml", ".yml")):
                trace.skipped.append((p, "documentation or a scenario, not telemetry"))
            elif name.endswith(("-wal", "-shm")):
                trace.skipped.append((p, "SQLite's write-ahead log of a database beside it (read with it)"))
            else:
                reader = sniff(p)
                if reader is None:
                    why = describe_unread(p)
                    trace.skipped.append((p, why))
                    log.warning("%s: skipped: %s", p, why)
                else:
                    trace.files.append((p, reader))
        # Syslog lines carry no year: read them after the files whose stamps date the trace
        # (daemon.ingest.formats.kernellog)
        trace.files.sort(key=lambda f: isinstance(f[1], TextLogReader))
        return trace

    def sample_span(self) -> tuple[float, float] | None:
        """First and last sample time of the trace's Parquet sample files, from their row groups' statistics
        (nothing is read); None when there is no such file or one lacks the statistics."""
        import pyarrow.parquet as pq

        lo, hi = float("inf"), float("-inf")
        for path, _ in self.files:
            if path.suffix != ".parquet":
                continue
            try:
                meta = pq.ParquetFile(path).metadata
                names = [meta.schema.column(i).name for i in range(meta.num_columns)]
                if "kind" in names or "ts" not in names:  # events, or no time column
                    continue
                col = names.index("ts")
                for g in range(meta.num_row_groups):
                    stats = meta.row_group(g).column(col).statistics
                    if stats is None or not stats.has_min_max:
                        return None
                    lo, hi = min(lo, float(stats.min)), max(hi, float(stats.max))
            except (OSError, ValueError) as exc:
                log.warning("%s: no time span from its statistics: %s", path, exc)
                return None
        return (lo, hi) if lo <= hi else None

    def topology(self) -> Topology:
        return Topology.load(self.topology_path) if self.topology_path else Topology()

    def labels(self) -> list[Label]:
        if self.labels_path is None:
            return []
        out = []
        for n, line in enumerate(self.labels_path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append(Label(d["entity"], d.get("kind", ""), d["fault"], float(d["onset"]),
                                 None if d.get("failure") is None else float(d["failure"])))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s:%d: bad label: %s", self.labels_path, n, exc)
        return out
