from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from daemon.ingest.batch import Batch
from daemon.ingest.formats import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.topology import Topology

TOPO = {"racks": [{"name": "r01", "nodes": [
    {"name": "sn01-b01", "aliases": ["10.0.1.11"],
     "accelerators": [{"index": 0, "pci_bus_id": "0000:18:00.0"}, {"index": 2, "pci_bus_id": "0000:3a:00.0"}],
     "ports": [{"device": "mlx5_0", "port": 1, "pci": "0000:0c:00.0", "netdev": "ibp12s0"}]},
]}]}


@pytest.fixture
def ctx() -> ReadContext:
    return ReadContext(mapper=SeriesMapper(topology=Topology.from_dict(TOPO)))


def read_all(reader, path: Path, ctx: ReadContext) -> Batch:
    batches = list(reader.read(path, ctx))
    samples = [b.samples for b in batches if len(b.samples)]
    events = [b.events for b in batches if len(b.events)]
    out = Batch()
    if samples:
        out.samples = pd.concat([s.astype({"entity": str, "metric": str}) for s in samples], ignore_index=True)
    if events:
        out.events = pd.concat(events, ignore_index=True)
    return out
