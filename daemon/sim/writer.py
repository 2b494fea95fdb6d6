"""Write a simulation as a recorded trace (ARCHITECTURE §8) that ``raswarden replay`` reads.

* ``dcgm-exporter.om`` and ``node-exporter.om``: OpenMetrics as ``promtool tsdb dump-openmetrics`` writes
  it (one family after another, one series after another, samples in time order, timestamps in seconds,
  no metadata, ``# EOF``), metric and label names as dcgm-exporter and node_exporter publish them (the name
  tables of ``daemon/names`` read backwards). Chunks stream to one spill file per family, so memory stays
  at one chunk; the families are assembled at the end;
* ``kernel.journal.json``: the kernel lines as a ``journalctl -o json`` export;
* ``topology.yaml``, ``labels.jsonl`` (every injected fault and confounder) and ``scenario.yaml``.

``fmt="parquet"`` writes the long columnar form instead of the two OpenMetrics files (for long scenarios).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import yaml

from daemon.batch import Batch
from daemon.formats.columnar import ColumnarWriter
from daemon.sim.engine import SimChunk, Simulator, chunk_to_batch, emitted_metrics
from daemon.sim.exposition import dcgm_labels, port_labels, reverse_names, to_source
from daemon.sim.faults import TemplateError

class TraceWriter:
    """Streams chunks of a simulation to a trace directory."""

    def __init__(self, sim: Simulator, out: Path, fmt: str = "openmetrics"):
        self.sim = sim
        self.out = out
        self.fmt = fmt
        out.mkdir(parents=True, exist_ok=True)
        topo = sim.topo
        self.gpu_metrics, self.port_metrics = emitted_metrics(sim.scenario.profile)
        self.samples = 0
        self.lines = 0
        if fmt == "parquet":
            self._columnar = ColumnarWriter(out)
        elif topo.vendors != ("nvidia",):
            raise TemplateError(f"{sim.scenario.source or sim.scenario.name}: the OpenMetrics trace form is written "
                                "as dcgm-exporter and node_exporter publish it; a topology with "
                                f"{', '.join(topo.vendors)} accelerators is written with --format parquet")
        else:
            dcgm_names = reverse_names("dcgm_exporter.csv")
            node_names = reverse_names("node_exporter.csv")
            self._spill_dir = Path(tempfile.mkdtemp(prefix=".spill-", dir=out))
            self._spills: dict[str, object] = {}
            self._ts: list[np.ndarray] = []
            self._gpu_series = []
            gpu_labels = [dcgm_labels(sim, i, scraped=True) for i in range(topo.n_gpus)]
            ib_labels = [port_labels(sim, i, scraped=True) for i in range(topo.n_ports)]
            for m in self.gpu_metrics:
                name, mask = dcgm_names[m]
                self._gpu_series.append((m, np.array([f"{name}{{{lb}}} " for lb in gpu_labels], dtype=object), mask))
            self._port_series = []
            for m in self.port_metrics:
                name, _ = node_names[m]
                self._port_series.append((m, np.array([f"{name}{{{lb}}} " for lb in ib_labels], dtype=object), None))
        self._journal = open(out / "kernel.journal.json", "w")

    def write(self, chunk: SimChunk) -> None:
        if self.fmt == "parquet":
            # Samples only: the kernel lines go to the journal below, as in the OpenMetrics form.
            samples = chunk_to_batch(self.sim, chunk).samples
            self._columnar.write(Batch(samples=samples))
            self.samples += len(samples)
        else:
            self._ts.append(chunk.ts)
            for metric, _, _ in self._gpu_series:
                self._spill(metric, chunk.gpu[metric], chunk.gpu_present)
            for metric, _, _ in self._port_series:
                self._spill(metric, chunk.port[metric], chunk.port_present)
        for ts, node, line in chunk.lines:
            self._journal.write(json.dumps({
                "__REALTIME_TIMESTAMP": str(int(round(ts * 1e6))), "_HOSTNAME": node, "_TRANSPORT": "kernel",
                "SYSLOG_IDENTIFIER": "kernel", "PRIORITY": "3" if "Xid" in line else "4", "MESSAGE": line,
            }) + "\n")
            self.lines += 1

    def _spill(self, metric: str, values: np.ndarray, present: np.ndarray) -> None:
        """Append a chunk's ``[series x steps]`` block of a family (NaN where absent) to its spill file."""
        fh = self._spills.get(metric)
        if fh is None:
            fh = self._spills[metric] = open(self._spill_dir / f"{metric}.f8", "wb")
        fh.write(np.where(present, values, np.nan).astype(np.float64).tobytes())

    def _assemble(self, fh, series) -> None:
        """Write each family's series one after another from the spill files."""
        ts = np.concatenate(self._ts) if self._ts else np.empty(0)
        stamps = [f"{t:.3f}".rstrip("0").rstrip(".") for t in ts]
        sizes = [len(t) for t in self._ts]
        for metric, prefixes, mask in series:
            self._spills.pop(metric).close()
            raw = np.fromfile(self._spill_dir / f"{metric}.f8", dtype=np.float64)
            n = len(prefixes)
            blocks, at = [], 0
            for size in sizes:
                blocks.append(raw[at : at + n * size].reshape(n, size))
                at += n * size
            table = np.concatenate(blocks, axis=1) if blocks else np.empty((n, 0))
            (self._spill_dir / f"{metric}.f8").unlink()
            table = to_source(table, mask)
            for prefix, row in zip(prefixes, table):
                keep = np.flatnonzero(~np.isnan(row))
                fh.write("".join(f"{prefix}{v:.15g} {stamps[j]}\n" for j, v in zip(keep.tolist(), row[keep].tolist())))
                self.samples += len(keep)
            del raw, table, blocks

    def close(self) -> None:
        sim = self.sim
        if self.fmt == "parquet":
            self._columnar.close()
        else:
            for path, series in (("dcgm-exporter.om", self._gpu_series), ("node-exporter.om", self._port_series)):
                with open(self.out / path, "w") as fh:
                    self._assemble(fh, series)
                    fh.write("# EOF\n")
            shutil.rmtree(self._spill_dir, ignore_errors=True)
        self._journal.close()
        per_node = sim.topo.gpus_per_node
        sim.topo.write(self.out / "topology.yaml", uuid_of=lambda n, g: f"GPU-{sim.uuids[n * per_node + g]}")
        with open(self.out / "labels.jsonl", "w") as fh:
            for label in sim.labels():
                fh.write(json.dumps(label) + "\n")
        if sim.scenario.source and Path(sim.scenario.source).is_file():
            shutil.copyfile(sim.scenario.source, self.out / "scenario.yaml")
        else:
            (self.out / "scenario.yaml").write_text(yaml.safe_dump({"name": sim.scenario.name,
                                                                     "seed": sim.scenario.seed}))


def simulate_to(sim: Simulator, out: Path, fmt: str = "openmetrics") -> TraceWriter:
    """Run a simulation into a trace directory; returns the closed writer (with its counts)."""
    writer = TraceWriter(sim, out, fmt)
    for chunk in sim.chunks():
        writer.write(chunk)
    writer.close()
    return writer
