"""Write a simulation as a recorded trace (docs/architecture.md §8) that ``raswarden replay`` reads.

* ``dcgm-exporter.om`` and ``node-exporter.om`` (and, for AMD and Ascend blades,
  ``amd-device-metrics-exporter.om`` and ``npu-exporter.om``): OpenMetrics as ``promtool tsdb
  dump-openmetrics`` writes it (one family after another, one series after another, samples in time order,
  timestamps in seconds, no metadata, ``# EOF``), metric and label names as each exporter publishes them
  (the name tables of ``daemon/ingest/names`` read backwards, values through the inverse of their transforms). A
  canonical metric an exporter has no name for (the kernel's AER counter of an NPU, which raswarden reads
  from sysfs) is left out of this form and listed in ``unpublished``. Chunks stream to one spill file per
  family, so memory stays at one chunk; the families are assembled at the end;
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

from daemon.ingest.batch import Batch
from daemon.ingest.formats.columnar import ColumnarWriter
from lab.sim.batches import chunk_to_batch, emission
from lab.sim.simulator import STILL_REPORTED, SimChunk, Simulator
from lab.sim.exporter_names import Family, published_families

class TraceWriter:
    """Streams chunks of a simulation to a trace directory."""

    def __init__(self, sim: Simulator, out: Path, fmt: str = "openmetrics"):
        self.sim = sim
        self.out = out
        self.fmt = fmt
        out.mkdir(parents=True, exist_ok=True)
        self.samples = 0
        self.lines = 0
        self.unpublished: list[str] = []  # canonical metrics an exporter's table has no name for (not written)
        if fmt == "parquet":
            self._columnar = ColumnarWriter(out)
        else:
            self._spill_dir = Path(tempfile.mkdtemp(prefix=".spill-", dir=out))
            self._spills: dict[int, object] = {}
            self._ts: list[np.ndarray] = []
            self._families, self.unpublished = published_families(sim, emission(sim, sim.scenario.profile),
                                                                   scraped=True)
        self._journal = open(out / "kernel.journal.json", "w")

    def write(self, chunk: SimChunk) -> None:
        if self.fmt == "parquet":
            # Samples only: the kernel lines go to the journal below, as in the OpenMetrics form.
            samples = chunk_to_batch(self.sim, chunk).samples
            self._columnar.write(Batch(samples=samples))
            self.samples += len(samples)
        else:
            self._ts.append(chunk.ts)
            for key, f in enumerate(self._families):
                values, present = ((chunk.gpu[f.metric], chunk.gpu_emitted()) if f.is_gpu
                                   else (chunk.port[f.metric], chunk.port_emitted()))
                if f.metric in STILL_REPORTED:
                    present = np.ones_like(present) if chunk.gpu_sampled is None else chunk.gpu_sampled
                self._spill(key, values[f.rows], present[f.rows])
        for ts, node, line in chunk.lines:
            self._journal.write(json.dumps({
                "__REALTIME_TIMESTAMP": str(int(round(ts * 1e6))), "_HOSTNAME": node, "_TRANSPORT": "kernel",
                "SYSLOG_IDENTIFIER": "kernel", "PRIORITY": "3" if "Xid" in line else "4", "MESSAGE": line,
            }) + "\n")
            self.lines += 1

    def _spill(self, key: int, values: np.ndarray, present: np.ndarray) -> None:
        """Append a chunk's ``[series x steps]`` block of a family (NaN where absent) to its spill file."""
        fh = self._spills.get(key)
        if fh is None:
            fh = self._spills[key] = open(self._spill_dir / f"{key}.f8", "wb")
        fh.write(np.where(present, values, np.nan).astype(np.float64).tobytes())

    def _assemble(self, fh, key: int, family: Family) -> None:
        """Write one family's series one after another from its spill file."""
        prefixes, source = family.prefixes, family.source
        ts = np.concatenate(self._ts) if self._ts else np.empty(0)
        stamps = [f"{t:.3f}".rstrip("0").rstrip(".") for t in ts]
        sizes = [len(t) for t in self._ts]
        self._spills.pop(key).close()
        raw = np.fromfile(self._spill_dir / f"{key}.f8", dtype=np.float64)
        n = len(prefixes)
        blocks, at = [], 0
        for size in sizes:
            blocks.append(raw[at : at + n * size].reshape(n, size))
            at += n * size
        table = np.concatenate(blocks, axis=1) if blocks else np.empty((n, 0))
        (self._spill_dir / f"{key}.f8").unlink()
        table = source.values(table)
        obs = self.sim.observation
        nodes = (self.sim.gpu_node if family.is_gpu else self.sim.port_node)[family.rows]
        for k, (prefix, row) in enumerate(zip(prefixes, table)):
            keep = np.flatnonzero(~np.isnan(row))
            if obs:  # each node's scrapes carry their own jittered stamps (lab.sim.observe)
                own = obs.stamps("dcgm" if family.is_gpu else "node", nodes[k : k + 1], ts[keep])[0]
                at = [f"{t:.3f}".rstrip("0").rstrip(".") for t in own.tolist()]
            else:
                at = [stamps[j] for j in keep.tolist()]
            fh.write("".join(f"{prefix}{v:.15g} {t}\n" for t, v in zip(at, row[keep].tolist())))
            self.samples += len(keep)
        del raw, table, blocks

    def close(self) -> None:
        sim = self.sim
        if self.fmt == "parquet":
            self._columnar.close()
        else:
            for path in dict.fromkeys(f.path for f in self._families):
                with open(self.out / path, "w") as fh:
                    for key, family in enumerate(self._families):
                        if family.path == path:
                            self._assemble(fh, key, family)
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
