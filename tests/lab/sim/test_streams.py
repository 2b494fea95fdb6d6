"""A scenario and seed are one world whatever chunks the simulator makes it in (lab/sim/streams.py): the matrix
evaluates a step or a tick at a time, a trace is written 240 steps at a time, and both must see the same fleet."""

import numpy as np
import pytest

from lab.sim.scenario import Scenario
from lab.sim.simulator import Simulator
from lab.sim.streams import StepStreams
from tests.lab.sim.test_simulator import FAULTS

JOBS = {"nodes_per_job": [2, 4], "duration": ["20m", "1h"], "gap": ["1m", "10m"], "partial_share": 0.3}


def world(library, chunk_steps: int | None, noise: str = "bursty", topology: dict | None = None,
          faults: list | None = None) -> dict:
    """Every array of a simulation glued along time, with what each exporter sampled and the kernel lines."""
    sc = Scenario.from_dict({"name": "t", "seed": 7, "topology": topology or {"accelerators": 64},
                             "duration": "4h", "resolution": "30s", "profile": "full", "jobs": JOBS, "noise": noise,
                             "sampling": {"dcgm": {"interval": "30s", "jitter": "2s", "missed": 0.02},
                                          "node": {"interval": "60s", "jitter": "3s"}},
                             "faults": FAULTS if faults is None else faults})
    out: dict[str, list] = {}
    for c in Simulator(sc, library).chunks(chunk_steps=chunk_steps):
        arrays = {**{f"gpu:{m}": a for m, a in c.gpu.items()}, **{f"port:{m}": a for m, a in c.port.items()},
                  "gpu_present": c.gpu_present, "port_present": c.port_present, "gpu_sampled": c.gpu_sampled,
                  "port_sampled": c.port_sampled, "speed": c.gpu_speed, "ts": c.ts[None, :]}
        for name, a in arrays.items():
            out.setdefault(name, []).append(a)
        out.setdefault("lines", []).extend(c.lines)
    glued = {name: np.concatenate(parts, axis=1) for name, parts in out.items() if name != "lines"}
    glued["lines"] = out.get("lines", [])
    return glued


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        if name == "lines":
            assert a[name] == b[name]
        else:
            assert np.array_equal(a[name], b[name], equal_nan=True), name


@pytest.mark.parametrize("chunk_steps", [1, 3, 9, 240])
def test_a_scenario_is_the_same_world_in_chunks_of_any_size(library, chunk_steps):
    """Every fault class and confounder (counter resets, a vanished exporter, kernel lines), the bursty preset's
    touched cables, jobs coming and going, jittered and lost scrapes: chunks of one step, a few, more than the
    counters' column-by-column sums take, and a trace's 240 give the same fleet to the bit."""
    assert_same(world(library, 8), world(library, chunk_steps))


@pytest.mark.parametrize("noise", ["quiet", "loaded"])
def test_the_other_noise_presets_too(library, noise):
    """The quiet preset's one rate per counter, and errors that follow use (a port's its node's share of busy GPUs)."""
    assert_same(world(library, 1, noise), world(library, 37, noise))


def test_nvlink_recoveries_of_a_gb200_rack(library):
    """NVLink 5's recoveries, drawn from a fault's errors and a healthy link's rare own."""
    topology = {"preset": "nvl72", "accelerators": 72}
    faults = [{"entity": "nvl01-t03/gpu1", "fault": "nvlink_errors", "template": "a", "onset": "30m",
               "failure": "3h"}]
    one, many = world(library, 1, "realistic", topology, faults), world(library, 240, "realistic", topology, faults)
    assert_same(one, many)
    assert one["gpu:nvlink_recovery_total"].max() > 0


def test_each_quantity_draws_step_by_step_from_a_stream_of_its_own():
    """A chunk's draws are its steps' in order; another quantity drawn between them changes nothing."""
    whole = StepStreams(3, 1)
    a = whole.normal("x", 0.0, 1.0, 5, 6)
    split = StepStreams(3, 1)
    first = split.normal("x", 0.0, 1.0, 5, 2)
    split.uniform("y", 0.0, 1.0, 5, 4)
    assert np.array_equal(a, np.hstack([first, split.normal("x", 0.0, 1.0, 5, 4)]))
    assert not np.array_equal(a, StepStreams(4, 1).normal("x", 0.0, 1.0, 5, 6))
    (parts, steps), sizes = whole.geometric_at("g", 0.5, np.array([[0, 1], [1, 0]]))
    assert list(zip(parts, steps)) == [(1, 0), (0, 1)] and len(sizes) == 2 and (sizes >= 1).all()
