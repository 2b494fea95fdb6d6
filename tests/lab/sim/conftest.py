from pathlib import Path

import pytest

from lab.sim.simulator import Simulator
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = ROOT / "fixtures" / "faults"
SCENARIOS = ROOT / "fixtures" / "scenarios"


@pytest.fixture(scope="session")
def library():
    return load_library(LIBRARY)


def make(library, faults, accelerators=32, duration="4h", resolution="30s", seed=1, profile="full", jobs=None):
    jobs = jobs or {"nodes_per_job": [4, 4], "duration": ["10h", "10h"], "gap": ["1m", "1m"], "partial_share": 0.0}
    sc = Scenario.from_dict({"name": "t", "seed": seed, "topology": {"accelerators": accelerators},
                             "duration": duration, "resolution": resolution, "profile": profile, "jobs": jobs,
                             "faults": faults})
    return Simulator(sc, library)


def collect(sim):
    """All chunks of a simulation glued along time: (ts, gpu arrays, port arrays, presence, lines)."""
    import numpy as np

    chunks = list(sim.chunks())
    ts = np.concatenate([c.ts for c in chunks])
    gpu = {m: np.concatenate([c.gpu[m] for c in chunks], axis=1) for m in chunks[0].gpu}
    port = {m: np.concatenate([c.port[m] for c in chunks], axis=1) for m in chunks[0].port}
    gp = np.concatenate([c.gpu_present for c in chunks], axis=1)
    pp = np.concatenate([c.port_present for c in chunks], axis=1)
    lines = [x for c in chunks for x in c.lines]
    return ts, gpu, port, gp, pp, lines
